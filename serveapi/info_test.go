package serveapi

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestServePIDIgnoresAZombie: serve.json naming a process that has
// exited but is not reaped yet (a killed serve whose parent is slow to
// reap it) names no serve; the same pid while it runs does.
func TestServePIDIgnoresAZombie(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", "read x") // runs until its stdin closes
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	b, _ := json.Marshal(Info{PID: pid, Socket: filepath.Join(dir, "none.sock")})
	if err := os.WriteFile(filepath.Join(dir, "serve.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := ServePID(dir); got != pid {
		t.Fatalf("ServePID of a running process = %d, want %d", got, pid)
	}
	in.Close() // it exits; nobody waits for it yet: a zombie
	wait.For(t, 10*time.Second, "the child a zombie", func() (bool, string) {
		st, err := procfs.ReadStat(pid)
		return err == nil && st.State == 'Z', "not yet"
	})
	if got := ServePID(dir); got != 0 {
		t.Fatalf("ServePID of a zombie = %d, want 0", got)
	}
	_ = cmd.Wait()
}
