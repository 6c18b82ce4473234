package setup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetmgr/fleetmgr/fleetsfile"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
)

// home makes a throwaway HOME (and clears XDG_*) for Load and Init.
func home(t *testing.T) (dir, homeDir string, getenv func(string) string) {
	t.Helper()
	dir = t.TempDir()
	homeDir = filepath.Join(dir, "home")
	if err := os.MkdirAll(homeDir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", homeDir)
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("XDG_STATE_HOME", "")
	t.Chdir(dir)
	return dir, homeDir, os.Getenv
}

func mkdir(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestInitPath(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HOME": "/h"}, "/h/.config/fleetmgr/fleets.toml"},
		{map[string]string{"HOME": "/h", "XDG_CONFIG_HOME": "/x"}, "/x/fleetmgr/fleets.toml"},
		{map[string]string{"HOME": "/h", "XDG_CONFIG_HOME": "rel"}, "/h/.config/fleetmgr/fleets.toml"},
	} {
		if got, err := InitPath(env(tc.env)); err != nil || got != tc.want {
			t.Errorf("InitPath(%v) = %q, %v", tc.env, got, err)
		}
	}
	if _, err := InitPath(env(map[string]string{})); err == nil || !strings.Contains(err.Error(), "--config") {
		t.Errorf("no HOME: %v", err)
	}
}

// TestInitThenAdd is the acceptance path on the library level: init with
// a first fleet, add a second, both load as asked; the file keeps init's
// comments; what registry.DefaultPath finds is that file.
func TestInitThenAdd(t *testing.T) {
	dir, h, getenv := home(t)
	p1 := mkdir(t, filepath.Join(h, "src", "My Project"))
	res, err := Init(context.Background(), InitOptions{Fleet: &FleetOptions{Project: p1, Port: 8790}})
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(h, ".config", "fleetmgr", "fleets.toml")
	if res.Config.Path != want || registry.DefaultPath(getenv) != want {
		t.Fatalf("init wrote %s; DefaultPath finds %s; want %s", res.Config.Path, registry.DefaultPath(getenv), want)
	}
	if res.Fleet == nil || res.Fleet.Name != "my-project" || res.Fleet.Project != p1 || res.Fleet.Port != 8790 {
		t.Fatalf("first fleet: %+v", res.Fleet)
	}
	b, _ := os.ReadFile(want)
	if !bytes.HasPrefix(b, fleetsfile.Template()) || !bytes.Contains(b, []byte("project = \"~/src/My Project\"")) {
		t.Fatalf("init wrote:\n%s", b)
	}
	// A second init refuses, naming the file.
	if _, err := Init(context.Background(), InitOptions{}); err == nil || !strings.Contains(err.Error(), want+" exists already") {
		t.Fatalf("second init: %v", err)
	}
	// add, with a relative project (from the working directory) outside HOME.
	mkdir(t, filepath.Join(dir, "docs"))
	var reloaded *registry.Config
	ares, err := Add(context.Background(), AddOptions{Path: want, Fleet: FleetOptions{Name: "docs", Project: "docs", Lead: true, Command: []string{"my-fleetd", "--port={{.Port}}"}},
		Reload: func(_ context.Context, cfg *registry.Config) (string, error) {
			reloaded = cfg
			return "no serve runs", nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if reloaded == nil || len(reloaded.Fleets) != 2 || ares.Reload != "no serve runs" {
		t.Fatalf("Reload saw %v, said %q", reloaded, ares.Reload)
	}
	if f := ares.Fleet; f.Project != filepath.Join(dir, "docs") || !f.Lead || f.Command[0] != "my-fleetd" || f.Port == 0 || f.Port == 8790 {
		t.Fatalf("docs loads as %+v (a port allocated beside my-project's 8790)", f)
	}
	b2, _ := os.ReadFile(want)
	if !bytes.HasPrefix(b2, b) {
		t.Fatal("add did not keep the file's bytes")
	}
	// A Reloader error is reported, but the fleet stays added.
	mkdir(t, filepath.Join(dir, "third"))
	_, err = Add(context.Background(), AddOptions{Path: want, Fleet: FleetOptions{Name: "third", Project: "third"},
		Reload: func(context.Context, *registry.Config) (string, error) { return "", errors.New("daemon refused") }})
	if err == nil || !strings.Contains(err.Error(), "fleet third was added to "+want+", but") {
		t.Fatalf("err = %v", err)
	}
	if cfg, err := registry.Load(want); err != nil || cfg.Fleets["third"] == nil {
		t.Fatalf("after a failed reload: %v", err)
	}
}

// TestInitShadowed: a ./fleets.toml in the working directory is named,
// since fleetmgr run from here reads it first.
func TestInitShadowed(t *testing.T) {
	dir, _, _ := home(t)
	if err := os.WriteFile(filepath.Join(dir, "fleets.toml"), []byte("[manager]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := Init(context.Background(), InitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Shadowed != filepath.Join(dir, "fleets.toml") {
		t.Fatalf("Shadowed = %q", res.Shadowed)
	}
	// --config ./fleets.toml: refused, the file is there.
	if _, err := Init(context.Background(), InitOptions{Path: "fleets.toml"}); err == nil {
		t.Fatal("init over ./fleets.toml succeeded")
	}
}

func TestInitAddRefusals(t *testing.T) {
	dir, _, _ := home(t)
	cfgPath := filepath.Join(dir, "fleets.toml")
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts FleetOptions
		want string
	}{
		{"missing project", FleetOptions{Project: filepath.Join(dir, "nope")}, "project directory " + filepath.Join(dir, "nope") + ": "},
		{"missing project: what to do", FleetOptions{Project: filepath.Join(dir, "nope")}, "; create it first (mkdir -p " + strconv.Quote(filepath.Join(dir, "nope")) + ")"},
		{"project is a file", FleetOptions{Project: cfgPath + ".x"}, "is not a directory"},
		{"no name from dir", FleetOptions{Project: mkdir(t, filepath.Join(dir, "2024"))}, "pass --name"},
		{"bad name", FleetOptions{Name: "Bad", Project: dir}, `fleet name "Bad" is invalid`},
		{"dollar", FleetOptions{Name: "d", Project: mkdir(t, filepath.Join(dir, "a$b"))}, "holds '$'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = os.WriteFile(cfgPath+".x", nil, 0o600)
			o := tc.opts
			_, err := Init(ctx, InitOptions{Path: cfgPath, Fleet: &o})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("init: %v, want %q", err, tc.want)
			}
			if _, err := os.Stat(cfgPath); err == nil {
				t.Fatal("init wrote a file")
			}
		})
	}
	// Flags describing a first fleet without its project: refused, nothing written.
	for _, fo := range []FleetOptions{{Name: "x"}, {Port: 8770}, {Lead: true}, {Command: []string{"fleetd"}}} {
		if _, err := Init(ctx, InitOptions{Path: cfgPath, Fleet: &fo}); err == nil || !strings.Contains(err.Error(), "pass --project DIR too") {
			t.Errorf("init %+v: %v", fo, err)
		}
	}
	if _, err := os.Stat(cfgPath); err == nil {
		t.Fatal("init wrote a file")
	}
	if _, err := Add(ctx, AddOptions{Path: cfgPath, Fleet: FleetOptions{Project: dir}}); err == nil || !strings.Contains(err.Error(), "no fleet name") {
		t.Fatalf("add without a name: %v", err)
	}
	if _, err := Add(ctx, AddOptions{Path: cfgPath, Fleet: FleetOptions{Name: "x", Project: dir}}); err == nil || !strings.Contains(err.Error(), cfgPath) {
		t.Fatalf("add to a missing file: %v", err)
	}
	// An empty first fleet is none: init writes the template alone.
	if res, err := Init(ctx, InitOptions{Path: cfgPath, Fleet: &FleetOptions{}}); err != nil || res.Fleet != nil {
		t.Fatalf("init with empty fleet options: %+v %v", res, err)
	}
	if _, err := Add(ctx, AddOptions{Path: cfgPath, Fleet: FleetOptions{Name: "x", Project: filepath.Join(dir, "nope")}}); err == nil ||
		!strings.HasPrefix(err.Error(), cfgPath+": fleet x: project directory") || !strings.HasSuffix(err.Error(), "; the file is unchanged") {
		t.Fatalf("add with a missing project: %v", err)
	}
}

// fixture is a config with fleets kb and docs (state under dir/state).
func fixture(t *testing.T, extra string) (path string, m func(*registry.Config) *lifecycle.Manager) {
	t.Helper()
	dir, _, _ := home(t)
	path = filepath.Join(dir, "fleets.toml")
	src := fmt.Sprintf("[manager]\nstate_dir = %q\n%s\n# kb's comment\n[fleets.kb]\nproject = %q\ncommand = [\"fleetd\"]\nport = 8771\n\n[fleets.docs]\nproject = %q\ncommand = [\"fleetd\"]\nport = 8772\n",
		filepath.Join(dir, "state"), extra, mkdir(t, filepath.Join(dir, "kb")), mkdir(t, filepath.Join(dir, "docs")))
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, func(c *registry.Config) *lifecycle.Manager {
		return lifecycle.New(c, slog.New(slog.NewTextHandler(io.Discard, nil)), os.Environ())
	}
}

// writeState writes a fleet's state.json as lifecycle would.
func writeState(t *testing.T, cfg *registry.Config, name string, st map[string]any) string {
	t.Helper()
	d := filepath.Join(cfg.Manager.StateDir, "fleets", name)
	mkdir(t, d)
	st["name"] = name
	b, _ := json.Marshal(st)
	if err := os.WriteFile(filepath.Join(d, "state.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRemoveRefusesUnlessStopped: a fleet whose state says running (with a
// live process of ours as its fleetd), wanted running, or with a live
// herdr is refused, and the file keeps its bytes.
func TestRemoveRefusesUnlessStopped(t *testing.T) {
	path, mgr := fixture(t, "")
	cfg, err := registry.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	self, err := procfs.KeyOf(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	me := map[string]any{"pid": self.PID, "start_time": self.StartTime}
	// kb's fleetd must carry FLEET_NAME=kb, or its record reads stale.
	fd := exec.Command("sleep", "60")
	fd.Env = append(os.Environ(), "FLEET_NAME=kb")
	if err := fd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fd.Process.Kill(); _ = fd.Wait() })
	fdKey, err := procfs.KeyOf(fd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	fleetd := map[string]any{"pid": fdKey.PID, "start_time": fdKey.StartTime}
	src, _ := os.ReadFile(path)
	for _, tc := range []struct {
		name string
		st   map[string]any
		want string
	}{
		{"running", map[string]any{"desired": "running", "phase": "running", "fleetd": fleetd}, "fleet kb is running: stop it first"},
		{"wanted running", map[string]any{"desired": "running", "phase": "stopped"}, "fleet kb is wanted running"},
		{"crash loop", map[string]any{"desired": "running", "phase": "failed"}, "fleet kb is failed: stop it first"},
		{"live herdr", map[string]any{"desired": "stopped", "phase": "stopped", "herdr": me}, fmt.Sprintf("live process (pid %d)", self.PID)},
		{"corrupt", nil, "its state cannot be read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.st == nil {
				d := writeState(t, cfg, "kb", map[string]any{})
				if err := os.WriteFile(filepath.Join(d, "state.json"), []byte("{"), 0o600); err != nil {
					t.Fatal(err)
				}
			} else {
				writeState(t, cfg, "kb", tc.st)
			}
			_, err := Remove(context.Background(), RemoveOptions{Path: path, Name: "kb", Purge: true, Manager: mgr})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if b, _ := os.ReadFile(path); !bytes.Equal(b, src) {
				t.Fatal("the file was changed")
			}
			if _, err := os.Stat(filepath.Join(cfg.Manager.StateDir, "fleets", "kb", "state.json")); err != nil {
				t.Fatal("the state dir was purged")
			}
		})
	}
}

// TestRemovePurge: a stopped fleet goes from the file (with its comment),
// its state dir with --purge; worktrees inside the state dir need their
// own consent; the other fleet is untouched.
func TestRemovePurge(t *testing.T) {
	path, mgr := fixture(t, "")
	cfg, _ := registry.Load(path)
	kbDir := writeState(t, cfg, "kb", map[string]any{"desired": "stopped", "phase": "stopped"})
	docsDir := writeState(t, cfg, "docs", map[string]any{"desired": "stopped", "phase": "stopped"})
	wt := mkdir(t, filepath.Join(kbDir, "worktrees", "member-1"))
	ctx := context.Background()
	_, err := Remove(ctx, RemoveOptions{Path: path, Name: "kb", Purge: true, Manager: mgr})
	if err == nil || !strings.Contains(err.Error(), "--yes-delete-worktrees") {
		t.Fatalf("purge with worktrees: %v", err)
	}
	if _, err := os.Stat(wt); err != nil {
		t.Fatal("a refused purge deleted the worktree")
	}
	var reloads int
	res, err := Remove(ctx, RemoveOptions{Path: path, Name: "kb", Purge: true, DeleteWorktrees: true, Manager: mgr,
		Reload: func(context.Context, *registry.Config) (string, error) { reloads++; return "", nil }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Purged != kbDir || reloads != 1 || res.Config.Fleets["kb"] != nil || res.Config.Fleets["docs"] == nil {
		t.Fatalf("result %+v, reloads %d", res, reloads)
	}
	if _, err := os.Stat(kbDir); err == nil {
		t.Fatal("kb's state dir is still there")
	}
	if _, err := os.Stat(docsDir); err != nil {
		t.Fatal("docs' state dir was touched")
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(string(b), "kb") {
		t.Fatalf("kb (or its comment) left in the file:\n%s", b)
	}
	// Not in the file any more: a second remove says so.
	if _, err := Remove(ctx, RemoveOptions{Path: path, Name: "kb", Manager: mgr}); err == nil || !strings.Contains(err.Error(), `unknown fleet "kb"`) {
		t.Fatalf("second remove: %v", err)
	}
	// Without --purge the state dir stays; the flags that need --purge say so.
	if _, err := Remove(ctx, RemoveOptions{Path: path, Name: "docs", DeleteMessages: true, Manager: mgr}); err == nil || !strings.Contains(err.Error(), "pass both") {
		t.Fatalf("--yes-delete-messages without --purge: %v", err)
	}
	if _, err := Remove(ctx, RemoveOptions{Path: path, Name: "docs", Manager: mgr}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(docsDir); err != nil {
		t.Fatal("remove without --purge deleted the state dir")
	}
}

// TestRemoveVhost: --purge --yes-delete-messages deletes the fleet's vhost
// and its broker user on a real broker.
func TestRemoveVhost(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *brokertest.Broker) {
		vhost, user := brokertest.Unique("fmsetup"), brokertest.Unique("fmsetup-kb")
		b.Cleanup(t, []string{vhost}, []string{user})
		path, _ := fixture(t, fmt.Sprintf("\n[broker]\nmanagement_url = %q\namqp_url = %q\n", b.MgmtURL, b.AMQPURL))
		src, _ := os.ReadFile(path)
		src = bytes.Replace(src, []byte("port = 8771\n"), fmt.Appendf(nil, "port = 8771\nvhost = %q\nbroker_user = %q\n", vhost, user), 1)
		if err := os.WriteFile(path, src, 0o600); err != nil {
			t.Fatal(err)
		}
		mgr := func(c *registry.Config) *lifecycle.Manager {
			return lifecycle.New(c, slog.New(slog.DiscardHandler), []string{registry.DefaultAdminUserEnv + "=" + b.User, registry.DefaultAdminPasswordEnv + "=" + b.Password})
		}
		ctx := context.Background()
		admin := b.Admin(t)
		if _, err := admin.EnsureVhost(ctx, vhost); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.EnsureUser(ctx, user, "pw-"+user, ""); err != nil {
			t.Fatal(err)
		}
		res, err := Remove(ctx, RemoveOptions{Path: path, Name: "kb", Purge: true, DeleteMessages: true, Manager: mgr})
		if err != nil {
			t.Fatal(err)
		}
		if res.Vhost != vhost || !res.VhostExisted || res.BrokerUser != user {
			t.Fatalf("result %+v", res)
		}
		if exists, err := admin.VhostExists(ctx, vhost); err != nil || exists {
			t.Fatalf("vhost %s still there (%v)", vhost, err)
		}
		// EnsureUser creates the user again only if it was deleted.
		if created, err := admin.EnsureUser(ctx, user, "pw2-"+user, ""); err != nil || !created {
			t.Fatalf("broker user %s was not deleted (%v)", user, err)
		}
	})
}

// TestRemoveJSONKeptIsAList: `remove --json`'s "kept" is a list, empty
// when nothing was kept (never null, which a script's .kept[] or len()
// stumbles on).
func TestRemoveJSONKeptIsAList(t *testing.T) {
	b, err := json.Marshal(&RemoveResult{Config: &registry.Config{Path: "/f.toml"}, Name: "kb"})
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if kept, ok := got["kept"].([]any); !ok || len(kept) != 0 {
		t.Fatalf("kept = %#v in %s; want []", got["kept"], b)
	}
}
