package atomicfile

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReadRefusesWhatFleetmgrNeverWrites: a named pipe (no writer: a
// blocking open would hang) and a directory are refused at once naming
// the kind, a unix socket by the open itself (ENXIO) naming the path; a file one byte over the bound is refused, one at
// the bound read whole; a missing file is fs.ErrNotExist.
func TestReadRefusesWhatFleetmgrNeverWrites(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "state.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for path, want := range map[string]string{fifo: "named pipe", dir: "directory", sock: ""} {
		done := make(chan error, 1)
		go func() { _, err := Read(path, MaxSmall); done <- err }()
		select {
		case err := <-done:
			if want == "" && err != nil && strings.Contains(err.Error(), path) {
				continue
			}
			if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Read(%s) = %v, want ErrNotRegular naming %s and the path", path, err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Read(%s) blocked", path)
		}
	}
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, make([]byte, 100), 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(f, 100); err != nil || len(b) != 100 {
		t.Errorf("Read at the bound: %d bytes, %v", len(b), err)
	}
	if _, err := Read(f, 99); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Read one byte over the bound: %v, want ErrTooLarge", err)
	}
	if _, err := Read(filepath.Join(dir, "missing"), 1); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of a missing file: %v, want fs.ErrNotExist", err)
	}
}
