package peerview

import "testing"

// TestSplitRemote: NAME@HOST splits only when both halves are valid (a
// fleet name, a host id); anything else is a local name as given.
func TestSplitRemote(t *testing.T) {
	for _, c := range []struct {
		in          string
		fleet, host string
		ok          bool
	}{
		{"kb@beta", "kb", "beta", true},
		{"my_fleet-2@fleet01", "my_fleet-2", "fleet01", true},
		{"kb", "kb", "", false},
		{"kb@", "kb@", "", false},
		{"@beta", "@beta", "", false},
		{"kb@Beta", "kb@Beta", "", false},   // host ids are lower-case
		{"kb@be_ta", "kb@be_ta", "", false}, // no underscore in a host id
		{"kb@beta@gamma", "kb@beta@gamma", "", false},
		{"Kb@beta", "Kb@beta", "", false},
		{"kb@" + string(make([]byte, 33)), "kb@" + string(make([]byte, 33)), "", false},
	} {
		f, h, ok := SplitRemote(c.in)
		if f != c.fleet || h != c.host || ok != c.ok {
			t.Errorf("SplitRemote(%q) = %q, %q, %v; want %q, %q, %v", c.in, f, h, ok, c.fleet, c.host, c.ok)
		}
		if ok && RemoteName(f, h) != c.in {
			t.Errorf("RemoteName(%q, %q) = %q", f, h, RemoteName(f, h))
		}
	}
}

// TestSplitRemoteNames: NAME@HOST names only a valid fleet name at a valid
// host id.
func TestSplitRemoteNames(t *testing.T) {
	for s, ok := range map[string]bool{"docs@beta": true, "docs": false, "docs@": false, "@beta": false, "Docs@beta": false,
		"docs@beta.example": false, "docs@beta@gamma": false, "a@b": true} {
		if _, _, got := SplitRemote(s); got != ok {
			t.Errorf("SplitRemote(%q) ok = %v", s, got)
		}
	}
}
