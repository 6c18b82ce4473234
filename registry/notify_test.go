package registry

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestNotifyRules(t *testing.T) {
	dir := t.TempDir()
	urlFile := writeFile(t, dir, "hook.url", "https://example.invalid/hook\n")
	if err := os.Chmod(urlFile, 0o600); err != nil {
		t.Fatal(err)
	}
	body := fleetA + `
[[notify]]
on = ["member.blocked"]
[[notify.sinks]]
type = "webhook"
url_env = "HOOK_URL"
preset = "discord"

[[notify]]
name = "ops"
on = ["fleet.failed", "fleet.down"]
fleets = ["a", "kb@beta"]
hold = "0s"
[[notify.sinks]]
type = "command"
command = ["notify-send", "fleetmgr"]
[[notify.sinks]]
type = "webhook"
url_file = "hook.url"
`
	c, err := load(writeFile(t, dir, "fleets.toml", body), fakeEnv(map[string]string{"HOME": dir}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Notify) != 2 {
		t.Fatalf("rules: %+v", c.Notify)
	}
	r0, r1 := c.Notify[0], c.Notify[1]
	if r0.Name != "notify[0]" || r0.Hold.Duration != 10*time.Second || len(r0.Fleets) != 0 || r0.Sinks[0].URLEnv != "HOOK_URL" || r0.Sinks[0].Preset != "discord" || r0.Line != 6 {
		t.Errorf("rule 0: %+v", r0)
	}
	if r1.Sinks[0].Line != 18 || r1.Sinks[1].Line != 21 {
		t.Errorf("rule 1's sinks on lines %d and %d, want 18 and 21", r1.Sinks[0].Line, r1.Sinks[1].Line)
	}
	if r1.Name != "ops" || r1.Hold.Duration != 0 || !reflect.DeepEqual(r1.Fleets, []string{"a", "kb@beta"}) || len(r1.Sinks) != 2 ||
		r1.Sinks[1].URLFile != urlFile || r1.Sinks[1].Preset != "json" || !reflect.DeepEqual(r1.Sinks[0].Command, []string{"notify-send", "fleetmgr"}) {
		t.Errorf("rule 1: %+v", r1)
	}
}

func TestNotifyRuleErrors(t *testing.T) {
	dir := t.TempDir()
	loose := writeFile(t, dir, "loose.url", "https://example.invalid/hook\n") // 0644
	for _, tc := range []struct{ name, body, want string }{
		{"unknown kind", "[[notify]]\non = [\"member.sad\"]\n[[notify.sinks]]\ntype = \"mcp\"\n", `:6: notify[0].on[0]: unknown event kind "member.sad"`},
		{"no sinks", "[[notify]]\non = [\"member.blocked\"]\n", ":5: notify[0].sinks: missing"},
		{"clear url", "[[notify]]\non = [\"member.blocked\"]\n[[notify.sinks]]\ntype = \"webhook\"\nurl = \"https://hooks.example/T0K3N\"\n", ":9: notify[0].sinks[0].url: a webhook URL carries its token and never goes in fleets.toml"},
		{"second rule's sink", "[[notify]]\non = [\"member.blocked\"]\n[[notify.sinks]]\ntype = \"mcp\"\n[[notify]]\non = [\"fleet.down\"]\n[[notify.sinks]]\ntype = \"mcp\"\n[[notify.sinks]]\ntype = \"pager\"\n", `:14: notify[1].sinks[1].type: unknown sink type "pager"`},
		{"pasted url in url_env", "[[notify]]\non = [\"member.blocked\"]\n[[notify.sinks]]\ntype = \"webhook\"\nurl_env = \"https://hooks.example/T0K3N\"\n", "does not look like an environment variable NAME"},
		{"no url", "[[notify]]\non = [\"member.blocked\"]\n[[notify.sinks]]\ntype = \"webhook\"\n", "exactly one of url_env or url_file"},
		{"loose url file", "[[notify]]\non = [\"member.blocked\"]\n[[notify.sinks]]\ntype = \"webhook\"\nurl_file = \"" + loose + "\"\n", "must be readable by its owner only"},
		{"unknown fleet", "[[notify]]\non = [\"member.blocked\"]\nfleets = [\"zz\"]\n[[notify.sinks]]\ntype = \"mcp\"\n", `notify[0].fleets[0]: unknown fleet "zz"`},
		{"unknown sink", "[[notify]]\non = [\"member.blocked\"]\n[[notify.sinks]]\ntype = \"pager\"\n", `unknown sink type "pager"`},
		{"unknown preset", "[[notify]]\non = [\"member.blocked\"]\n[[notify.sinks]]\ntype = \"webhook\"\nurl_env = \"X\"\npreset = \"teams\"\n", `unknown preset "teams"`},
		{"url_env passed to a fleet", "[manager]\npass_env = [\"HOOK\"]\n[[notify]]\non = [\"member.blocked\"]\n[[notify.sinks]]\ntype = \"webhook\"\nurl_env = \"HOOK\"\n", "HOOK is a notification sink's URL"},
		{"journal size", "[manager]\njournal_max_mb = 0\n", "manager.journal_max_mb: must be 1 to"},
		{"journal switch", "[manager]\njournal = \"off\"\n", "manager.journal:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, dir, "fleets.toml", fleetA+tc.body)
			_, err := load(p, fakeEnv(map[string]string{"HOME": dir}))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), filepath.Base(p)+":") {
				t.Fatalf("err %v does not name the file and line", err)
			}
		})
	}
}

// [manager] journal = false turns the journal off; it is on by default.
func TestJournalSwitch(t *testing.T) {
	dir := t.TempDir()
	for body, want := range map[string]bool{"": true, "[manager]\njournal = false\n": false, "[manager]\njournal = true\n": true} {
		p := writeFile(t, dir, "fleets.toml", fleetA+body)
		c, err := load(p, fakeEnv(map[string]string{"HOME": dir}))
		if err != nil || c.Manager.Journal != want {
			t.Errorf("%q: journal %v, %v; want %v", body, c != nil && c.Manager.Journal, err, want)
		}
	}
}
