package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestBadArguments: every malformed command line exits 2 with a message
// on stderr, before listening on anything.
func TestBadArguments(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"sideways"},
		{"outer"},
		{"outer", "-socket", "/tmp/x.sock"},
		{"outer", "-socket", "/tmp/x.sock", "-allow", "0"},
		{"outer", "-socket", "/tmp/x.sock", "-allow", "5672,70000"},
		{"outer", "-socket", "/tmp/x.sock", "-allow", "5672,"},
		{"outer", "-allow", "5672"},
		{"inner", "-socket", "/tmp/x.sock", "-allow", "5672"}, // inner takes -listen
		{"inner", "-socket", "/tmp/x.sock", "-listen", "5672", "extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 || out.Len() != 0 || errb.Len() == 0 {
			t.Errorf("nsrelay %q: exit %d, stdout %q, stderr %q; want 2, nothing, a message", args, code, out.String(), errb.String())
		}
	}
}

func TestParsePorts(t *testing.T) {
	got, err := parsePorts("5672, 15672")
	if err != nil || len(got) != 2 || got[0] != 5672 || got[1] != 15672 {
		t.Fatalf("parsePorts = %v, %v", got, err)
	}
	if _, err := parsePorts("x"); err == nil || !strings.Contains(err.Error(), `"x" is not a port`) {
		t.Fatalf("parsePorts(x): %v", err)
	}
}
