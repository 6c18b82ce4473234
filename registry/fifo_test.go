package registry

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestLoadRefusesFIFO: a FIFO named as the config is refused at once, not
// opened (which blocks until a writer comes).
func TestLoadRefusesFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := load(p, fakeEnv(map[string]string{"HOME": t.TempDir()})); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file (a named pipe (FIFO))") {
			t.Fatalf("load of a FIFO: %v", err)
		}
	case <-time.After(3 * time.Second):
		// Unblock the opener so the goroutine ends.
		if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		<-done
		t.Fatal("load of a FIFO blocked")
	}
}

// TestLoadNamesWhatItIsNot: a directory or device named as the config is
// refused in words, not as a mode string ("d---------").
func TestLoadNamesWhatItIsNot(t *testing.T) {
	for path, want := range map[string]string{t.TempDir(): "(a directory)", "/dev/null": "(a character device)"} {
		_, err := load(path, fakeEnv(map[string]string{"HOME": t.TempDir()}))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("load of %s: %v, want %q", path, err, want)
		}
	}
}

// TestAllocatePortsRefusesFIFO: a named pipe at <state_dir>/ports.json
// hung every verb in open (and Ctrl-C did not end it); it is refused at
// once, as a directory there is, naming the file and the fix.
func TestAllocatePortsRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(state, PortsFile)
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Fatal(err)
	}
	c := portsConfig(t, dir, state, 8766, 8799, fleetTable("a", ""))
	done := make(chan error, 1)
	go func() { done <- c.AllocatePorts() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), p+": not a regular file") || !strings.Contains(err.Error(), "remove it") {
			t.Fatalf("ports.json a FIFO: %v", err)
		}
	case <-time.After(3 * time.Second):
		if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		<-done
		t.Fatal("AllocatePorts blocked on a FIFO at ports.json")
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := c.AllocatePorts(); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("ports.json a directory: %v", err)
	}
}
