package envfile

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	src := "# comment\n; also\n\n  \nFLEETMGR_BROKER_USER=admin\r\n  PASS = ' s3cr#t $x \\n '  \nEMPTY=\nQ=\"two words\"\nA=it's\nA=last\nURL=amqp://h:5672/x?y=1#z\n"
	got, err := Parse("f", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []Var{
		{"FLEETMGR_BROKER_USER", "admin", 5},
		{"PASS", ` s3cr#t $x \n `, 6},
		{"EMPTY", "", 7},
		{"Q", "two words", 8},
		{"A", "last", 10},
		{"URL", "amqp://h:5672/x?y=1#z", 11},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse =\n%+v\nwant\n%+v", got, want)
	}
}

// TestParseRefuses: lines systemd would read differently (or skip) are
// errors naming the file and line.
func TestParseRefuses(t *testing.T) {
	for src, want := range map[string]string{
		"A=1\nno equals sign\n":  "f:2: no '='",
		"1A=x\n":                 `f:1: "1A" is not a variable name`,
		"A-B=x\n":                `f:1: "A-B" is not a variable name`,
		"A='open\nclose'\n":      "f:1: A: a '-quoted value must close",
		"A=\"x\\\"y\"\n":         `f:1: A: a "-quoted value must close`,
		"A=\"$HOME\"\n":          `are not allowed in a "-quoted value`,
		"A=back\\slash\n":        `f:1: A: a '\' or '$' in an unquoted value`,
		"A=$HOME/x\n":            `in an unquoted value`,
		"A='x' trailing\n":       "a '-quoted value must close",
		"A=\xff\n":               "f: not valid UTF-8",
		"A=x\x00y\n":             "a NUL",
		"A=continued \\\nline\n": "in an unquoted value",
	} {
		_, err := Parse("f", []byte(src))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want %q", src, err, want)
		}
	}
}

func TestEnsureAndRead(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "cfg", "broker.env")
	created, err := Ensure(p)
	if err != nil || !created {
		t.Fatalf("Ensure: %v %v", created, err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v", st.Mode().Perm())
	}
	if st, _ := os.Stat(filepath.Dir(p)); st.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v", st.Mode().Perm())
	}
	if vars, err := Read(p); err != nil || len(vars) != 0 {
		t.Fatalf("Read of a new file: %v %v", vars, err)
	}
	if err := os.WriteFile(p, []byte("FM_TEST_USER=u\nFM_TEST_PASSWORD='p w'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if created, err := Ensure(p); err != nil || created {
		t.Fatalf("Ensure of an existing private file: %v %v", created, err)
	}
	if b, _ := os.ReadFile(p); !strings.HasPrefix(string(b), "FM_TEST_USER=u") {
		t.Fatal("Ensure changed an existing file")
	}
	t.Setenv("FM_TEST_PASSWORD", "old")
	names, err := Load(p)
	if err != nil || !reflect.DeepEqual(names, []string{"FM_TEST_USER", "FM_TEST_PASSWORD"}) {
		t.Fatalf("Load: %v %v", names, err)
	}
	if os.Getenv("FM_TEST_USER") != "u" || os.Getenv("FM_TEST_PASSWORD") != "p w" {
		t.Fatal("Load did not set the variables")
	}
	os.Unsetenv("FM_TEST_USER")
	// Readable by group or others: refused by Read, Load and Ensure.
	for _, mode := range []os.FileMode{0o640, 0o604, 0o620, 0o700 | 0o001} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		for what, f := range map[string]func() error{
			"Read":   func() error { _, err := Read(p); return err },
			"Load":   func() error { _, err := Load(p); return err },
			"Ensure": func() error { _, err := Ensure(p); return err },
		} {
			if err := f(); err == nil || !strings.Contains(err.Error(), "chmod 600 "+p) {
				t.Errorf("%s of a %04o file: %v", what, mode, err)
			}
		}
	}
	if os.Getenv("FM_TEST_USER") != "" {
		t.Fatal("Load of a public file set variables")
	}
	if _, err := Read(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Fatalf("Read of a directory: %v", err)
	}
}
