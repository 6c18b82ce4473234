package fleetd

import (
	"testing"

	"github.com/fleetmgr/fleetmgr/herdr"
)

func TestParseMemberLabel(t *testing.T) {
	for _, tc := range []struct {
		label, nonce, id string
		ok               bool
	}{
		{"member-abcd1234-m1", "abcd1234", "m1", true},
		{"member-abcd1234-a-b", "abcd1234", "a-b", true},
		{"member-", "", "", true},
		{"lead", "", "", false},
		{"Member-x-y", "", "", false},
	} {
		n, id, ok := parseMemberLabel(tc.label)
		if n != tc.nonce || id != tc.id || ok != tc.ok {
			t.Errorf("%q → %q %q %v", tc.label, n, id, ok)
		}
	}
}

func TestPaneOwnsPid(t *testing.T) {
	pi := &herdr.ProcessInfo{ShellPID: 100, ForegroundProcessGroupID: 200,
		ForegroundProcesses: []herdr.ForegroundProcess{{PID: 200}, {PID: 201}}}
	for pid, want := range map[int]bool{100: true, 200: true, 201: true, 202: false, 0: false} {
		if got := paneOwnsPid(pi, pid); got != want {
			t.Errorf("pid %d: %v, want %v", pid, got, want)
		}
	}
}

func TestValidName(t *testing.T) {
	for s, want := range map[string]bool{"m1": true, "a.b": true, "a_b-c": true, "": false, "a/b": false, "a b": false} {
		if validName(s, true) != want {
			t.Errorf("%q", s)
		}
	}
	if validName("a.b", false) {
		t.Error("dot accepted for tool names")
	}
}
