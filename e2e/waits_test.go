package e2e

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// Issue 24 item 6, the waits TestWaitsSayWhat does not cover: reload,
// remove and service install, each made to wait past 2 s by what it
// really waits on, with the real binary.

// timedLine is a line of a command's stderr and when it was read.
type timedLine struct {
	at   time.Duration // since the command started
	text string
}

// watched is a finished command: its stderr lines as they came, its
// stdout, exit status and run time.
type watched struct {
	lines  []timedLine
	stdout string
	code   int
	took   time.Duration
}

func (w watched) stderr() string {
	var b strings.Builder
	for _, l := range w.lines {
		b.WriteString(l.text + "\n")
	}
	return b.String()
}

// runWatched runs cmd (stdout and stderr pipes, not a terminal) and
// records when each stderr line arrives.
func runWatched(t *testing.T, cmd *exec.Cmd) watched {
	t.Helper()
	var out strings.Builder
	cmd.Stdout = &out
	pr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var w watched
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		w.lines = append(w.lines, timedLine{at: time.Since(t0), text: sc.Text()})
	}
	err = cmd.Wait()
	w.took = time.Since(t0)
	w.stdout = out.String()
	if ee, ok := err.(*exec.ExitError); ok {
		w.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	return w
}

var elapsedRE = regexp.MustCompile(` — (\d+)s elapsed, timeout (\d+)s$`)

// saysWhatItAwaits fails t unless w's progress lines (progressLines) all
// name want and the timeout timeout, their elapsed times grow, they come
// at least every 2 s (1 s of slack for a loaded machine) until the
// command ends, and the command did wait past 2 s (else the test set up
// nothing to see).
func saysWhatItAwaits(t *testing.T, verb string, w watched, want, timeout string) {
	t.Helper()
	var prog []timedLine
	for _, l := range w.lines {
		if len(progressLines(l.text)) == 1 {
			prog = append(prog, l)
		}
	}
	if len(prog) == 0 {
		t.Fatalf("%s: waited %s, no progress line on stderr:\n%s", verb, w.took, w.stderr())
	}
	const most = 3 * time.Second // every 2 s, with 1 s of slack
	last := -1
	for i, l := range prog {
		m := elapsedRE.FindStringSubmatch(l.text)
		if !strings.Contains(l.text, "waiting for "+want) || m == nil || m[2]+"s" != timeout {
			t.Errorf("%s: progress line %q: want it to name %q, the time elapsed and timeout %s", verb, l.text, want, timeout)
			continue
		}
		el, _ := strconv.Atoi(m[1]) // \d+
		if el <= last {
			t.Errorf("%s: elapsed does not grow: %q after %ds", verb, l.text, last)
		}
		last = el
		if i > 0 && l.at-prog[i-1].at > most {
			t.Errorf("%s: %s between progress lines %q and %q", verb, l.at-prog[i-1].at, prog[i-1].text, l.text)
		}
	}
	if end := w.took - prog[len(prog)-1].at; end > most {
		t.Errorf("%s: silent for %s after its last progress line %q", verb, end, prog[len(prog)-1].text)
	}
	for _, l := range prog {
		t.Logf("%s, at %s: %s", verb, l.at.Round(time.Millisecond), l.text)
	}
	t.Logf("%s ended at %s", verb, w.took.Round(time.Millisecond))
	if strings.Contains(w.stderr(), "\x1b[") {
		t.Errorf("%s: piped progress has escape sequences: %q", verb, w.stderr())
	}
}

// hangFleetd stops fleet's fleetd with SIGSTOP (it keeps its port: the
// kernel accepts connections nobody answers, as with a hung fleetd) and
// continues it when the test ends.
func hangFleetd(t *testing.T, e *harness.Env, fleet string) {
	t.Helper()
	pid := readState(t, e, fleet).Fleetd.PID
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
}

// TestReloadAndRemoveSayWhatTheyAwait: with kb's fleetd hung (SIGSTOP;
// restart = "never" so the supervisor leaves it), serve's reload waits
// for kb's tools/list until its bound (proxy.ListToolsTimeout, 5 s):
// `reload`, and `remove docs` (which asks serve to reload), print a line
// at least every 2 s naming that wait, the elapsed time and the reload's
// timeout, and both end well within it.
func TestReloadAndRemoveSayWhatTheyAwait(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"}, harness.Fleet{Name: "docs"})
	editConfig(t, e, func(s string) string {
		return strings.Replace(s, "[fleets.kb]\n", "[fleets.kb]\nrestart = \"never\"\n", 1)
	})
	serve := e.StartServe()
	t.Cleanup(func() { t.Logf("serve's log:\n%s", serve.Log()) })
	e.MustRun("start", "kb")
	hangFleetd(t, e, "kb")

	const awaited = "fleetmgr serve to re-read fleets.toml and list each running fleet's tools again"
	w := runWatched(t, e.Command(bins.Fleetmgr, "--config", e.ConfigPath, "reload"))
	if w.code != 0 || w.took < 2*time.Second {
		t.Fatalf("reload with a hung fleetd: exit %d after %s (want 0, after more than 2 s)\n%s%s", w.code, w.took, w.stdout, w.stderr())
	}
	saysWhatItAwaits(t, "reload", w, awaited, "15s")

	w = runWatched(t, e.Command(bins.Fleetmgr, "--config", e.ConfigPath, "remove", "docs"))
	t.Logf("remove docs: %s", w.stdout)
	if w.code != 0 || w.took < 2*time.Second || !strings.Contains(w.stdout, ") re-read the file:") {
		t.Fatalf("remove docs with kb's fleetd hung: exit %d after %s (want 0, after more than 2 s, serve reloaded)\n%s%s", w.code, w.took, w.stdout, w.stderr())
	}
	saysWhatItAwaits(t, "remove", w, awaited, "15s")
	if b, _ := os.ReadFile(e.ConfigPath); strings.Contains(string(b), "[fleets.docs]") {
		t.Errorf("remove docs left its table:\n%s", b)
	}
}

// TestServiceInstallSaysWhatItAwaits: service install waits on systemctl
// --user, which waits on the user's service manager. Here the manager's
// socket ($XDG_RUNTIME_DIR/systemd/private) accepts and answers nothing
// for 5 s, then hangs up, as a wedged user manager would: the real
// systemctl waits that long, and install prints a line at least every 2 s
// naming the systemctl command, the time elapsed and its 30 s bound; then
// it prints what to run and exits 1 (item 12).
func TestServiceInstallSaysWhatItAwaits(t *testing.T) {
	if _, err := exec.LookPath("systemctl"); err != nil {
		t.Skip("no systemctl here: service install runs it")
	}
	b := newBare(t)
	proj := b.mkdir(t, "proj")
	b.mustRun(t, "init", "--project", proj)
	rt := filepath.Join(b.dir, "rt")
	if err := os.MkdirAll(filepath.Join(rt, "systemd"), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(rt, "systemd", "private"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); ln.Close(); wg.Wait() })
	accepted := make(chan struct{}, 16)
	wg.Add(1)
	go func() { // the wedged user manager: holds each connection 5 s
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Second): // the manager's silence itself: the wait under test
				}
			}()
		}
	}()

	cmd := exec.Command(bins.Fleetmgr, "service", "install", "--manager", "systemd")
	cmd.Env, cmd.Dir = append(append([]string{}, b.env...), "XDG_RUNTIME_DIR="+rt), b.dir
	w := runWatched(t, cmd)
	if len(accepted) == 0 {
		t.Fatalf("systemctl never reached the user manager's socket:\n%s%s", w.stdout, w.stderr())
	}
	if w.code != 1 || w.took < 2*time.Second || !strings.Contains(w.stdout, "systemctl --user daemon-reload") {
		t.Fatalf("service install with a wedged user manager: exit %d after %s (want 1 after more than 2 s, and what to run)\n%s%s", w.code, w.took, w.stdout, w.stderr())
	}
	saysWhatItAwaits(t, "service install", w, "systemctl --user daemon-reload to answer", "30s")
}
