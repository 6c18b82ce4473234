package registry

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fakeEnv returns an env whose variables come from vars.
func fakeEnv(vars map[string]string) env {
	return env{getenv: func(k string) string { return vars[k] }, uid: 4242}
}

// writeFile writes body to dir/name and returns the path.
func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// lineOf returns the 1-based line of the first occurrence of marker in body.
func lineOf(t *testing.T, body, marker string) int {
	t.Helper()
	i := strings.Index(body, marker)
	if i < 0 {
		t.Fatalf("marker %q not in body", marker)
	}
	return strings.Count(body[:i], "\n") + 1
}

// loadBody writes body as fleets.toml in a fresh directory (HOME = that
// directory) and loads it.
//
//lint:ignore ST1008 the error sits beside the value it qualifies and before the file name; many call sites read it so
func loadBody(t *testing.T, body string) (*Config, error, string) {
	t.Helper()
	dir := t.TempDir()
	p := writeFile(t, dir, "fleets.toml", body)
	c, err := load(p, fakeEnv(map[string]string{"HOME": dir}))
	return c, err, dir
}

// fleetA is a valid fleet table used as a neighbour in error cases.
const fleetA = `
[fleets.a]
project = "/src/a"
command = ["fleetd"]
`

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		at    string // the error's line is the line of this text
		field string // the error names this key
		msg   string // and says this
		other string // and, for clashes, points at the line of this text
	}{
		{"syntax", "[manager]\nlisten = \n", "listen =", "manager.listen", "invalid TOML", ""},
		{"duplicate key", fleetA + "project = \"/x\"\n", "project = \"/x\"", "", "invalid TOML", ""},
		{"wrong type port", fleetA + "port = \"x\"\n", `port = "x"`, "fleets.a.port", `expected integer, got string "x"`, ""},
		{"wrong type dotted", "fleets.a.project = \"/p\"\nfleets.a.command = [\"f\"]\nfleets.a.port = true\n", "fleets.a.port", "fleets.a.port", "expected integer, got boolean true", ""},
		{"wrong type inline", "[fleets]\na = { project = \"/p\", command = \"fleetd\" }\n", "a = {", "fleets.a.command", `expected array of strings, got string "fleetd"`, ""},
		{"wrong type array element", fleetA + "lead_command = [\"claude\",\n  7]\n", "  7]", "fleets.a.lead_command[1]", "expected string, got integer 7", ""},
		{"wrong type table", "manager = 5\n", "manager = 5", "manager", "expected table, got integer 5", ""},
		{"array of tables", "[[fleets]]\nproject = \"/p\"\n", "[[fleets]]", "fleets", "expected table, got array", ""},
		{"fleet not a table", "[fleets]\na = 1\n", "a = 1", "fleets.a", "expected table, got integer 1", ""},
		{"unknown root key", "colour = 1\n" + fleetA, "colour", "colour", "unknown key", ""},
		{"unknown key too long to repeat", "[manager]\n" + strings.Repeat("k", 5000) + " = 1\n", "kkkk", "manager.\"" + strings.Repeat("k", 40) + "…(5000 bytes)\"", "unknown key", ""},
		{"bare CR line endings", "[manager]\rlisten = \"127.0.0.1:1\"\r", "[manager]", "manager", "save it with LF line endings", ""},
		{"CRLF is not bare CR", "[manager]\r\nlisten = \r\n", "listen =", "manager.listen", "invalid TOML: expected value", ""},
		{"unknown manager key", "[manager]\n\nlisten_addr = \"x\"\n", "listen_addr", "manager.listen_addr", "unknown key", ""},
		{"unknown fleet key suggests", fleetA + "\nprot = 8770\n", "prot =", "fleets.a.prot", "did you mean port?", ""},
		{"unknown key in inline table", "[fleets]\nkb = { project = \"/p\", command = [\"f\"],\n  lead = true, colour = 1 }\n", "colour", "fleets.kb.colour", "unknown key", ""},
		{"bad fleet name", "[fleets.KB]\nproject = \"/p\"\ncommand = [\"f\"]\n", "[fleets.KB]", "fleets.KB", "^[a-z][a-z0-9_-]{0,31}$", ""},
		{"fleet name too long", "[fleets." + strings.Repeat("a", 33) + "]\nproject = \"/p\"\ncommand = [\"f\"]\n", "[fleets.", "fleets." + strings.Repeat("a", 33), "lowercase letter", ""},
		{"missing project", "\n[fleets.kb]\ncommand = [\"f\"]\n", "[fleets.kb]", "fleets.kb.project", "missing", ""},
		{"missing command", "\n\n[fleets.kb]\nproject = \"/p\"\n", "[fleets.kb]", "fleets.kb.command", "missing", ""},
		{"empty command", fleetA + "[fleets.b]\nproject = \"/b\"\ncommand = []\n", "command = []", "fleets.b.command", "non-empty argv", ""},
		{"unknown template field", "[fleets.kb]\nproject = \"/p\"\ncommand = [\"f\",\n  \"--port={{.Prot}}\"]\n", "--port", "fleets.kb.command[1]", ".Prot is not a field", ""},
		{"template parse error", "[fleets.kb]\nproject = \"/p\"\ncommand = [\"f {{.Name\"]\n", "command", "fleets.kb.command[0]", "unclosed action", ""},
		{"template field of field", "[fleets.kb]\nproject = \"/p\"\ncommand = [\"{{.Port.X}}\"]\n", "command", "fleets.kb.command[0]", "has no fields", ""},
		{"template $ field", "[fleets.kb]\nproject = \"/p\"\ncommand = [\"{{with .Name}}{{$.Nope}}{{end}}\"]\n", "command", "fleets.kb.command[0]", ".Nope is not a field", ""},
		{"config_template missing", fleetA + "config_template = \"nope.tmpl\"\n", "config_template", "fleets.a.config_template", "no such file", ""},
		{"herdr_session invalid", fleetA + "herdr_session = \"a b\"\n", "herdr_session", "fleets.a.herdr_session", "[A-Za-z0-9._-]", ""},
		{"herdr_session dotdot", fleetA + "herdr_session = \"..\"\n", "herdr_session", "fleets.a.herdr_session", "is invalid", ""},
		{"herdr_session default", fleetA + "herdr_session = \"default\"\n", "herdr_session", "fleets.a.herdr_session", "default session", ""},
		{"herdr_session too long", fleetA + "herdr_session = \"" + strings.Repeat("x", 65) + "\"\n", "herdr_session", "fleets.a.herdr_session", "1-64", ""},
		{"env bad name", fleetA + "[fleets.a.env]\n\"1X\" = \"v\"\n", "\"1X\"", `fleets.a.env.1X`, "not an environment variable name", ""},
		{"env HERDR", fleetA + "env = { HERDR_SOCKET_PATH = \"/s\" }\n", "env =", "fleets.a.env.HERDR_SOCKET_PATH", "HERDR_*", ""},
		{"env FLEET", fleetA + "[fleets.a.env]\nOK = \"1\"\nFLEET_PORT = \"1\"\n", "FLEET_PORT", "fleets.a.env.FLEET_PORT", "contract with fleetd", ""},
		{"env not string", fleetA + "[fleets.a.env]\nN = 1\n", "N = 1", "fleets.a.env.N", "expected string, got integer 1", ""},
		{"env broker uri", fleetA + "broker_uri_env = \"AMQP_URL\"\n[fleets.a.env]\nAMQP_URL = \"amqp://\"\n", "AMQP_URL =", "fleets.a.env.AMQP_URL", "broker_uri_env", ""},
		{"broker_uri_env HERDR", fleetA + "broker_uri_env = \"HERDR_X\"\n", "broker_uri_env", "fleets.a.broker_uri_env", "HERDR_*", ""},
		{"mcp_path", fleetA + "mcp_path = \"mcp\"\n", "mcp_path", "fleets.a.mcp_path", "starting with \"/\"", ""},
		{"vhost slash", fleetA + "vhost = \"/\"\n", "vhost", "fleets.a.vhost", "shared default vhost", ""},
		{"lead not bool", fleetA + "lead = \"yes\"\n", "lead =", "fleets.a.lead", `expected boolean (true or false), got string "yes"`, ""},
		{"lead_tab empty", fleetA + "lead_tab = \"\"\n", "lead_tab", "fleets.a.lead_tab", "must not be empty", ""},
		{"duration unparsable", "[manager]\nstop_grace = \"10\"\n", "stop_grace", "manager.stop_grace", "expected a duration", ""},
		{"duration overflowing", fleetA + "lead_ready_timeout = \"9999999999h\"\n", "lead_ready_timeout", "fleets.a.lead_ready_timeout", "is too long: at most 2562047h", ""},
		{"duration negative", fleetA + "call_timeout = \"-1s\"\n", "call_timeout", "fleets.a.call_timeout", "must be positive", ""},
		{"duration wrong type", "[manager]\nstart_timeout = 30\n", "start_timeout", "manager.start_timeout", "expected duration string", ""},
		{"port_range length", "[manager]\nport_range = [1]\n", "port_range", "manager.port_range", "expected two integers", ""},
		{"port_range inverted", "[manager]\nport_range = [9000, 8000]\n", "port_range", "manager.port_range", "not a port range", ""},
		{"port_range element", "[manager]\nport_range = [9000, \"x\"]\n", "port_range", "manager.port_range[1]", "expected integer", ""},
		{"listen not host:port", "[manager]\nlisten = \"8760\"\n", "listen", "manager.listen", "not host:port", ""},
		{"listen bad port", "[manager]\nlisten = \"127.0.0.1:http\"\n", "listen", "manager.listen", "not a number", ""},
		{"listen port zero", "[manager]\nlisten = \"127.0.0.1:0\"\n", "listen", "manager.listen", "not a number in 1-65535", ""},
		{"port not a port", fleetA + "port = 70000\n", "port =", "fleets.a.port", "not a TCP port", ""},
		{"port outside range", "[manager]\nport_range = [9000, 9010]\n" + fleetA + "port = 8000\n", "port = 8000", "fleets.a.port", "outside manager.port_range [9000, 9010]", ""},
		{"port is manager's", "[manager]\nlisten = \"127.0.0.1:8770\"\n" + fleetA + "port = 8770\n", "port = 8770", "fleets.a.port", "manager's own", "listen ="},
		{"allowed_uids empty", "[guard]\nallowed_uids = []\n", "allowed_uids", "guard.allowed_uids", "at least one uid", ""},
		{"allowed_uids negative", "[guard]\nallowed_uids = [1000,\n -1]\n", "-1", "guard.allowed_uids[1]", "not a uid", ""},
		{"operator_sessions invalid", "[guard]\noperator_sessions = [\"ok\", \"a/b\"]\n", "operator_sessions", "guard.operator_sessions[1]", "is invalid", ""},
		{"state_dir unset var", "[manager]\nstate_dir = \"$NOPE/fm\"\n", "state_dir", "manager.state_dir", "$NOPE not set", ""},
		{"state_dir ~user", "[manager]\nstate_dir = \"~bob/fm\"\n", "state_dir", "manager.state_dir", "~user", ""},
		{"mcp_socket too long", "[manager]\nmcp_socket = \"/" + strings.Repeat("s", 120) + "\"\n", "mcp_socket", "manager.mcp_socket", "at most 107", ""},
		{"mcp_socket too long by default", "[manager]\nstate_dir = \"/" + strings.Repeat("s", 100) + "\"\n", "[manager]", "manager.mcp_socket", "at most 107", ""},

		// Isolation: the error names both fleets and both lines.
		{"shared port", "[fleets.a]\nproject = \"/a\"\ncommand = [\"f\"]\nport = 8770\n[fleets.b]\nproject = \"/b\"\ncommand = [\"f\"]\nport = 8770 # b\n", "port = 8770 # b", "fleets.b.port", `also fleet "a"'s`, "port = 8770\n"},
		{"shared herdr session", "[fleets.a]\nproject = \"/a\"\ncommand = [\"f\"]\nherdr_session = \"s\"\n[fleets.b]\nproject = \"/b\"\ncommand = [\"f\"]\nherdr_session = \"s\" # b\n", "\"s\" # b", "fleets.b.herdr_session", `herdr session "s" is also fleet "a"'s`, "herdr_session = \"s\"\n"},
		{"herdr session equals other's default", fleetA + "[fleets.b]\nproject = \"/b\"\ncommand = [\"f\"]\nherdr_session = \"a\"\n", "herdr_session = \"a\"", "fleets.b.herdr_session", `also fleet "a"'s`, "[fleets.a]"},
		{"default herdr session clashes", "[fleets.b]\nproject = \"/b\"\ncommand = [\"f\"]\nherdr_session = \"c\"\n[fleets.c]\nproject = \"/c\"\ncommand = [\"f\"]\n", "[fleets.c]", "fleets.c.herdr_session", `"c" (default: the fleet's name) is also fleet "b"'s`, "herdr_session = \"c\""},
		{"quoted env key", fleetA + "[fleets.a.env]\n\"A B\" = \"v\"\n", "\"A B\"", `fleets.a.env."A B"`, "not an environment variable name", ""},
		{"shared vhost", fleetA + "vhost = \"v\"\n[fleets.b]\nproject = \"/b\"\ncommand = [\"f\"]\nvhost = \"v\" # b\n", "\"v\" # b", "fleets.b.vhost", `vhost "v" is also fleet "a"'s`, "vhost = \"v\"\n"},
		{"shared worktree root", fleetA + "worktree_root = \"/w/\"\n[fleets.b]\nproject = \"/b\"\ncommand = [\"f\"]\nworktree_root = \"/w/x/..\" # b\n", "# b", "fleets.b.worktree_root", `also fleet "a"'s`, "worktree_root = \"/w/\""},
		{"nested worktree root", fleetA + "worktree_root = \"/w\"\n[fleets.b]\nproject = \"/b\"\ncommand = [\"f\"]\nworktree_root = \"/w/b\"\n", "\"/w/b\"", "fleets.b.worktree_root", `inside fleet "a"'s worktree root /w`, "worktree_root = \"/w\""},
		{"containing worktree root", fleetA + "worktree_root = \"/w/a\"\n[fleets.b]\nproject = \"/b\"\ncommand = [\"f\"]\nworktree_root = \"/w\"\n", "\"/w\"\n", "fleets.b.worktree_root", `contains fleet "a"'s worktree root /w/a`, "worktree_root = \"/w/a\""},
		{"operator session is a fleet's", "[guard]\noperator_sessions = [\n  \"ops\",\n  \"a\",\n]\n" + fleetA, "  \"a\",", "guard.operator_sessions[1]", `herdr session of fleet "a"`, "[fleets.a]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err, _ := loadBody(t, tc.body)
			if err == nil {
				t.Fatalf("Load succeeded; want an error about %s", tc.field)
			}
			want := fmt.Sprintf("fleets.toml:%d: ", lineOf(t, tc.body, tc.at))
			if tc.field != "" {
				want += tc.field + ": "
			}
			var match string
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.Contains(line, want) && strings.Contains(line, tc.msg) {
					match = line
				}
			}
			if match == "" {
				t.Fatalf("no error line contains %q and %q:\n%v", want, tc.msg, err)
			}
			if tc.other != "" {
				if ow := fmt.Sprintf("fleets.toml:%d", lineOf(t, tc.body, tc.other)); !strings.Contains(match, ow) {
					t.Fatalf("error does not point at the other place %s:\n%s", ow, match)
				}
			}
			var e *Error
			if !errors.As(err, &e) || !strings.HasSuffix(e.File, "fleets.toml") {
				t.Fatalf("error is not an *Error naming the file: %#v", err)
			}
		})
	}
}

func TestLoadCollectsAllErrorsSortedByLine(t *testing.T) {
	body := `[fleets.z]
project = "/z"
command = ["f"]
port = "x"

[manager]
listen = "nope"
colour = 1

[fleets.b]
command = ["f"]
`
	_, err, _ := loadBody(t, body)
	if err == nil {
		t.Fatal("want errors")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{
		"fleets.toml:4: fleets.z.port:",
		"fleets.toml:7: manager.listen:",
		"fleets.toml:8: manager.colour:",
		"fleets.toml:10: fleets.b.project: missing",
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("error %d = %q, want it to contain %q", i, lines[i], w)
		}
	}
}

// TestLoadSyntaxErrorsNameLineAndSection: a TOML syntax error names the
// line it is on and the key or section it is in, never the section before
// it (the parser's last key is stale on a broken header and after a
// finished value), and only file:line when no section applies.
func TestLoadSyntaxErrorsNameLineAndSection(t *testing.T) {
	fleetB := "\n[fleets.b]\nproject = \"/b\"\n"
	cases := []struct {
		name  string
		body  string
		at    string // the error is on the line of this text
		field string // and names this key ("": none, just file:line)
		msg   string // and says this
	}{
		{"broken header after another fleet", fleetA + "[fleets.b\nproject = \"/b\"\n", "[fleets.b", "", "end table name"},
		{"broken header at the end", fleetA + "[fleets.b.\n", "[fleets.b.", "", "end table name"},
		{"empty header", fleetA + fleetB + "[\n", "[\n", "", "end table name"},
		{"junk after a good header", fleetA + "[fleets.b] x\nproject = \"/b\"\n", "[fleets.b] x", "fleets.b", "top-level item"},
		{"table defined twice", fleetA + fleetB + "[fleets.a]\nport = 1\n", "[fleets.a]\nport", "", "Key 'fleets.a' has already been defined"},
		{"junk after a value in the second fleet", fleetA + fleetB + "port = 80 80\n", "port = 80 80", "fleets.b.port", "top-level item"},
		{"missing = in the second fleet", fleetA + fleetB + "command [\"f\"]\n", "command [", "fleets.b", "expected '.' or '='"},
		{"bad value in the second fleet", fleetA + fleetB + "lead = tru\n", "lead = tru", "fleets.b.lead", `found "tru"`},
		{"dotted key in the second fleet", fleetA + fleetB + "env.X = 1 2\n", "env.X", "fleets.b.env.X", "top-level item"},
		{"bad value in manager after a fleet", fleetA + "[manager]\nstop_grace = 10s\n", "stop_grace", "manager.stop_grace", "top-level item"},
		{"unquoted listen in manager", fleetA + "\n[manager]\nlisten = 127.0.0.1:8760\n", "listen =", "manager.listen", "Invalid float"},
		{"missing value in manager", fleetA + "[manager]\nlisten =\n", "listen =", "manager.listen", "expected value"},
		{"unterminated array in the second fleet", fleetA + fleetB + "command = [\"f\"\n\n[fleets.c]\nproject = \"/c\"\n", "[fleets.c]", "fleets.b.command", "(in the value of fleets.b.command, which starts on line 8)"},
		{"duplicate key", fleetA + "project = \"/x\"\n", "project = \"/x\"", "fleets.a.project", "has already been defined."},
		{"top-level key", "x = 1 2\n" + fleetA, "x = 1 2", "x", "top-level item"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err, dir := loadBody(t, tc.body)
			if err == nil {
				t.Fatal("Load succeeded; want a syntax error")
			}
			want := fmt.Sprintf("%s:%d: ", filepath.Join(dir, "fleets.toml"), lineOf(t, tc.body, tc.at))
			if tc.field != "" {
				want += tc.field + ": "
			}
			want += "invalid TOML: "
			if got := err.Error(); !strings.HasPrefix(got, want) || !strings.Contains(got, tc.msg) || strings.Contains(got, "\n") {
				t.Fatalf("error = %q\nwant one line starting %q and containing %q", got, want, tc.msg)
			}
			var e *Error
			if !errors.As(err, &e) || e.Field != tc.field {
				t.Fatalf("error is not an *Error with Field %q: %#v", tc.field, err)
			}
		})
	}
}

func TestLoadDefaults(t *testing.T) {
	body := `[fleets.kb]
project = "proj"
command = ["fleetd", "--port", "{{.Port}}"]
`
	c, err, dir := loadBody(t, body)
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, ".local", "state", "fleetmgr")
	wantM := Manager{
		Listen:        "127.0.0.1:8760",
		StateDir:      state,
		HerdrBin:      "herdr",
		PortRange:     [2]int{8766, 8799},
		StopGrace:     Duration{10 * time.Second},
		StartTimeout:  Duration{30 * time.Second},
		CallTimeout:   Duration{120 * time.Second},
		MCPSocket:     filepath.Join(state, "fleetmgr.sock"),
		Restart:       defaultRestartPolicy(),
		LogMaxMB:      DefaultLogMaxMB,
		LogMaxBackups: DefaultLogMaxBackups,
		HerdrLabels:   true, // herdr_labels defaults on
		Journal:       true, // journal defaults on
		JournalMaxMB:  DefaultJournalMaxMB,
		JournalMaxAge: Duration{DefaultJournalMaxAge},
		FastPath:      true,
	}
	if !reflect.DeepEqual(c.Manager, wantM) {
		t.Errorf("manager = %+v\nwant %+v", c.Manager, wantM)
	}
	if !reflect.DeepEqual(c.Guard, Guard{AllowedUIDs: []int{4242}, OperatorSessions: []string{}}) {
		t.Errorf("guard = %+v", c.Guard)
	}
	if c.Path != filepath.Join(dir, "fleets.toml") {
		t.Errorf("path = %q", c.Path)
	}
	fs := filepath.Join(state, "fleets", "kb")
	want := &Fleet{
		Name:         "kb",
		Project:      filepath.Join(dir, "proj"),
		Command:      []string{"fleetd", "--port", "{{.Port}}"},
		HerdrSession: "kb",
		WorktreeRoot: filepath.Join(fs, "worktrees"),
		Env:          map[string]string{},
		MCPPath:      "/mcp",
		ConfigFile:   filepath.Join(fs, "fleetd.conf"),
		LeadTab:      "lead",
		LeadCommand:  []string{"claude"}, LeadReadyTimeout: Duration{DefaultLeadReady},
		CallTimeout:  Duration{120 * time.Second},
		Vhost:        "fleet-kb",
		BrokerUser:   "fleet-kb",
		BrokerURIEnv: "FLEET_BROKER_URI",
		StateDir:     fs,
		LogDir:       fs,
		Restart:      defaultRestartPolicy(),
		Host:         LocalHost,
		Line:         1,
	}
	if got := c.Fleets["kb"]; !reflect.DeepEqual(got, want) {
		t.Errorf("fleet = %+v\nwant  %+v", got, want)
	}
	wantS := Status{Interval: Duration{DefaultStatusInterval}, FleetTimeout: Duration{DefaultStatusTimeout},
		Ignore: []string{}, MaxWatches: DefaultMaxWatches}
	if !reflect.DeepEqual(c.Status, wantS) {
		t.Errorf("status = %+v\nwant %+v", c.Status, wantS)
	}
}

func TestLoadExpansion(t *testing.T) {
	dir := t.TempDir()
	body := `[manager]
state_dir = "${ROOT}/state"
call_timeout = "1m"
[fleets.kb]
project = "~/src/kb"
command = ["f"]
worktree_root = "$ROOT/wt"
call_timeout = "5s"
`
	p := writeFile(t, dir, "fleets.toml", body)
	c, err := load(p, fakeEnv(map[string]string{"HOME": "/home/u", "ROOT": "/r", "XDG_STATE_HOME": "/ignored"}))
	if err != nil {
		t.Fatal(err)
	}
	f := c.Fleets["kb"]
	checks := map[string][2]string{
		"state_dir":     {c.Manager.StateDir, "/r/state"},
		"mcp_socket":    {c.Manager.MCPSocket, "/r/state/fleetmgr.sock"},
		"project":       {f.Project, "/home/u/src/kb"},
		"worktree_root": {f.WorktreeRoot, "/r/wt"},
		"config_file":   {f.ConfigFile, "/r/state/fleets/kb/fleetd.conf"},
	}
	for k, v := range checks {
		if v[0] != v[1] {
			t.Errorf("%s = %q, want %q", k, v[0], v[1])
		}
	}
	if f.CallTimeout.Duration != 5*time.Second || c.Manager.CallTimeout.Duration != time.Minute {
		t.Errorf("call timeouts = %v, %v", f.CallTimeout, c.Manager.CallTimeout)
	}

	// XDG_STATE_HOME is the default's base when set and absolute.
	p2 := writeFile(t, dir, "b.toml", "")
	c2, err := load(p2, fakeEnv(map[string]string{"HOME": "/home/u", "XDG_STATE_HOME": "/xdg"}))
	if err != nil {
		t.Fatal(err)
	}
	if c2.Manager.StateDir != "/xdg/fleetmgr" {
		t.Errorf("state_dir = %q, want /xdg/fleetmgr", c2.Manager.StateDir)
	}
	// Neither HOME nor XDG_STATE_HOME: no default, said so.
	_, err = load(p2, fakeEnv(nil))
	if err == nil || !strings.Contains(err.Error(), "manager.state_dir: no default") {
		t.Errorf("err = %v, want a state_dir error", err)
	}
}

func TestExampleLoads(t *testing.T) {
	src, err := os.ReadFile("../fleets.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	// The example's commented-out key must parse too once enabled.
	body := strings.Replace(string(src), "# allowed_uids = [1000]", "allowed_uids = [1000]", 1)
	if body == string(src) {
		t.Fatal("example no longer documents allowed_uids")
	}
	home := t.TempDir()
	writeFile(t, home, "src/fleetd/fleetd.conf.tmpl", "name = \"{{.Name}}\"\nport = {{.Port}}\nherdr = \"{{.HerdrSocket}}\"\n")
	p := writeFile(t, home, "fleets.toml", body)
	c, err := load(p, fakeEnv(map[string]string{"HOME": home}))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Names(); !reflect.DeepEqual(got, []string{"fleetd", "kb"}) {
		t.Fatalf("names = %v", got)
	}
	f := c.Fleets["fleetd"]
	if f.Port != 8770 || !f.Lead || f.Env["RUST_LOG"] != "info" || f.CallTimeout.Duration != 300*time.Second {
		t.Errorf("fleetd = %+v", f)
	}
	if !reflect.DeepEqual(f.PassEnv, []string{"GH_TOKEN"}) || len(c.Manager.PassEnv) != 0 {
		t.Errorf("pass_env: fleet %v manager %v", f.PassEnv, c.Manager.PassEnv)
	}
	if !reflect.DeepEqual(c.Guard.AllowedUIDs, []int{1000}) {
		t.Errorf("allowed_uids = %v", c.Guard.AllowedUIDs)
	}
	if !c.Manager.FastPath {
		t.Error("fast_path = true in the example came out false")
	}
	out, err := f.RenderConfig(f.TemplateData("/run/h.sock"))
	if err != nil || string(out) != "name = \"fleetd\"\nport = 8770\nherdr = \"/run/h.sock\"\n" {
		t.Errorf("RenderConfig = %q, %v", out, err)
	}

	// Every key the loader knows appears in the example.
	for _, key := range []string{"listen", "state_dir", "herdr_bin", "port_range", "stop_grace",
		"start_timeout", "call_timeout", "mcp_socket", "allowed_uids", "operator_sessions",
		"project", "command", "port", "herdr_session", "worktree_root", "env", "mcp_path",
		"config_template", "config_file", "lead", "lead_tab", "lead_command", "lead_ready_timeout", "vhost", "broker_uri_env",
		"broker_user", "management_url", "amqp_url", "admin_user_env", "admin_password_env",
		"interval", "fleet_timeout", "ignore", "max_watches", "host", "pass_env", "fast_path",
		"journal", "journal_max_mb", "journal_max_age", "journal_call_arguments", "name", "on", "fleets", "hold",
		"type", "url_env", "preset", "herdr_health_interval"} {
		if !strings.Contains(body, "\n"+key+" = ") && !strings.Contains(body, "."+key+"]") {
			t.Errorf("example does not set %s", key)
		}
	}
}

func TestNamesAndFleet(t *testing.T) {
	c, err, _ := loadBody(t, fleetA+"[fleets.b]\nproject = \"/b\"\ncommand = [\"f\"]\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Names(); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("names = %v", got)
	}
	if f, err := c.Fleet("b"); err != nil || f.Name != "b" {
		t.Errorf("Fleet(b) = %v, %v", f, err)
	}
	_, err = c.Fleet("c")
	if err == nil || !strings.Contains(err.Error(), `unknown fleet "c"`) || !strings.Contains(err.Error(), "a, b") {
		t.Errorf("Fleet(c) err = %v", err)
	}
	empty := &Config{Path: "/x"}
	if _, err := empty.Fleet("a"); err == nil || !strings.Contains(err.Error(), "defines no fleets") {
		t.Errorf("empty Fleet err = %v", err)
	}
}

func TestDuration(t *testing.T) {
	var d Duration
	if err := d.UnmarshalText([]byte("1m30s")); err != nil || d.Duration != 90*time.Second {
		t.Fatalf("UnmarshalText = %v, %v", d, err)
	}
	if b, _ := d.MarshalText(); string(b) != "1m30s" {
		t.Errorf("MarshalText = %q", b)
	}
	if err := d.UnmarshalText([]byte("ten")); err == nil {
		t.Error("UnmarshalText accepted \"ten\"")
	}
}

func TestDefaultPath(t *testing.T) {
	t.Chdir(t.TempDir())
	vars := map[string]string{}
	get := func(k string) string { return vars[k] }
	// No HOME (cron, env -i): no place, not ".config/…" under the
	// current directory.
	if got := DefaultPath(get); got != "" {
		t.Errorf("no HOME: %q", got)
	}
	vars["HOME"] = "relative"
	if got := DefaultPath(get); got != "" {
		t.Errorf("relative HOME: %q", got)
	}
	vars["HOME"] = "/home/u"
	if got := DefaultPath(get); got != "/home/u/.config/fleetmgr/fleets.toml" {
		t.Errorf("HOME: %q", got)
	}
	vars["XDG_CONFIG_HOME"] = "relative"
	if got := DefaultPath(get); got != "/home/u/.config/fleetmgr/fleets.toml" {
		t.Errorf("relative XDG_CONFIG_HOME not ignored: %q", got)
	}
	vars["XDG_CONFIG_HOME"] = "/xdg"
	if got := DefaultPath(get); got != "/xdg/fleetmgr/fleets.toml" {
		t.Errorf("XDG: %q", got)
	}
	if err := os.WriteFile("fleets.toml", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := DefaultPath(get); got != "./fleets.toml" {
		t.Errorf("local: %q", got)
	}
}

func TestRenderCommand(t *testing.T) {
	f := &Fleet{Name: "kb", Port: 8771, Command: []string{"fleetd", "--port={{.Port}}", "--sock", "{{.HerdrSocket}}", "{{$.Name}}-x"}}
	got, err := f.RenderCommand(f.TemplateData("/h.sock"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"fleetd", "--port=8771", "--sock", "/h.sock", "kb-x"}; !reflect.DeepEqual(got, want) {
		t.Errorf("argv = %q, want %q", got, want)
	}
	f.Command = []string{"{{.Nope}}"}
	if _, err := f.RenderCommand(TemplateData{}); err == nil {
		t.Error("unknown field rendered")
	}
	if out, err := (&Fleet{}).RenderConfig(TemplateData{}); out != nil || err != nil {
		t.Errorf("no template: %q, %v", out, err)
	}
}

func TestReadBoundedRefusesNonRegular(t *testing.T) {
	_, err := load(t.TempDir(), fakeEnv(nil))
	if err == nil {
		t.Fatal("loaded a directory")
	}
	if _, err := load(filepath.Join(t.TempDir(), "missing.toml"), fakeEnv(nil)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestIsolationScales(t *testing.T) {
	var b strings.Builder
	for i := 0; i < 500; i++ {
		fmt.Fprintf(&b, "[fleets.f%d]\nproject = \"/p\"\ncommand = [\"f\"]\nworktree_root = \"/w/%d\"\n", i, i)
	}
	b.WriteString("[fleets.zz]\nproject = \"/p\"\ncommand = [\"f\"]\nworktree_root = \"/\"\n")
	start := time.Now()
	_, err, _ := loadBody(t, b.String())
	if err == nil || strings.Count(err.Error(), "\n") != 499 || !strings.Contains(err.Error(), `fleets.zz.worktree_root: worktree root / contains fleet "f0"'s`) {
		t.Fatalf("want 500 nesting errors, one per fleet, on zz; got %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("500 fleets took %v", d)
	}
}

func TestLoadRefusesDeepNesting(t *testing.T) {
	body := "[manager]\n" + strings.Repeat("a.", 5000) + "a = 1\n"
	start := time.Now()
	_, err, _ := loadBody(t, body)
	if err == nil || !strings.Contains(err.Error(), "fleets.toml:2: keys or values nested more than 16 levels") {
		t.Fatalf("err = %v", err)
	}
	for _, body := range []string{
		"a = " + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + "\n",
		"a = " + strings.Repeat("{b=", 3000) + "1" + strings.Repeat("}", 3000) + "\n",
	} {
		if _, err, _ := loadBody(t, body); err == nil || !strings.Contains(err.Error(), "nested more than") {
			t.Errorf("err = %v", err)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("refusing deep nesting took %v", d)
	}
}

// TestBareCR: a carriage return alone (classic Mac OS line endings) is
// told apart from CRLF, including at the file's end and mixed with CRLF.
func TestBareCR(t *testing.T) {
	for src, want := range map[string]bool{
		"":                   false,
		"a = 1\n":            false,
		"a = 1\r\nb = 2\r\n": false,
		"a = 1\rb = 2":       true,
		"a = 1\r":            true,
		"a = 1\r\nb\r":       true,
		"a\r\n\rb\r\n":       true,
	} {
		if got := bareCR(src); got != want {
			t.Errorf("bareCR(%q) = %v, want %v", src, got, want)
		}
	}
	_, err, _ := loadBody(t, "[manager]\r\nlisten = \r\n")
	if err == nil || strings.Contains(err.Error(), "carriage return") {
		t.Fatalf("CRLF file with a syntax error: %v; want an error without the bare-CR hint", err)
	}
}

// TestFastPathKey: [manager] fast_path defaults to true, false turns it
// off, and a value that is not a boolean is refused naming the key.
func TestFastPathKey(t *testing.T) {
	c, err, _ := loadBody(t, fleetA)
	if err != nil || !c.Manager.FastPath {
		t.Fatalf("default: %v, fast_path %v, want true", err, c != nil && c.Manager.FastPath)
	}
	c, err, _ = loadBody(t, "[manager]\nfast_path = false\n"+fleetA)
	if err != nil || c.Manager.FastPath {
		t.Fatalf("fast_path = false: %v, got %v", err, c != nil && c.Manager.FastPath)
	}
	_, err, _ = loadBody(t, "[manager]\nfast_path = \"no\"\n"+fleetA)
	if err == nil || !strings.Contains(err.Error(), "manager.fast_path") {
		t.Fatalf("fast_path = \"no\": %v, want an error naming manager.fast_path", err)
	}
}
