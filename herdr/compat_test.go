package herdr

import (
	"strings"
	"testing"
)

func TestCheckCompat(t *testing.T) {
	cases := []struct {
		version  string
		protocol int
		tested   bool
		wantP    int
		note     string // substring; "" means no note
	}{
		{"0.8.2", 20, true, 20, ""},
		{"0.8.0", 19, true, 19, ""},
		{"0.9.3", 22, true, 22, ""},
		{"0.8.0", 20, true, 20, "between releases"}, // herdr master before 0.8.1
		{"0.9.0-preview.12", 22, true, 22, ""},      // a preview build of a known release
		{"0.8.2-standin", 20, true, 20, ""},         // the stand-in
		{"0.10.0", 22, true, 22, "not a release fleetmgr knows"},
		{"0.9.5", 23, false, 23, "speaks protocol 23; fleetmgr is tested with protocols 19, 20, 22"},
		{"0.7.0", 18, false, 18, "protocol 18"},
		{"0.9.1", 0, true, 22, ""},                    // from `herdr --version`: the table's protocol
		{"1.0.0", 0, false, 0, "protocol is unknown"}, // unknown version, no ping
		{"", 21, false, 21, "(version unknown) speaks protocol 21"},
	}
	for _, c := range cases {
		got := CheckCompat(c.version, c.protocol)
		if got.Tested != c.tested || got.Protocol != c.wantP || (c.note == "") != (got.Note == "") || !strings.Contains(got.Note, c.note) {
			t.Errorf("CheckCompat(%q, %d) = %+v; want tested %v protocol %d note ~%q", c.version, c.protocol, got, c.tested, c.wantP, c.note)
		}
	}
}

func TestParseVersionOutput(t *testing.T) {
	for in, want := range map[string]string{
		"herdr 0.8.2\n":             "0.8.2",
		"herdr 0.9.0-preview.7":     "0.9.0-preview.7",
		"  herdr 0.8.0\nmore\n":     "0.8.0",
		"usage: herdr …":            "",
		"herdr version unknown":     "",
		"":                          "",
		"herdr 0.8.2 (built today)": "",
	} {
		if got := ParseVersionOutput([]byte(in)); got != want {
			t.Errorf("ParseVersionOutput(%q) = %q, want %q", in, got, want)
		}
	}
}
