package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/herdrd"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestLeadLaunchAgainstRevisionZero: the lead's command is typed only once the pane's shell is
// ready, against a herdr whose pane.read revision is always 0 (the stand-in answers as herdr
// does). The shell's startup prints, runs a command for a second and then throws away any
// typeahead, as a slow login profile can; a command typed before the prompt is lost. Waiting
// for the revision to stop changing would type it 150 ms after the first output.
func TestLeadLaunchAgainstRevisionZero(t *testing.T) {
	if _, err := os.Stat("/bin/bash"); err != nil {
		t.Skip("needs /bin/bash: the profile below is bash's")
	}
	dir, err := os.MkdirTemp("", "fmlead") // short: the socket path must fit sun_path
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	profile := "echo profile-start\nsleep 1\nread -t 0.1 -n 100000 _discard\n: > \"$HOME/profile-done\"\nPS1='ready$ '\n"
	if err := os.WriteFile(filepath.Join(home, ".bash_profile"), []byte(profile), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := herdrd.Listen(herdrd.Config{Socket: filepath.Join(dir, "h.sock"), Shell: "/bin/bash",
		Env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home}, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	cfg := loadCfg(t, "", "lead_command = [\"sh\", \"-c\", \"echo ran > "+filepath.Join(home, "lead-ran")+"\"]\n")
	m := New(cfg, quiet(), []string{"HOME=" + home})
	f := cfg.Fleets["kb"]
	d := m.templateData(f)
	d.HerdrSocket = srv.Socket()
	t0 := time.Now()
	detail, err := m.launchLead(ctx, f, d)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	if _, err := os.Stat(filepath.Join(home, "profile-done")); err != nil {
		t.Fatalf("the lead's command was typed after %s, before the shell's startup ended (%s)", took, detail)
	}
	if strings.Contains(detail, "did not settle") {
		t.Fatalf("the shell never looked ready: %s", detail)
	}
	wait.For(t, 10*time.Second, fmt.Sprintf("the lead's command to run (typed after %s)", took), func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(home, "lead-ran"))
		return err == nil && strings.TrimSpace(string(b)) == "ran", detail
	})
	t.Logf("lead launched after %s: %s", took.Round(time.Millisecond), detail)
}
