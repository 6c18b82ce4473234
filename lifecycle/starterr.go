package lifecycle

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
)

// Start's error messages: a missing project directory is
// named as such, and a failed process's "last log lines" are only what
// that attempt wrote.

// logSize is the current size of a log file (0 when it does not exist): a
// spawn remembers it so a failure shows only what that attempt wrote.
func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// tailFrom returns the last n lines a fleet process wrote to its log from
// byte offset off on (the size when it was spawned). A log that rotated
// since (now smaller than off) is read from its start.
func (m *Manager) tailFrom(name, proc string, off int64, n int) string {
	// The process's last words pass through the logpipe copier, which may
	// still be writing them when the exit is seen: wait (at most 500 ms)
	// until the log has grown past off and stopped growing for 50 ms.
	var last int64 = -1
	for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		fi, err := os.Stat(m.LogPath(name, proc))
		if err == nil && fi.Size() > off && fi.Size() == last {
			break
		}
		if err == nil {
			last = fi.Size()
		}
	}
	f, err := os.Open(m.LogPath(name, proc))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() < off {
		off = 0
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return "(no log: " + err.Error() + ")"
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<20))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	text := strings.TrimRight(string(b), "\n")
	if text == "" {
		return "  (nothing written by this attempt)"
	}
	lines := strings.Split(text, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

// checkProject refuses a fleet whose project directory is missing or not a
// directory, naming the fleet, the path and the config line, before
// anything is started (otherwise the failed chdir of the first spawn is
// blamed on herdr_bin).
func (m *Manager) checkProject(f *registry.Fleet) error {
	fi, err := os.Stat(f.Project)
	path := m.Config().Path
	where := path
	if f.Line > 0 {
		where = fmt.Sprintf("%s:%d", path, f.Line)
	}
	switch {
	case err != nil:
		return fmt.Errorf("fleet %s: project directory %s: %w (project of [fleets.%s] in %s)", f.Name, f.Project, err, f.Name, where)
	case !fi.IsDir():
		return fmt.Errorf("fleet %s: project %s is not a directory (project of [fleets.%s] in %s)", f.Name, f.Project, f.Name, where)
	}
	return nil
}
