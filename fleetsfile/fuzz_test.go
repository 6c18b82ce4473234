package fleetsfile

import (
	"bytes"
	"os"
	"slices"
	"testing"
	"unicode/utf8"
)

// FuzzAppendValues: whatever characters a project path or a command
// argument holds, Append either refuses it or writes TOML that decodes to
// exactly those strings (quoting by BurntSushi/toml's encoder, checked
// through its decoder).
func FuzzAppendValues(f *testing.F) {
	for _, s := range []string{"/plain", "/with space", "/quote\"and'apos", "/back\\slash", "/tab\there", "/nl\nx",
		"/\x00nul", "/\x7f", "/\u2028ls", "/é", "/\xff\xfe", `/"""`, "/'''", "/#hash", "/a=b", "/[x]", "/{{.Port}}", "/\r\n"} {
		f.Add(s, s[1:])
	}
	f.Fuzz(func(t *testing.T, project, arg string) {
		fl := Fleet{Name: "kb", Project: project, Command: []string{"fleetd", arg}}
		out, err := Append([]byte("[manager]\n"), fl)
		if err != nil {
			return
		}
		if !utf8.ValidString(project) || !utf8.ValidString(arg) {
			t.Fatalf("invalid UTF-8 written: %q", out)
		}
		tree, err := decode(out)
		if err != nil {
			t.Fatalf("Append wrote text that does not decode: %v\n%q", err, out)
		}
		kb := tree["fleets"].(map[string]any)["kb"].(map[string]any)
		cmd, _ := kb["command"].([]any)
		if kb["project"] != project || len(cmd) != 2 || cmd[1] != arg {
			t.Fatalf("project %q, arg %q decode as %v", project, arg, kb)
		}
	})
}

// FuzzAppendRemove: on any TOML text Append accepts, Remove of the fleet
// gives the text back (with a final newline, without trailing blank
// lines), and neither panics on any text.
func FuzzAppendRemove(f *testing.F) {
	f.Add(string(Template()))
	if ex, err := readFile("../fleets.example.toml"); err == nil {
		f.Add(ex)
	}
	for _, s := range []string{"", "a = 1", "[fleets.x]\nproject = \"/x\"\n\n\n", "# c\r\n[t]\r\nk = \"v\"\r\n", "x = '''\n[fleets.zz]\n'''\n",
		"[fleets]\n[fleets.y.env]\nA = \"\"\n", "k = [\n # c\n 1,\n]\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		_, _ = Remove([]byte(src), "x")
		out, err := Append([]byte(src), Fleet{Name: "zz", Project: "/zz"})
		if err != nil {
			return
		}
		back, err := Remove(out, "zz")
		if err != nil {
			t.Fatalf("Remove after Append: %v\n%q", err, out)
		}
		want := []byte(src)
		lines := splitLines(want)
		for len(lines) > 0 && isBlank(lines[len(lines)-1]) {
			lines = lines[:len(lines)-1]
		}
		want = bytes.Join(lines, nil)
		if len(want) > 0 && !bytes.HasSuffix(want, []byte("\n")) {
			want = append(want, newline([]byte(src))...)
		}
		if !bytes.Equal(back, want) {
			t.Fatalf("Remove(Append(src)) = %q, want %q", back, want)
		}
		if names, err := Names(back); err != nil || slices.Contains(names, "zz") {
			t.Fatalf("after remove: %v %v", names, err)
		}
	})
}

func readFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return string(b), err
}
