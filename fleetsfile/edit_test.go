package fleetsfile

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func readExample(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("../fleets.example.toml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustAppend(t *testing.T, src []byte, f Fleet) []byte {
	t.Helper()
	out, err := Append(src, f)
	if err != nil {
		t.Fatalf("Append(%s): %v", f.Name, err)
	}
	return out
}

func mustRemove(t *testing.T, src []byte, name string) []byte {
	t.Helper()
	out, err := Remove(src, name)
	if err != nil {
		t.Fatalf("Remove(%s): %v", name, err)
	}
	return out
}

// TestAppendKeepsBytes: the file before the new table is byte for byte
// the old one, comments included, and the table holds what was asked.
func TestAppendKeepsBytes(t *testing.T) {
	ex := readExample(t)
	out := mustAppend(t, ex, Fleet{Name: "docs", Project: "/srv/docs", Port: 8790, Lead: true})
	if !bytes.HasPrefix(out, ex) {
		t.Fatal("the example's bytes were not kept as a prefix")
	}
	want := "\n[fleets.docs]\nproject = \"/srv/docs\"\ncommand = [\"fleetd\", \"--config\", \"{{.ConfigPath}}\"]\nport = 8790\nlead = true\n"
	if got := string(out[len(ex):]); got != want {
		t.Fatalf("appended:\n%q\nwant\n%q", got, want)
	}
	tree, err := decode(out)
	if err != nil {
		t.Fatal(err)
	}
	docs := tree["fleets"].(map[string]any)["docs"].(map[string]any)
	if docs["project"] != "/srv/docs" || docs["port"] != int64(8790) || docs["lead"] != true {
		t.Fatalf("docs decodes as %v", docs)
	}
	// Without port and lead, neither key is written; a command is kept as given.
	out = mustAppend(t, []byte("[manager]\n"), Fleet{Name: "kb", Project: "~/src/kb", Command: []string{"my-fleetd", "--port", "{{.Port}}"}})
	if want := "[manager]\n\n[fleets.kb]\nproject = \"~/src/kb\"\ncommand = [\"my-fleetd\", \"--port\", \"{{.Port}}\"]\n"; string(out) != want {
		t.Fatalf("got %q, want %q", out, want)
	}
}

// TestAppendEdges: no final newline, an empty file, CRLF line endings.
func TestAppendEdges(t *testing.T) {
	f := Fleet{Name: "kb", Project: "/p"}
	body := "[fleets.kb]\nproject = \"/p\"\ncommand = [\"fleetd\", \"--config\", \"{{.ConfigPath}}\"]\n"
	for _, tc := range []struct{ src, want string }{
		{"", body},
		{"# only a comment", "# only a comment\n\n" + body},
		{"[manager]\r\nlisten = \"127.0.0.1:1\"\r\n", "[manager]\r\nlisten = \"127.0.0.1:1\"\r\n\r\n" + strings.ReplaceAll(body, "\n", "\r\n")},
	} {
		if got := string(mustAppend(t, []byte(tc.src), f)); got != tc.want {
			t.Errorf("Append to %q:\n got %q\nwant %q", tc.src, got, tc.want)
		}
	}
}

func TestAppendRefuses(t *testing.T) {
	ex := readExample(t)
	for _, tc := range []struct {
		name string
		src  string
		f    Fleet
		want string
	}{
		{"duplicate", string(ex), Fleet{Name: "kb", Project: "/p"}, `fleet kb is already defined \(line \d+\)`},
		{"duplicate sub-table only", "[fleets.kb.env]\nA = \"1\"\n", Fleet{Name: "kb", Project: "/p"}, `already defined \(line 1\)`},
		{"bad name", "", Fleet{Name: "Kb", Project: "/p"}, `fleet name "Kb" is invalid`},
		{"dollar", "", Fleet{Name: "kb", Project: "/home/u/$HOME"}, `holds '\$'`},
		{"relative", "", Fleet{Name: "kb", Project: "src/kb"}, `is relative`},
		{"port", "", Fleet{Name: "kb", Project: "/p", Port: 70000}, `not a TCP port`},
		{"inline fleets", "fleets = { a = { project = \"/a\", command = [\"x\"] } }\n", Fleet{Name: "kb", Project: "/p"}, `line 1 writes fleets as one value`},
		{"not toml", "[manager\n", Fleet{Name: "kb", Project: "/p"}, `not valid TOML`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Append([]byte(tc.src), tc.f)
			if err == nil || !regexp.MustCompile(tc.want).MatchString(err.Error()) {
				t.Fatalf("err = %v, want /%s/", err, tc.want)
			}
		})
	}
}

// TestAppendRemoveRoundTrip: removing what Append added gives back the
// bytes before it, in any order of several fleets.
func TestAppendRemoveRoundTrip(t *testing.T) {
	for _, base := range [][]byte{Template(), readExample(t), []byte(""), []byte("[manager]\nlisten = \"127.0.0.1:9\" # trailing\n")} {
		a := mustAppend(t, base, Fleet{Name: "a1", Project: "/a"})
		ab := mustAppend(t, a, Fleet{Name: "b2", Project: "/b", Port: 9000})
		if got := mustRemove(t, ab, "b2"); !bytes.Equal(got, a) {
			t.Fatalf("remove b2:\n%s\nwant\n%s", got, a)
		}
		if got := mustRemove(t, mustRemove(t, ab, "b2"), "a1"); !bytes.Equal(got, base) {
			t.Fatalf("remove b2, a1:\n%q\nwant\n%q", got, base)
		}
		// Removing the first of two leaves the second as Append wrote it.
		b := mustRemove(t, ab, "a1")
		if want := mustAppend(t, base, Fleet{Name: "b2", Project: "/b", Port: 9000}); !bytes.Equal(b, want) {
			t.Fatalf("remove a1:\n%q\nwant\n%q", b, want)
		}
	}
}

// TestRemoveFromExample: removing kb from fleets.example.toml takes its
// table and the comment directly above it, keeps the general comment
// before (separated by a blank line) and the next table's own comment.
func TestRemoveFromExample(t *testing.T) {
	ex := string(readExample(t))
	out := string(mustRemove(t, []byte(ex), "kb"))
	start := strings.Index(ex, "# A minimal fleet")
	end := strings.Index(ex, "# A fleet with every key set.")
	if start < 0 || end < 0 {
		t.Fatal("fleets.example.toml changed: adapt this test")
	}
	if want := ex[:start] + ex[end:]; out != want {
		t.Fatalf("removed the wrong lines:\n%s", diffLines(want, out))
	}
	// fleetd is the last fleet, with an [fleets.fleetd.env] sub-table.
	out2 := string(mustRemove(t, []byte(ex), "fleetd"))
	if want := strings.TrimRight(ex[:end], "\n") + "\n"; out2 != want {
		t.Fatalf("remove fleetd:\n%s", diffLines(want, out2))
	}
	if strings.Contains(out2, "RUST_LOG") {
		t.Fatal("[fleets.fleetd.env] was left behind")
	}
}

// TestRemoveSubtablesElsewhere: a fleet's sub-table written apart from
// its table goes too, each with its own comment; other fleets' tables and
// comments stay.
func TestRemoveSubtablesElsewhere(t *testing.T) {
	src := `# kb
[fleets.kb]
project = "/kb"
command = ["x"]

# docs
[fleets.docs]
project = "/docs"
command = ["y"]

# kb's environment
[fleets.kb.env]
A = "1"

[fleets.docs.env]
B = "2"
`
	want := `# docs
[fleets.docs]
project = "/docs"
command = ["y"]

[fleets.docs.env]
B = "2"
`
	if got := string(mustRemove(t, []byte(src), "kb")); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
}

// TestRemoveSkipsValues: text that looks like a header or a comment inside
// a multi-line string or array is not taken for one.
func TestRemoveSkipsValues(t *testing.T) {
	src := `[fleets.kb]
project = "/kb"
command = [
  "x",
  """
[fleets.docs]
# not a comment
""",
]

[fleets.docs]
project = "/docs"
command = ["y"]
`
	got := string(mustRemove(t, []byte(src), "kb"))
	if got != "[fleets.docs]\nproject = \"/docs\"\ncommand = [\"y\"]\n" {
		t.Fatalf("got:\n%s", got)
	}
	got = string(mustRemove(t, []byte(src), "docs"))
	if want := src[:strings.Index(src, "]\n\n[fleets.docs]")+2]; got != want {
		t.Fatalf("got:\n%q\nwant\n%q", got, want)
	}
}

// TestRemoveRefusesForms: a fleet that is not (only) [fleets.NAME]
// tables is refused, naming the line, and nothing else is removed.
func TestRemoveRefusesForms(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"inline fleets", "fleets = { kb = { project = \"/kb\" } }\n", `line 1 writes fleets as one inline table`},
		{"inline fleet", "[fleets]\nkb = { project = \"/kb\" }\n", `line 2 defines fleets.kb outside a \[fleets.kb\] table`},
		{"dotted under fleets", "[fleets]\nkb.project = \"/kb\"\n", `line 2 defines fleets.kb.project outside`},
		{"dotted at the top", "fleets.kb.port = 1\n[fleets.kb.env]\nA = \"1\"\n", `line 1 defines fleets.kb.port outside`},
		{"dotted key elsewhere", "[fleets.kb]\nproject = \"/kb\"\n[fleets]\nkb.port = 1\n", `(line 4 defines fleets.kb.port outside|not valid TOML)`},
		{"missing", "[fleets.docs]\nproject = \"/d\"\n", `no fleet kb: the file defines docs`},
		{"none", "[manager]\n", `no fleet kb: the file defines no fleets`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := Remove([]byte(tc.src), "kb")
			if err == nil || !regexp.MustCompile(tc.want).MatchString(err.Error()) {
				t.Fatalf("err = %v (out %q), want /%s/", err, out, tc.want)
			}
		})
	}
}

// TestNames lists fleets from the tree, valid or not.
func TestNames(t *testing.T) {
	got, err := Names(readExample(t))
	if err != nil || !reflect.DeepEqual(got, []string{"fleetd", "kb"}) {
		t.Fatalf("Names(example) = %v, %v", got, err)
	}
	got, err = Names([]byte("[fleets.x]\nport = \"not a port\"\n[fleets.a.env]\n"))
	if err != nil || !reflect.DeepEqual(got, []string{"a", "x"}) {
		t.Fatalf("Names = %v, %v", got, err)
	}
	if _, err := Names([]byte("[[")); err == nil {
		t.Fatal("Names of broken TOML: no error")
	}
}

// TestNamesIn: a file's fleet names for completion; nothing (and no
// wait) for a FIFO, a directory, a missing file or broken TOML.
func TestNamesIn(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "fleets.toml")
	if err := os.WriteFile(p, []byte("[fleets.b]\n[fleets.a]\nport = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := NamesIn(p); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Fatalf("NamesIn = %v", got)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(dir, "broken.toml")
	if err := os.WriteFile(broken, []byte("[["), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{fifo, dir, filepath.Join(dir, "none"), broken} {
		if got := NamesIn(q); got != nil {
			t.Errorf("NamesIn(%s) = %v", q, got)
		}
	}
}

func TestNameFromDir(t *testing.T) {
	for dir, want := range map[string]string{
		"/home/u/src/kb":     "kb",
		"/src/My Project.v2": "my-project-v2",
		"/src/2024-notes":    "notes",
		"/src/fleetd/":       "fleetd",
		"/src/a__b--c":       "a__b-c",
		"/src/" + strings.Repeat("abcdefghij", 5): "abcdefghijabcdefghijabcdefghijab",
		"/src/thirty-one-chars-then-dash-x":       "thirty-one-chars-then-dash-x",
		"/src/élan":                               "lan",
	} {
		got, err := NameFromDir(dir)
		if err != nil || got != want {
			t.Errorf("NameFromDir(%q) = %q, %v; want %q", dir, got, err, want)
		}
	}
	for _, dir := range []string{"/", "/src/2024", "/src/日本", "/src/---", "."} {
		if got, err := NameFromDir(dir); err == nil || !strings.Contains(err.Error(), "--name") {
			t.Errorf("NameFromDir(%q) = %q, %v; want an error saying --name", dir, got, err)
		}
	}
}

// diffLines shows the first differing line of two texts.
func diffLines(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + strconv.Itoa(i+1) + ":\n want " + wl + "\n  got " + gl
		}
	}
	return "(same)"
}
