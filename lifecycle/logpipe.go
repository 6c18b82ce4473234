package lifecycle

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fleetmgr/fleetmgr/atomicfile"
	"github.com/fleetmgr/fleetmgr/diskreserve"

	"golang.org/x/sys/unix"
	"gopkg.in/natefinch/lumberjack.v2"
)

// Log rotation (docs/ARCHITECTURE.md "Logs"). A fleet's fleetd and herdr server must
// outlive the fleetmgr that started them, so nothing in serve or the CLI
// may sit between a child and its log file. Each is therefore started
// through `fleetmgr logpipe --file F -- argv…` (ExecLogged): that process
// starts a copier (`fleetmgr logpipe --file F`, RunLogPipe) reading a pipe,
// points its own stdout/stderr at the pipe and then execs argv. The child
// keeps the pid (and start time) we recorded and leads its own session; the
// copier is its child in the same session and process group, owns the
// lumberjack writer that rotates the file by size, ignores SIGTERM and
// exits when the last writer closes the pipe. Stopping the fleet's session
// therefore also ends its copier, and the copier needs nobody else alive.
// docs/ARCHITECTURE.md "Logs" weighs this against copytruncate.

// SetLogPipe makes every fleet process this Manager starts write through
// `exe logpipe` (normally the fleetmgr executable itself), rotated at
// [manager] log_max_mb. With exe "" (the default) children append to their
// log file directly and nothing rotates it.
func (m *Manager) SetLogPipe(exe string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.logPipe = exe
}

// spawn starts argv like the package function spawn, through the log pipe
// when one is set. argv[0] is resolved first, so a missing executable is
// reported by name here rather than by the pipe.
func (m *Manager) spawn(argv []string, dir string, env []string, logPath string) (*exec.Cmd, Proc, error) {
	m.mu.Lock()
	pipe := m.logPipe
	m.mu.Unlock()
	if pipe != "" && len(argv) > 0 {
		bin, err := exec.LookPath(argv[0])
		if err != nil {
			return nil, Proc{}, fmt.Errorf("start %s: %w", argv[0], err)
		}
		wrapped := []string{pipe, "logpipe", "--file", logPath,
			"--max-mb", strconv.Itoa(m.Config().Manager.LogMaxMB), "--backups", strconv.Itoa(m.Config().Manager.LogMaxBackups), "--", bin}
		argv = append(wrapped, argv[1:]...)
	}
	cmd, p, err := spawn(argv, dir, env, logPath)
	if err == nil {
		// Recorded at once, before the caller waits for it to be ready: a
		// start killed in between leaves a record the supervisor adopts.
		if b, jerr := json.Marshal(p); jerr == nil {
			_ = writeFileAtomic(spawnedPath(logPath), b, 0o600)
		}
	}
	return cmd, p, err
}

// spawnedPath is where spawn records the last process it started for a
// log: <fleet dir>/<proc>.spawned.json next to <proc>.log.
func spawnedPath(logPath string) string {
	return strings.TrimSuffix(logPath, ".log") + ".spawned.json"
}

// readSpawned returns the last process spawned for fleet name's proc.
func (m *Manager) readSpawned(name, proc string) *Proc {
	b, err := atomicfile.Read(spawnedPath(m.LogPath(name, proc)), atomicfile.MaxSmall)
	if err != nil {
		return nil
	}
	var p Proc
	if json.Unmarshal(b, &p) != nil || p.PID <= 0 {
		return nil
	}
	return &p
}

// LogPipeArgs are `fleetmgr logpipe`'s flags (spawn writes them).
type LogPipeArgs struct {
	File           string   // --file: the log file
	MaxMB, Backups int      // --max-mb, --backups: rotation (RunLogPipe)
	ReadyFD        int      // --ready-fd: the copier's readiness pipe (ExecLogged's fd 3)
	Command        []string // after --: the command to run (its argv[0] a path)
}

// LogPipeError is a failure of `fleetmgr logpipe` with the exit status it
// calls for: 2 without --file, 127 when the command could not be executed
// (as a shell says of a command it cannot run).
type LogPipeError struct {
	Status int
	Err    error
}

func (e *LogPipeError) Error() string   { return e.Err.Error() }
func (e *LogPipeError) Unwrap() error   { return e.Err }
func (e *LogPipeError) ExitStatus() int { return e.Status }

// LogPipe is `fleetmgr logpipe`: with a Command it is the wrapper
// (ExecLogged, self being this executable), returning only on failure;
// without one it is the copier: it ignores SIGTERM, SIGINT, SIGHUP and
// SIGPIPE (it ends when the last writer closes the pipe, after writing
// everything, whatever signals its process group gets), says so with a
// byte on ReadyFD, then copies stdin (RunLogPipe).
func LogPipe(stdin io.Reader, a LogPipeArgs) error {
	if a.File == "" {
		return &LogPipeError{Status: 2, Err: errors.New("logpipe: --file is required")}
	}
	if len(a.Command) > 0 {
		self, err := os.Executable()
		if err == nil {
			err = ExecLogged(self, a.File, a.MaxMB, a.Backups, a.Command)
		}
		return &LogPipeError{Status: 127, Err: err}
	}
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	if a.ReadyFD > 0 { // the wrapper may exec the child now
		if f := os.NewFile(uintptr(a.ReadyFD), "ready"); f != nil {
			_, _ = f.Write([]byte{1})
			f.Close()
		}
	}
	return RunLogPipe(stdin, a.File, a.MaxMB, a.Backups)
}

// RunLogPipe copies r (a child's stdout and stderr) into path, each line
// beginning with the time it was read (logtime.go), rotating it
// when it reaches maxMB megabytes and keeping backups rotated files (0:
// all), until r reaches EOF. It is the copier half of `fleetmgr logpipe`.
// It never stops reading before EOF, so the child never blocks on a full
// pipe: a failed write is reported (the first of them) and the copying
// goes on. Nothing is written that would leave fewer than
// diskreserve.KeepFree bytes free on the log's file system (the state
// dir's). Reads are at most 32 KiB, well under lumberjack's limit of one
// write per file size.
func RunLogPipe(r io.Reader, path string, maxMB, backups int) error {
	lj := &lumberjack.Logger{Filename: path, MaxSize: maxMB, MaxBackups: backups}
	sw := &stampWriter{w: lj, now: time.Now} // a timestamp per line (logtime.go)
	buf := make([]byte, 32<<10)
	var werr error
	for {
		n, err := r.Read(buf)
		if n > 0 {
			var e error
			if !diskreserve.Room(filepath.Dir(path), n) {
				e = diskreserve.ErrNoRoom // what the state dir's reserve frees is left to the records
			} else {
				_, e = sw.Write(buf[:n])
			}
			if e != nil && werr == nil {
				werr = e
				fmt.Fprintf(os.Stderr, "fleetmgr logpipe: %s: %v (output is dropped until writes succeed)\n", path, e)
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			werr = errors.Join(werr, err)
			break
		}
	}
	return errors.Join(werr, lj.Close())
}

// ExecLogged is the wrapper half of `fleetmgr logpipe`: it starts self
// (the fleetmgr executable) as the copier of a new pipe, makes the pipe
// this process's stdout and stderr, and replaces this process with argv
// (argv[0] a path). It returns only on failure.
func ExecLogged(self, path string, maxMB, backups int, argv []string) error {
	if len(argv) == 0 {
		return errors.New("logpipe: no command")
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	// The copier says when it ignores SIGTERM (a byte on fd 3): until then
	// a stop signalling the session would kill it, and the child's last
	// words with it. A signal before that kills this wrapper too, so no
	// child is left writing into a dead pipe.
	ready, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	cp := exec.Command(self, "logpipe", "--file", path, "--max-mb", strconv.Itoa(maxMB), "--backups", strconv.Itoa(backups), "--ready-fd", "3")
	cp.Stdin = r
	cp.Stdout, cp.Stderr = os.Stderr, os.Stderr // the log file, for the copier's own errors
	cp.ExtraFiles = []*os.File{readyW}
	if err := cp.Start(); err != nil {
		return fmt.Errorf("logpipe: start copier: %w", err)
	}
	r.Close()
	readyW.Close()
	_ = ready.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = ready.Read(make([]byte, 1)) // a timeout or EOF: go on regardless
	ready.Close()
	for _, fd := range []int{1, 2} {
		if err := unix.Dup3(int(w.Fd()), fd, 0); err != nil {
			return fmt.Errorf("logpipe: dup3: %w", err)
		}
	}
	w.Close()
	// From here on our stdio is the pipe; os.Pipe's descriptors are
	// close-on-exec, fds 1 and 2 are not.
	return fmt.Errorf("logpipe: exec %s: %w", argv[0], syscall.Exec(argv[0], argv, os.Environ()))
}
