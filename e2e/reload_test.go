package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// Config reload and one supervisor per state dir, with real processes.

// fleetTable is a [fleets.NAME] table on the stand-ins, as harness.NewEnv
// writes them, with its own project directory and a free port.
func fleetTable(t *testing.T, e *harness.Env, name, extra string) string {
	t.Helper()
	proj := filepath.Join(e.Dir, "proj-"+name)
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	port := harness.FreePort(t)
	e.Ports[name] = port
	q := []string{strconv.Quote(bins.Fleetd), strconv.Quote("--config"), strconv.Quote("{{.ConfigPath}}")}
	return fmt.Sprintf("\n[fleets.%s]\nproject = %q\ncommand = [%s]\nport = %d\n%s\n", name, proj, strings.Join(q, ", "), port, extra)
}

// editConfig rewrites e's fleets.toml with edit applied to its text.
func editConfig(t *testing.T, e *harness.Env, edit func(string) string) {
	t.Helper()
	b, err := os.ReadFile(e.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.ConfigPath, []byte(edit(string(b))), 0o644); err != nil {
		t.Fatal(err)
	}
}

// dropFleet removes the [fleets.name] table from a config's text (every
// table harness and fleetTable write ends at the next "\n[" or the end).
func dropFleet(text, name string) string {
	i := strings.Index(text, "\n[fleets."+name+"]")
	if i < 0 {
		return text
	}
	j := strings.Index(text[i+1:], "\n[")
	if j < 0 {
		return text[:i+1]
	}
	return text[:i+1] + text[i+1+j+1:]
}

// hangup sends SIGHUP to serve and waits (up to 10 s) until its log has
// one more "config reloaded" or "not applied" line than before.
func hangup(t *testing.T, serve *harness.Serve) {
	t.Helper()
	count := func() int {
		l := serve.Log()
		return strings.Count(l, "msg=\"config reloaded\"") + strings.Count(l, "fleets.toml not applied")
	}
	before := count()
	t0 := time.Now()
	if err := serve.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if !svWait(10*time.Second, func() bool { return count() > before }) {
		t.Fatalf("serve logged no reload within 10s of SIGHUP:\n%s", serve.Log())
	}
	t.Logf("SIGHUP → reload logged in %s", time.Since(t0).Round(time.Millisecond))
}

// serveAlive reports whether serve's process still runs.
func serveAlive(serve *harness.Serve) bool {
	return serve.Cmd.ProcessState == nil && syscall.Kill(serve.Cmd.Process.Pid, 0) == nil
}

// reloadRow is the part of a list row (CLI --json and fleetmgr_list) these
// tests read.
type reloadRow struct {
	Name           string   `json:"name"`
	State          string   `json:"state"`
	PID            int      `json:"pid"`
	NotInConfig    bool     `json:"not_in_config"`
	RestartPending []string `json:"restart_pending"`
	Port           int      `json:"port"`
	PendingChanges []string `json:"pending_changes"`
}

func listRows(t *testing.T, e *harness.Env) map[string]reloadRow {
	t.Helper()
	r := e.MustRun("list", "--json")
	var rows []reloadRow
	if err := json.Unmarshal([]byte(r.Stdout), &rows); err != nil {
		t.Fatalf("list --json: %v\n%s", err, r.Stdout)
	}
	out := map[string]reloadRow{}
	for _, row := range rows {
		out[row.Name] = row
	}
	return out
}

// TestReloadAddsFleets: a fleet added to fleets.toml while serve runs →
// SIGHUP → `fleetmgr start NEW` through the daemon exits 0 and every fleet
// tool's `fleet` enum shows NEW within one refresh; serve still runs after
// SIGHUP. A fleet added without any reload is started all the same (the
// daemon re-reads the changed file before it would answer "unknown
// fleet"), and `fleetmgr reload` exits 0 saying what it found.
func TestReloadAddsFleets(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	serve := e.StartServe()
	e.MustRun("start", "kb")
	w := connectWatcher(t, e.URL())
	w.waitTool(t, "fleet_whoami", []string{"kb"}, false, 5*time.Second)

	editConfig(t, e, func(s string) string { return s + fleetTable(t, e, "fresh", "") })
	hangup(t, serve)
	// The reload's line says serve handled the SIGHUP (its default action
	// would have killed serve before any line).
	wait.LogLine(t, 5*time.Second, serve.Log, "added=[fresh]")
	if !serveAlive(serve) {
		t.Fatalf("serve died of SIGHUP:\n%s", serve.Log())
	}
	out := e.Run("start", "fresh")
	if out.Code != 0 || !strings.Contains(out.Stdout, "fresh: running") {
		t.Fatalf("start fresh after SIGHUP: exit %d\n%s%s", out.Code, out.Stdout, out.Stderr)
	}
	st := readState(t, e, "fresh")
	if pst, _ := procfs.ReadStat(st.Fleetd.PID); pst == nil || pst.PPID != serve.Cmd.Process.Pid {
		t.Errorf("fleetd %d of fresh is not serve's child (stat %+v): the start did not go through the daemon", st.Fleetd.PID, pst)
	}
	w.waitTool(t, "fleet_whoami", []string{"fresh", "kb"}, false, 2*time.Second) // one refresh (RefreshEvery)

	// Added, no reload at all: the CLI verb must not hear "unknown fleet".
	editConfig(t, e, func(s string) string { return s + fleetTable(t, e, "later", "") })
	out = e.Run("start", "later")
	if out.Code != 0 || strings.Contains(out.Stderr, "unknown fleet") {
		t.Fatalf("start later (file changed, no reload): exit %d\n%s%s", out.Code, out.Stdout, out.Stderr)
	}
	if st := readState(t, e, "later"); st.Fleetd == nil || !svAlive(st.Fleetd.PID) {
		t.Fatalf("later not running: %+v", st)
	}
	w.waitTool(t, "fleet_whoami", []string{"fresh", "kb", "later"}, false, 2*time.Second)

	r := e.Run("reload")
	if r.Code != 0 || !strings.Contains(r.Stdout, "reloaded "+e.ConfigPath) || !strings.Contains(r.Stdout, "fresh, kb, later") {
		t.Fatalf("fleetmgr reload: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	if !serveAlive(serve) {
		t.Fatal("serve died")
	}
}

// TestReloadRemovedFleetStaysStoppable: fleets removed from the file while
// they run are listed as not in the config (CLI and fleetmgr_list), stop
// through the CLI and through MCP, and are never restarted by the
// supervisor once stopped; then they leave every list.
func TestReloadRemovedFleetStaysStoppable(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"}, harness.Fleet{Name: "viacli"}, harness.Fleet{Name: "viamcp"})
	serve := e.StartServe()
	for _, n := range []string{"kb", "viacli", "viamcp"} {
		e.MustRun("start", n)
	}
	cliPID, mcpPID := readState(t, e, "viacli").Fleetd.PID, readState(t, e, "viamcp").Fleetd.PID
	editConfig(t, e, func(s string) string { return dropFleet(dropFleet(s, "viacli"), "viamcp") })
	r := e.Run("reload")
	if r.Code != 0 || !strings.Contains(r.Stdout, "removed: viacli, still running") || !strings.Contains(r.Stdout, "removed: viamcp, still running") {
		t.Fatalf("fleetmgr reload: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	rows := listRows(t, e)
	for _, n := range []string{"viacli", "viamcp"} {
		if row := rows[n]; !row.NotInConfig || row.State != "running" {
			t.Errorf("list --json row of %s: %+v; want running, not_in_config", n, row)
		}
	}
	if rows["kb"].NotInConfig {
		t.Errorf("kb is in the config: %+v", rows["kb"])
	}
	if table := e.MustRun("list").Stdout; !regexp.MustCompile(`viacli\s+running \(not in config\)`).MatchString(table) {
		t.Errorf("list table:\n%s", table)
	}
	cs := connect(t, e.URL())
	var ml struct {
		Fleets []reloadRow `json:"fleets"`
	}
	res := call(t, cs, "fleetmgr_list", map[string]any{})
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &ml); err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(ml.Fleets, func(r reloadRow) bool { return r.Name == "viamcp" }); i < 0 || !ml.Fleets[i].NotInConfig {
		t.Fatalf("fleetmgr_list: %+v", ml.Fleets)
	}
	// A retired fleet can be stopped, never started.
	if r := e.Run("start", "viacli"); r.Code == 0 || !strings.Contains(r.Stderr, "no longer in") {
		t.Fatalf("start of a removed fleet: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}

	if r := e.Run("stop", "viacli"); r.Code != 0 || !strings.Contains(r.Stdout, "viacli: stopped") {
		t.Fatalf("stop viacli (CLI, through the daemon): exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	res = call(t, cs, "fleetmgr_stop", map[string]any{"fleet": "viamcp"})
	if res.IsError {
		t.Fatalf("fleetmgr_stop viamcp: %s", textOf(res))
	}
	for n, pid := range map[string]int{"viacli": cliPID, "viamcp": mcpPID} {
		if !svWait(5*time.Second, func() bool { return !svAlive(pid) }) {
			t.Errorf("fleetd %d of %s still alive after stop", pid, n)
		}
	}
	// Never restarted: the supervisor looks every 250 ms; give it more
	// than a backoff (1 s) and a start.
	wait.Never(t, 2500*time.Millisecond, "a stopped removed fleet restarted", func() (bool, string) {
		for _, n := range []string{"viacli", "viamcp"} {
			st := readState(t, e, n)
			if h := svHealth(e.Ports[n]); st.Fleetd != nil || st.Desired != "stopped" || st.Restarts != 0 || h != "" {
				return true, fmt.Sprintf("%s after stop: %+v (healthz %q)", n, st, h)
			}
		}
		return false, ""
	})
	rows = listRows(t, e)
	if _, ok := rows["viacli"]; ok || len(rows) != 1 {
		t.Errorf("stopped removed fleets are still listed: %+v", rows)
	}
	if !serveAlive(serve) {
		t.Fatal("serve died")
	}
}

// TestReloadChangedSettingsPendRestart: a running fleet whose settings
// change reads "restart pending" (list, list --json, status --json through
// the daemon) naming the changed keys, until `fleetmgr restart` applies
// them; meanwhile its tools are still reached where it runs, even with its
// port changed in the file.
func TestReloadChangedSettingsPendRestart(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	serve := e.StartServe()
	e.MustRun("start", "kb")
	oldPort, newPort := e.Ports["kb"], harness.FreePort(t)
	editConfig(t, e, func(s string) string {
		return strings.Replace(s, fmt.Sprintf("port = %d\n", oldPort), fmt.Sprintf("port = %d\nlead_tab = \"boss\"\ncall_timeout = \"9s\"\n", newPort), 1)
	})
	hangup(t, serve)
	row := listRows(t, e)["kb"]
	if !slices.Equal(row.RestartPending, []string{"lead_tab", "port"}) || row.State != "running" {
		t.Fatalf("list --json after the change: %+v; want restart_pending [lead_tab port] (call_timeout applies at once)", row)
	}
	// The row shows what runs; the pending values are the pending line's
	// (issue 24 item 9: "restart pending: port 9224 → 9230").
	table := e.MustRun("list").Stdout
	if !strings.Contains(table, "running (restart pending)") || !strings.Contains(table, fmt.Sprintf("kb: restart pending: lead_tab; port %d → %d (changed in", oldPort, newPort)) ||
		!strings.Contains(table, strconv.Itoa(oldPort)) {
		t.Errorf("list table (kb still on port %d):\n%s", oldPort, table)
	}
	for _, l := range strings.Split(table, "\n") {
		if strings.HasPrefix(l, "kb ") && strings.Contains(l, strconv.Itoa(newPort)) {
			t.Errorf("kb's row mixes the pending port %d with what runs:\n%s", newPort, l)
		}
	}
	if row := listRows(t, e)["kb"]; row.Port != oldPort || !slices.Contains(row.PendingChanges, fmt.Sprintf("port %d → %d", oldPort, newPort)) {
		t.Errorf("list --json port %d, pending %q; want the running %d and the change %d → %d", row.Port, row.PendingChanges, oldPort, oldPort, newPort)
	}
	cs := connect(t, e.URL())
	if res := call(t, cs, "fleet_whoami", map[string]any{"fleet": "kb"}); res.IsError {
		t.Fatalf("kb, running on its old port, not reached: %s", textOf(res))
	}
	var rep struct {
		Via    string `json:"via"`
		Fleets []struct {
			Name           string   `json:"name"`
			RestartPending []string `json:"restart_pending"`
		} `json:"fleets"`
	}
	out := e.MustRun("status", "--json", "--interval", "100ms")
	if err := json.Unmarshal([]byte(out.Stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Via != "daemon" || len(rep.Fleets) != 1 || !slices.Equal(rep.Fleets[0].RestartPending, []string{"lead_tab", "port"}) {
		t.Fatalf("status --json: %s", out.Stdout)
	}
	e.MustRun("restart", "kb")
	if row := listRows(t, e)["kb"]; len(row.RestartPending) != 0 || row.State != "running" {
		t.Fatalf("after restart: %+v; want no restart pending", row)
	}
	if svHealth(newPort) != "kb" || svHealth(oldPort) != "" {
		t.Fatalf("after restart kb answers on %d: %q, on %d: %q", newPort, svHealth(newPort), oldPort, svHealth(oldPort))
	}
	if res := call(t, cs, "fleet_whoami", map[string]any{"fleet": "kb"}); res.IsError {
		t.Fatalf("kb, restarted on its new port, not reached: %s", textOf(res))
	}
}

// TestReloadInvalidFileKeepsConfig: a file that does not load changes
// nothing: SIGHUP logs each problem with file:line and serve goes on with
// the old config; `fleetmgr reload` and fleetmgr_reload fail naming
// file:line.
func TestReloadInvalidFileKeepsConfig(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	serve := e.StartServe()
	e.MustRun("start", "kb")
	good, err := os.ReadFile(e.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	bad := string(good) + fleetTable(t, e, "broken", "colour = 1")
	badLine := strings.Count(bad[:strings.Index(bad, "colour")], "\n") + 1
	where := fmt.Sprintf("%s:%d", e.ConfigPath, badLine)
	editConfig(t, e, func(string) string { return bad })

	hangup(t, serve)
	if !strings.Contains(serve.Log(), where) || !strings.Contains(serve.Log(), "the config in force stays") {
		t.Fatalf("serve log does not name %s:\n%s", where, serve.Log())
	}
	if !serveAlive(serve) {
		t.Fatal("serve died")
	}
	r := e.Run("reload")
	if r.Code != 2 || !strings.Contains(r.Stderr, where) {
		t.Fatalf("fleetmgr reload of an invalid file: exit %d, want 2 naming %s\n%s%s", r.Code, where, r.Stdout, r.Stderr)
	}
	cs := connect(t, e.URL())
	res := call(t, cs, "fleetmgr_reload", map[string]any{})
	if !res.IsError || !strings.Contains(textOf(res), where) {
		t.Fatalf("fleetmgr_reload of an invalid file: isError %v\n%s", res.IsError, textOf(res))
	}
	// The old config stays: kb works, "broken" is unknown to the daemon.
	res = call(t, cs, "fleet_whoami", map[string]any{"fleet": "kb"})
	if res.IsError {
		t.Fatalf("kb after a refused reload: %s", textOf(res))
	}
	res = call(t, cs, "fleetmgr_start", map[string]any{"fleet": "broken"})
	if !res.IsError || !strings.Contains(textOf(res), where) {
		t.Fatalf("fleetmgr_start of a fleet only an invalid file names: %s", textOf(res))
	}

	// Fixed: reload exits 0.
	editConfig(t, e, func(string) string { return string(good) })
	if r := e.Run("reload"); r.Code != 0 {
		t.Fatalf("reload of the fixed file: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
	// No daemon: exit 1, saying so.
	cs.Close() // its open stream would hold serve's HTTP shutdown for its 5 s bound
	if err := serve.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !svWait(10*time.Second, func() bool { return svReaped(serve.Cmd.Process.Pid) }) {
		t.Fatal("serve did not stop")
	}
	if r := e.Run("reload"); r.Code != 1 || !strings.Contains(r.Stderr, "no fleetmgr serve runs") {
		t.Fatalf("reload without a daemon: exit %d\n%s%s", r.Code, r.Stdout, r.Stderr)
	}
}

// TestOneServePerStateDir: a second serve on the same state dir, with
// another listen address and socket, exits non-zero within 10 s naming the
// first one's pid, in the foreground and with --detach; the first goes on
// serving.
func TestOneServePerStateDir(t *testing.T) {
	e := harness.NewEnv(t, bins, "", harness.Fleet{Name: "kb"})
	serve := e.StartServe()
	pid := strconv.Itoa(serve.Cmd.Process.Pid)
	other := filepath.Join(e.Dir, "other.toml")
	otherListen := fmt.Sprintf("127.0.0.1:%d", harness.FreePort(t))
	editOther := func(s string) string {
		s = strings.Replace(s, "listen = \""+e.Listen+"\"", "listen = \""+otherListen+"\"", 1)
		return strings.Replace(s, "[manager]\n", "[manager]\nmcp_socket = \""+filepath.Join(e.Dir, "other.sock")+"\"\n", 1)
	}
	b, err := os.ReadFile(e.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(other, []byte(editOther(string(b))), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, detach := range []bool{false, true} {
		args := []string{"--config", other, "serve"}
		if detach {
			args = append(args, "--detach")
		}
		cmd := exec.Command(bins.Fleetmgr, args...)
		cmd.Env = e.Environ
		t0 := time.Now()
		done := make(chan error, 1)
		var outb strings.Builder
		cmd.Stdout, cmd.Stderr = &outb, &outb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil {
				t.Fatalf("second serve (detach %v) exited 0:\n%s", detach, outb.String())
			}
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("second serve (detach %v) still running after 10s:\n%s", detach, outb.String())
		}
		if !strings.Contains(outb.String(), "pid "+pid) || !strings.Contains(outb.String(), e.StateDir) {
			t.Errorf("second serve (detach %v) does not name the first (pid %s) and the state dir:\n%s", detach, pid, outb.String())
		}
		t.Logf("second serve (detach %v) refused in %s", detach, time.Since(t0).Round(time.Millisecond))
	}
	if _, err := os.Stat(filepath.Join(e.Dir, "other.sock")); err == nil {
		t.Error("the refused serve created its socket")
	}
	if !serveAlive(serve) {
		t.Fatalf("the first serve died:\n%s", serve.Log())
	}
	if r := e.MustRun("start", "kb"); !strings.Contains(r.Stdout, "kb: running") {
		t.Fatalf("first serve no longer works: %s", r.Stdout)
	}
	if pst, _ := procfs.ReadStat(readState(t, e, "kb").Fleetd.PID); pst == nil || pst.PPID != serve.Cmd.Process.Pid {
		t.Errorf("kb's fleetd is not the first serve's child: %+v", pst)
	}
}
