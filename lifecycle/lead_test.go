package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

	// The lead announces itself as an agent (the stand-in's status escape), as a real lead is
	// detected by herdr, so the launch's readiness wait ends at once.
	cfg := loadCfg(t, "", "lead_command = [\"sh\", \"-c\", \"echo ran > "+filepath.Join(home, "lead-ran")+"; printf '\\\\033]777;herdr-status;idle\\\\007'\"]\n")
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
	if strings.Contains(detail, "did not settle") || !strings.Contains(detail, "agent standin ready (idle)") {
		t.Fatalf("the shell never looked ready, or the lead's agent was not seen: %s", detail)
	}
	wait.For(t, 10*time.Second, fmt.Sprintf("the lead's command to run (typed after %s)", took), func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(home, "lead-ran"))
		return err == nil && strings.TrimSpace(string(b)) == "ran", detail
	})
	t.Logf("lead launched after %s: %s", took.Round(time.Millisecond), detail)
}

// apiCalls counts the herdr stand-in's "api call" records (herdrd.Config.LogCalls) by method.
type apiCalls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *apiCalls) Enabled(context.Context, slog.Level) bool { return true }
func (c *apiCalls) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *apiCalls) WithGroup(string) slog.Handler            { return c }
func (c *apiCalls) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "api call" {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "method" {
				c.mu.Lock()
				c.n[a.Value.String()]++
				c.mu.Unlock()
			}
			return true
		})
	}
	return nil
}

func (c *apiCalls) get(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[method]
}

// TestLeadLaunchWaitsOnEvents: after typing lead_command the launch waits for herdr to show
// the lead's agent, and says so in its detail. Against the stand-in at protocol 20 and 22 the
// wait is pushed by herdr (events.subscribe taken before the command was typed; pane.get asked
// once, when the wait begins, though the agent shows a second later); against a herdr without
// the methods it falls back to reading pane.get, and still sees the agent.
func TestLeadLaunchWaitsOnEvents(t *testing.T) {
	for _, tc := range []struct {
		name        string
		protocol    int
		withoutPush bool
		via         string
	}{
		{"protocol20", 20, false, "pushed by herdr"},
		{"protocol22", 22, false, "pushed by herdr"},
		{"without-push", 20, true, "read with pane.get (herdr answered events.subscribe as a method it does not know)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "fmlead")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			calls := &apiCalls{n: map[string]int{}}
			srv, err := herdrd.Listen(herdrd.Config{Socket: filepath.Join(dir, "h.sock"), Protocol: tc.protocol, WithoutPush: tc.withoutPush,
				Env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}, LogCalls: true, Logger: slog.New(calls)})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Serve(ctx) }()
			t.Cleanup(func() { cancel(); <-done })

			cfg := loadCfg(t, "", "lead_command = [\"sh\", \"-c\", \"sleep 1; printf '\\\\033]777;herdr-status;idle\\\\007'; exec sleep 600\"]\nlead_ready_timeout = \"20s\"\n")
			m := New(cfg, quiet(), []string{"HOME=" + dir})
			f := cfg.Fleets["kb"]
			d := m.templateData(f)
			d.HerdrSocket = srv.Socket()
			detail, err := m.launchLead(ctx, f, d)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(detail, "agent standin ready (idle)") || !strings.Contains(detail, tc.via) {
				t.Fatalf("detail %q: want the lead's agent seen ready, %s", detail, tc.via)
			}
			gets := calls.get("pane.get")
			if tc.withoutPush {
				if gets < 2 {
					t.Errorf("pane.get asked %d times: the fallback reads it until the agent shows, a second after typing", gets)
				}
			} else if gets != 1 || calls.get("events.subscribe") != 1 {
				t.Errorf("pane.get asked %d times, events.subscribe %d: want the wait to follow herdr's events (one first look)", gets, calls.get("events.subscribe"))
			}
			t.Logf("%s", detail)
		})
	}
}
