package registry

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRefusesHerdrSocketsTooLong: a fleet whose herdr sockets (as a
// start resolves them from XDG_CONFIG_HOME, else HOME) would not fit a
// unix socket path (107 bytes, sun_path) is refused at load, naming the
// fleet's herdr_session line, or its header when the session is the
// default (its name). The longer client socket decides; one byte under
// the limit loads.
func TestLoadRefusesHerdrSocketsTooLong(t *testing.T) {
	// <xdg>/herdr/sessions/<session>/herdr-client.sock is len(xdg) +
	// len(session) + 34 bytes.
	const overhead = len("/herdr/sessions/") + len("/herdr-client.sock")
	xdg := func(n int) string { return "/" + strings.Repeat("x", n-1) }
	session := func(n int) string { return strings.Repeat("s", n) }
	cases := []struct {
		name    string
		vars    map[string]string
		body    string
		at      string // marker of the line the error must name; "" = loads
		mention string
	}{
		{"at the limit", map[string]string{"XDG_CONFIG_HOME": xdg(40)},
			fmt.Sprintf("[manager]\nstate_dir = \"/s\"\n[fleets.a]\nproject = \"/a\"\ncommand = [\"f\"]\nherdr_session = %q\n", session(maxSocketPath-overhead-40)), "", ""},
		{"one byte over", map[string]string{"XDG_CONFIG_HOME": xdg(40)},
			fmt.Sprintf("[manager]\nstate_dir = \"/s\"\n[fleets.a]\nproject = \"/a\"\ncommand = [\"f\"]\nherdr_session = %q\n", session(maxSocketPath-overhead-40+1)), "herdr_session =", "$XDG_CONFIG_HOME"},
		{"default session, long HOME", map[string]string{"HOME": xdg(90)},
			"[manager]\nstate_dir = \"/s\"\n\n[fleets.kb]\nproject = \"/a\"\ncommand = [\"f\"]\n", "[fleets.kb]", "(default: the fleet's name)"},
		{"XDG_CONFIG_HOME wins over HOME", map[string]string{"HOME": xdg(90), "XDG_CONFIG_HOME": "/c"},
			"[manager]\nstate_dir = \"/s\"\n[fleets.kb]\nproject = \"/a\"\ncommand = [\"f\"]\n", "", ""},
		{"no HOME, no XDG: TMPDIR", map[string]string{"TMPDIR": xdg(90)},
			"[manager]\nstate_dir = \"/s\"\n[fleets.kb]\nproject = \"/a\"\ncommand = [\"f\"]\n", "[fleets.kb]", "$TMPDIR"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, t.TempDir(), "fleets.toml", tc.body)
			_, err := load(p, fakeEnv(tc.vars))
			if tc.at == "" {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Load succeeded; want the herdr socket refused")
			}
			want := fmt.Sprintf("fleets.toml:%d: fleets.", lineOf(t, tc.body, tc.at))
			var line string
			for _, l := range strings.Split(err.Error(), "\n") {
				if strings.Contains(l, "herdr-client.sock") {
					line = l
				}
			}
			if !strings.Contains(line, want) || !strings.Contains(line, ".herdr_session: ") || !strings.Contains(line, "at most 107 bytes") || !strings.Contains(line, tc.mention) {
				t.Fatalf("error does not name %s…herdr_session, the limit and %q:\n%v", want, tc.mention, err)
			}
			var e *Error
			if !errors.As(err, &e) || filepath.Base(e.File) != "fleets.toml" {
				t.Fatalf("not an *Error naming the file: %#v", err)
			}
		})
	}
}
