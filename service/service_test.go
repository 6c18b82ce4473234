package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/coreos/go-systemd/v22/unit"
	"howett.net/plist"
)

// weird is a name holding every character the quoting has to get right:
// blanks, quotes, backslash, specifier and variable signs, and non-ASCII.
const weird = `a b"c'd\e%f$g{h}é`

// weirdExe is weird without the characters systemd refuses in an
// executable's path (quotes, backslash: "Executable name contains special
// characters"), which NewSpec refuses for that reason.
const weirdExe = `a b%f$g{h}é`

// testSpec is a Spec whose executable is a real one (a copy of true(1))
// under a directory named weirdExe, and whose config is named weird.
func testSpec(t *testing.T) Spec {
	t.Helper()
	dir := filepath.Join(t.TempDir(), weirdExe)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "fleet mgr")
	src, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip("no /bin/true to stand for the executable")
	}
	if err := os.WriteFile(exe, src, 0o755); err != nil {
		t.Fatal(err)
	}
	return Spec{Exe: exe, Config: filepath.Join(dir, weird, "fleets $HOME %h.toml"), EnvFile: "/home/u/.config/fleetmgr/broker%.env",
		Env: []string{"PATH=/home/u/go/bin:/usr/bin", "XDG_STATE_HOME=/home/u/state %i"}, Log: "/home/u/Library/Logs/fleetmgr.log"}
}

// requireTool returns the path of a tool the test needs, skipping without
// it (failing under CI, where scripts/test installs it).
func requireTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but %s is missing: %v", name, err)
		}
		t.Skipf("%s not installed (Debian: apt-get install systemd)", name)
	}
	return p
}

// TestSystemdUnitVerifies: the unit passes `systemd-analyze verify`, which
// resolves ExecStart's executable through systemd's own unquoting and
// specifier expansion; the same unit naming a missing executable fails it,
// so the check is real.
func TestSystemdUnitVerifies(t *testing.T) {
	sa := requireTool(t, "systemd-analyze")
	s := testSpec(t)
	verify := func(s Spec) (string, error) {
		u, err := SystemdUnit(s)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), UnitName)
		if err := os.WriteFile(p, u, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(sa, "verify", p).CombinedOutput()
		return string(out), err
	}
	if out, err := verify(s); err != nil || strings.TrimSpace(out) != "" {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}
	missing := s
	missing.Exe = filepath.Join(filepath.Dir(s.Exe), "nope")
	if out, err := verify(missing); err == nil || !strings.Contains(out, "is not executable") {
		t.Fatalf("verify of a unit with a missing executable: %v\n%s", err, out)
	}
}

// unitSettings returns the unit's settings by section and name, all
// values in order, read by go-systemd's unit parser.
func unitSettings(t *testing.T, u []byte) map[string][]string {
	t.Helper()
	opts, err := unit.DeserializeOptions(bytes.NewReader(u))
	if err != nil {
		t.Fatalf("unit does not parse: %v\n%s", err, u)
	}
	m := map[string][]string{}
	for _, o := range opts {
		m[o.Section+"."+o.Name] = append(m[o.Section+"."+o.Name], o.Value)
	}
	return m
}

// last is the effective value of a single-valued setting: the last
// assignment, or def when there is none.
func last(m map[string][]string, key, def string) string {
	if v := m[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return def
}

// TestSystemdUnitProperties reads the unit as systemd would and checks
// what it does, not how it is written: on stop or restart only the main
// process is signalled (the fleets it started stay), it is restarted on
// failure and started with the user's manager, it runs exactly serve
// --config CONFIG with the secrets file and the carried environment, and
// nothing else runs at stop.
func TestSystemdUnitProperties(t *testing.T) {
	s := testSpec(t)
	u, err := SystemdUnit(s)
	if err != nil {
		t.Fatal(err)
	}
	m := unitSettings(t, u)
	if got := StopSignals(last(m, "Service.KillMode", "control-group")); got != SignalsMainOnly {
		t.Errorf("KillMode %q: stop signals %v, want the main process only", last(m, "Service.KillMode", ""), got)
	}
	if r := last(m, "Service.Restart", "no"); r != "on-failure" && r != "always" && r != "on-abnormal" {
		t.Errorf("Restart=%s: serve is not restarted after a crash", r)
	}
	if !slices.Contains(strings.Fields(strings.Join(m["Install.WantedBy"], " ")), "default.target") {
		t.Errorf("WantedBy=%v: not started with the user's service manager", m["Install.WantedBy"])
	}
	for _, k := range []string{"Service.ExecStop", "Service.ExecStopPost", "Service.ExecReload", "Service.KillSignal", "Service.SendSIGKILL"} {
		if len(m[k]) > 0 {
			t.Errorf("%s=%v: the unit must not act on stop beyond SIGTERM to serve", k, m[k])
		}
	}
	if len(m["Service.ExecStart"]) != 1 {
		t.Fatalf("ExecStart=%v", m["Service.ExecStart"])
	}
	argv, err := SplitExec(m["Service.ExecStart"][0])
	if err != nil || !slices.Equal(argv, s.Args(Systemd)) {
		t.Fatalf("ExecStart reads as %q (%v), want %q", argv, err, s.Args(Systemd))
	}
	if got := strings.ReplaceAll(last(m, "Service.EnvironmentFile", ""), "%%", "%"); got != s.EnvFile {
		t.Errorf("EnvironmentFile=%q, want %q", got, s.EnvFile)
	}
	env, err := SplitWords(strings.Join(m["Service.Environment"], " "), false)
	if err != nil || !slices.Equal(env, s.Env) {
		t.Errorf("Environment reads as %q (%v), want %q", env, err, s.Env)
	}
}

// TestSplitExecRoundTrip: every string survives systemdQuote and the
// reader of systemd's quoting (SplitExec) as the executable and as an
// argument.
func TestSplitExecRoundTrip(t *testing.T) {
	for _, s := range []string{"", "plain", weird, "tab\there", "nl\nx", "\x01\x7f", `\\`, `""`, "%%%", "$$$", "${X}", "é日本"} {
		line := systemdQuote("/bin/"+s, false) + " " + systemdQuote(s, true)
		got, err := SplitExec(line)
		if err != nil || !slices.Equal(got, []string{"/bin/" + s, s}) {
			t.Errorf("%q → %s → %q (%v)", s, line, got, err)
		}
	}
}

// TestLaunchdPlist: the agent round-trips through a property list parser,
// in XML format, with the keys launchd needs; its environment holds no
// secret and no secret variable's name.
func TestLaunchdPlist(t *testing.T) {
	s := testSpec(t)
	b, err := LaunchdPlist(s)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte(`<?xml version="1.0" encoding="UTF-8"?>`)) || !bytes.Contains(b, []byte(`<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN"`)) {
		t.Fatalf("not an XML property list:\n%s", b)
	}
	var m map[string]any
	format, err := plist.Unmarshal(b, &m)
	if err != nil || format != plist.XMLFormat {
		t.Fatalf("plist.Unmarshal: format %d, %v", format, err)
	}
	if m["Label"] != Label || m["RunAtLoad"] != true || m["AbandonProcessGroup"] != true {
		t.Errorf("Label/RunAtLoad/AbandonProcessGroup: %v %v %v", m["Label"], m["RunAtLoad"], m["AbandonProcessGroup"])
	}
	var args []string
	for _, a := range m["ProgramArguments"].([]any) {
		args = append(args, a.(string))
	}
	if want := s.Args(Launchd); !slices.Equal(args, want) || !slices.Contains(args, "--env-file") {
		t.Errorf("ProgramArguments %q, want %q", args, want)
	}
	if ka, ok := m["KeepAlive"].(map[string]any); !ok || ka["SuccessfulExit"] != false {
		t.Errorf("KeepAlive %v: want {SuccessfulExit: false} (restart after a failure)", m["KeepAlive"])
	}
	if m["StandardOutPath"] != s.Log || m["StandardErrorPath"] != s.Log {
		t.Errorf("StandardOutPath/StandardErrorPath %v %v", m["StandardOutPath"], m["StandardErrorPath"])
	}
	env, _ := m["EnvironmentVariables"].(map[string]any)
	for _, kv := range s.Env {
		k, v, _ := strings.Cut(kv, "=")
		if env[k] != v {
			t.Errorf("EnvironmentVariables[%s] = %v, want %q", k, env[k], v)
		}
	}
	for k := range env {
		if !slices.Contains(PassEnv, k) {
			t.Errorf("EnvironmentVariables holds %s, which is not a PassEnv variable", k)
		}
	}
	// Round trip: encode what was decoded, decode again, same.
	again, err := plist.MarshalIndent(m, plist.XMLFormat, "\t")
	if err != nil {
		t.Fatal(err)
	}
	var m2 map[string]any
	if _, err := plist.Unmarshal(again, &m2); err != nil || !reflect.DeepEqual(m, m2) {
		t.Fatalf("round trip changed the plist: %v", err)
	}
}

// TestNewSpec: what is taken from the environment, and what is refused.
func TestNewSpec(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PATH": "/usr/bin:/bin", "HOME": "/home/u", "XDG_STATE_HOME": "/s",
		"FLEETMGR_BROKER_PASSWORD": "secret", "HERDR_PANE_ID": "p1"}
	getenv := func(k string) string { return env[k] }
	plain := filepath.Join(bin, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	gorun := filepath.Join(t.TempDir(), "go-build1234", "b001", "exe", "fleetmgr") // where `go run` builds
	if err := os.MkdirAll(filepath.Dir(gorun), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gorun, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := NewSpec(gorun, "/c/fleets.toml", "/c/broker.env", getenv); err == nil || !strings.Contains(err.Error(), "temporary build") {
		t.Fatalf("NewSpec with a go run executable: %v", err)
	}
	for _, tc := range []struct{ exe, cfg, envf, want string }{
		{"fleetmgr", "/c/f.toml", "/c/b.env", "not an absolute path"},
		{"/usr/bin/true", "c/f.toml", "/c/b.env", "not an absolute path"},
		{"/usr/bin/true", "/c/f\n.toml", "/c/b.env", "cannot carry"},
		{"/usr/bin/true", "/c/f.toml", "/c/my b.env", "blanks, quotes or backslashes"},
		{"/nonexistent/fleetmgr", "/c/f.toml", "/c/b.env", "no such file"},
		{plain, "/c/f.toml", "/c/b.env", "not an executable"},
		{"/opt/it's/fleetmgr", "/c/f.toml", "/c/b.env", "quotes or backslashes"},
	} {
		if _, err := NewSpec(tc.exe, tc.cfg, tc.envf, getenv); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewSpec(%q, %q, %q) = %v, want %q", tc.exe, tc.cfg, tc.envf, err, tc.want)
		}
	}
	s, err := NewSpec("/usr/bin/true", "/c/f.toml", "/c/b.env", getenv)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Env, []string{"PATH=/usr/bin:/bin", "XDG_STATE_HOME=/s"}) || s.Log != "/home/u/Library/Logs/fleetmgr.log" {
		t.Fatalf("Spec %+v", s)
	}
	u, _ := SystemdUnit(s)
	p, _ := LaunchdPlist(s)
	for _, def := range [][]byte{u, p} {
		if bytes.Contains(def, []byte("secret")) || bytes.Contains(def, []byte("HERDR_")) || bytes.Contains(def, []byte("FLEETMGR_BROKER")) {
			t.Fatalf("a definition carries a secret or a pane's identity:\n%s", def)
		}
	}
}

func TestDefinitionPaths(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	h := map[string]string{"HOME": "/home/u"}
	x := map[string]string{"HOME": "/home/u", "XDG_CONFIG_HOME": "/x"}
	for _, tc := range []struct {
		k    Kind
		env  map[string]string
		want string
	}{
		{Systemd, h, "/home/u/.config/systemd/user/fleetmgr.service"},
		{Systemd, x, "/x/systemd/user/fleetmgr.service"},
		{Launchd, x, "/home/u/Library/LaunchAgents/" + Label + ".plist"},
	} {
		if got, err := DefinitionPath(tc.k, env(tc.env)); err != nil || got != tc.want {
			t.Errorf("DefinitionPath(%s, %v) = %q, %v", tc.k, tc.env, got, err)
		}
	}
	if got, _ := EnvFilePath(env(h)); got != "/home/u/.config/fleetmgr/broker.env" {
		t.Errorf("EnvFilePath = %q", got)
	}
	if got, _ := EnvFilePath(env(x)); got != "/x/fleetmgr/broker.env" {
		t.Errorf("EnvFilePath = %q", got)
	}
}

// fakeManager records the commands it is given; fail decides which fail.
type fakeManager struct {
	ran  []string
	fail func(cmd string) (string, error)
}

func (f *fakeManager) run(_ context.Context, name string, args ...string) (string, error) {
	cmd := strings.Join(append([]string{name}, args...), " ")
	f.ran = append(f.ran, cmd)
	if f.fail != nil {
		return f.fail(cmd)
	}
	return "", nil
}

func TestInstallUninstallSystemd(t *testing.T) {
	dir := t.TempDir()
	s := testSpec(t)
	s.EnvFile = filepath.Join(dir, "cfg", "broker.env")
	o := Options{Kind: Systemd, Spec: s, Path: filepath.Join(dir, "systemd", "user", UnitName)}
	fm := &fakeManager{}
	o.Run = fm.run
	ctx := context.Background()
	res, err := Install(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"systemctl --user daemon-reload", "systemctl --user enable --now " + UnitName, "systemctl --user try-restart " + UnitName}
	if !res.Changed || !res.EnvFileCreated || !slices.Equal(fm.ran, want) || !slices.Equal(res.Ran, want) {
		t.Fatalf("first install: %+v, ran %q", res, fm.ran)
	}
	if st, _ := os.Stat(o.Path); st.Mode().Perm() != 0o644 {
		t.Errorf("unit mode %v", st.Mode().Perm())
	}
	if st, _ := os.Stat(s.EnvFile); st.Mode().Perm() != 0o600 {
		t.Errorf("env file mode %v", st.Mode().Perm())
	}
	// Again, unchanged: no try-restart, the env file is kept.
	fm.ran = nil
	if res, err = Install(ctx, o); err != nil || res.Changed || res.EnvFileCreated || len(fm.ran) != 2 {
		t.Fatalf("second install: %+v %v, ran %q", res, err, fm.ran)
	}
	st, err := Status(ctx, o)
	if err != nil || !st.Installed || !st.Current || st.EnvFileProblem != "" || st.Enabled != "" {
		t.Fatalf("status: %+v %v", st, err)
	}
	// Another config: status says the unit is not current.
	o2 := o
	o2.Spec.Config = "/elsewhere/fleets.toml"
	if st, _ := Status(ctx, o2); !st.Installed || st.Current {
		t.Fatalf("status with another config: %+v", st)
	}
	// A group-readable env file is refused; nothing is written.
	if err := os.Chmod(s.EnvFile, 0o640); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(o.Path)
	if _, err := Install(ctx, o2); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("install with a 0640 env file: %v", err)
	}
	if after, _ := os.ReadFile(o.Path); !bytes.Equal(before, after) {
		t.Fatal("the unit was rewritten despite the refused env file")
	}
	if st, _ := Status(ctx, o); !strings.Contains(st.EnvFileProblem, "chmod 600") {
		t.Fatalf("status of a 0640 env file: %+v", st)
	}
	_ = os.Chmod(s.EnvFile, 0o600)
	fm.ran = nil
	res, err = Uninstall(ctx, o)
	if err != nil || !res.Changed || !slices.Equal(fm.ran, []string{"systemctl --user disable --now " + UnitName, "systemctl --user daemon-reload"}) {
		t.Fatalf("uninstall: %+v %v ran %q", res, err, fm.ran)
	}
	if _, err := os.Stat(o.Path); err == nil {
		t.Fatal("unit still there")
	}
	if _, err := os.Stat(s.EnvFile); err != nil {
		t.Fatal("uninstall removed the env file")
	}
	if res, err := Uninstall(ctx, o); err != nil || res.Changed || !strings.Contains(res.Note, "not installed") {
		t.Fatalf("second uninstall: %+v %v", res, err)
	}
}

// TestInstallWithoutUserManager: when systemctl --user does not answer,
// the unit is still written and the commands are returned to run by hand;
// uninstall then removes the unit and its enablement link itself.
func TestInstallWithoutUserManager(t *testing.T) {
	dir := t.TempDir()
	s := testSpec(t)
	s.EnvFile = filepath.Join(dir, "broker.env")
	fm := &fakeManager{fail: func(string) (string, error) {
		return "Failed to connect to bus: No medium found", errors.New("exit status 1")
	}}
	o := Options{Kind: Systemd, Spec: s, Path: filepath.Join(dir, "user", UnitName), Run: fm.run}
	res, err := Install(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Ran) != 0 || len(res.Todo) != 3 || res.Todo[1] != "systemctl --user enable --now "+UnitName || !strings.Contains(res.Note, "No medium found") {
		t.Fatalf("%+v", res)
	}
	link := filepath.Join(dir, "user", "default.target.wants", UnitName)
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(o.Path, link); err != nil {
		t.Fatal(err)
	}
	res, err = Uninstall(context.Background(), o)
	if err != nil || !res.Changed || !strings.Contains(res.Note, "still runs") {
		t.Fatalf("%+v %v", res, err)
	}
	for _, p := range []string{o.Path, link} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s still there", p)
		}
	}
	// A failure after the manager answered is an error.
	fm.fail = func(cmd string) (string, error) {
		if strings.Contains(cmd, "enable") {
			return "Unit fleetmgr.service has a bad setting", errors.New("exit status 1")
		}
		return "", nil
	}
	if _, err := Install(context.Background(), o); err == nil || !strings.Contains(err.Error(), "bad setting") {
		t.Fatalf("install with a failing enable: %v", err)
	}
}

func TestInstallLaunchd(t *testing.T) {
	dir := t.TempDir()
	s := testSpec(t)
	s.EnvFile = filepath.Join(dir, "broker.env")
	s.Log = filepath.Join(dir, "Logs", "fleetmgr.log")
	fm := &fakeManager{fail: func(cmd string) (string, error) {
		if strings.HasPrefix(cmd, "launchctl print") {
			return "", errors.New("not loaded")
		}
		return "", nil
	}}
	o := Options{Kind: Launchd, Spec: s, Path: filepath.Join(dir, "LaunchAgents", Label+".plist"), Run: fm.run, UID: 501}
	res, err := Install(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"launchctl print gui/501/" + Label, "launchctl bootstrap gui/501 " + o.Path}; !slices.Equal(fm.ran, want) {
		t.Fatalf("ran %q, want %q", fm.ran, want)
	}
	if _, err := os.Stat(filepath.Dir(s.Log)); err != nil {
		t.Errorf("log directory not created: %v", err)
	}
	if !res.Changed {
		t.Fatal("not written")
	}
	fm.ran, fm.fail = nil, nil // now loaded: booted out first
	if _, err := Install(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("launchctl bootout gui/501/%s", Label); len(fm.ran) != 3 || fm.ran[1] != want {
		t.Fatalf("ran %q", fm.ran)
	}
}

// TestResolve: the flags of `fleetmgr service` as Options: the kind, the
// definition's and the environment file's paths (a relative --env-file made
// absolute), the Spec only with a config; an unknown manager or a path a
// definition cannot carry is a *UsageError.
func TestResolve(t *testing.T) {
	env := map[string]string{"HOME": "/home/u", "PATH": "/usr/bin"}
	getenv := func(k string) string { return env[k] }
	o, err := Resolve(Flags{Kind: "launchd", Config: "/c/fleets.toml", Exe: "/usr/bin/true", Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != Launchd || o.Path != "/home/u/Library/LaunchAgents/"+Label+".plist" || o.UID != os.Getuid() ||
		o.Spec.Exe != "/usr/bin/true" || o.Spec.Config != "/c/fleets.toml" || o.Spec.EnvFile != "/home/u/.config/fleetmgr/broker.env" {
		t.Fatalf("Resolve launchd: %+v", o)
	}
	wd, _ := os.Getwd()
	o, err = Resolve(Flags{Kind: "systemd", EnvFile: "b.env", Getenv: getenv}) // uninstall: no config
	if err != nil || o.Spec.EnvFile != filepath.Join(wd, "b.env") || o.Spec.Exe != "" || o.Path != "/home/u/.config/systemd/user/"+UnitName {
		t.Fatalf("Resolve without a config: %+v %v", o, err)
	}
	o, err = Resolve(Flags{Config: "/c/fleets.toml", Getenv: getenv}) // this executable, this system's kind
	exe, _ := os.Executable()
	if strings.Contains(exe, "go-build") && (err == nil || !strings.Contains(err.Error(), "temporary build")) ||
		!strings.Contains(exe, "go-build") && (err != nil || o.Spec.Exe != exe || o.Kind != DefaultKind()) {
		t.Fatalf("Resolve with this executable %s: %+v %v", exe, o, err)
	}
	var u *UsageError
	for _, f := range []Flags{{Kind: "upstart", Getenv: getenv}, {Config: "rel.toml", Exe: "/usr/bin/true", Getenv: getenv}} {
		if _, err := Resolve(f); !errors.As(err, &u) || u.ExitStatus() != 2 {
			t.Errorf("Resolve(%+v) = %v, want a *UsageError", f, err)
		}
	}
	if _, err := Resolve(Flags{Getenv: func(string) string { return "" }}); err == nil || errors.As(err, &u) {
		t.Errorf("Resolve without HOME: %v, want an error that is not a usage error", err)
	}
}
