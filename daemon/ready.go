package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Readiness is the write end of the pipe on which a detached daemon tells
// the `fleetmgr serve --detach` that started it how its start-up ended:
// "ready PID" once it serves, or "error MESSAGE" (say, another serve holds
// the state dir), so the caller reports the daemon's own failure at once
// instead of waiting for a socket that never answers. The pipe is passed
// down both detach stages as fd 3 (--daemon-ready-fd); a nil or zero
// Readiness (no pipe: a serve in the foreground) does nothing.
type Readiness struct{ f *os.File }

// OpenReadiness opens the readiness pipe detach stage stage (1 or 2; 0 is
// a serve not detached) was given as fd. It is made close-on-exec at once,
// so no fleet process started later inherits it (the caller's read ends
// only when every copy of the write end is gone).
func OpenReadiness(stage, fd int) *Readiness {
	if stage == 0 || fd < 3 {
		return &Readiness{}
	}
	syscall.CloseOnExec(fd)
	return &Readiness{f: os.NewFile(uintptr(fd), "daemon-ready")}
}

// OK reports a daemon that serves.
func (r *Readiness) OK() { r.say("ready " + strconv.Itoa(os.Getpid())) }

// Fail reports a daemon that will not serve, with why.
func (r *Readiness) Fail(err error) { r.say("error " + err.Error()) }

func (r *Readiness) say(msg string) {
	if r == nil || r.f == nil {
		return
	}
	_, _ = io.WriteString(r.f, msg)
	r.f.Close()
	r.f = nil
}

// errDetachedExit is a daemon that ended its start-up without a word.
var errDetachedExit = errors.New("the detached fleetmgr serve exited during start-up")

// awaitReady reads what a detached daemon says on the read end of its
// readiness pipe (after the caller closed its own write end): its pid once
// it serves, or its error. It gives up at timeout or when ctx ends.
func awaitReady(ctx context.Context, r *os.File, timeout time.Duration) (int, error) {
	type answer struct {
		text string
		err  error
	}
	got := make(chan answer, 1)
	_ = r.SetReadDeadline(time.Now().Add(timeout))
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, 64<<10))
		got <- answer{string(b), err}
	}()
	var a answer
	select {
	case <-ctx.Done():
		_ = r.SetReadDeadline(time.Now()) // ends the read
		return 0, ctx.Err()
	case a = <-got:
	}
	switch {
	case strings.HasPrefix(a.text, "ready "):
		pid, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(a.text, "ready ")))
		return pid, nil
	case strings.HasPrefix(a.text, "error "):
		return 0, errors.New(strings.TrimPrefix(a.text, "error "))
	case errors.Is(a.err, os.ErrDeadlineExceeded):
		return 0, fmt.Errorf("the detached fleetmgr serve did not come up within %s", timeout)
	}
	return 0, errDetachedExit
}
