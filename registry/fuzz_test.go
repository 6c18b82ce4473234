package registry

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoad writes arbitrary bytes as fleets.toml and checks that Load never
// panics, that every problem it reports is an *Error naming the file with a
// line inside it, and that whatever it accepts satisfies the invariants
// validation promises. Seeds: testdata/fuzz/FuzzLoad (valid and broken
// configs).
func FuzzLoad(f *testing.F) {
	if ex, err := os.ReadFile("../fleets.example.toml"); err == nil {
		f.Add(ex)
	}
	dir := f.TempDir()
	path := filepath.Join(dir, "fleets.toml")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := Load(path)
		if err != nil {
			checkErrors(t, path, data, err)
			return
		}
		checkInvariants(t, c)
	})
}

// checkErrors asserts that err is one *Error, or several joined, each
// naming path and a line of data (0 only when no line applies).
func checkErrors(t *testing.T, path string, data []byte, err error) {
	t.Helper()
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	lines := strings.Count(string(data), "\n") + 1
	prev := 0
	for _, e := range errs {
		var ce *Error
		if !errors.As(e, &ce) {
			if len(data) > maxConfigBytes {
				continue
			}
			t.Fatalf("error is %T, not *Error: %v", e, e)
		}
		if ce.File != path {
			t.Fatalf("error names %q, not %q: %v", ce.File, path, ce)
		}
		if ce.Line < 0 || ce.Line > lines {
			t.Fatalf("line %d outside 0..%d: %v", ce.Line, lines, ce)
		}
		if ce.Line < prev {
			t.Fatalf("errors not sorted by line: %v", err)
		}
		prev = ce.Line
	}
}

// checkInvariants asserts what Load promises of an accepted config.
func checkInvariants(t *testing.T, c *Config) {
	t.Helper()
	if !filepath.IsAbs(c.Manager.StateDir) || len(c.Manager.MCPSocket) > maxSocketPath || len(c.Guard.AllowedUIDs) == 0 {
		t.Fatalf("manager/guard: %+v %+v", c.Manager, c.Guard)
	}
	if _, err := listenPort(c.Manager.Listen); err != nil {
		t.Fatalf("accepted listen %q: %v", c.Manager.Listen, err)
	}
	ports, sessions, vhosts := map[int]string{}, map[string]string{}, map[string]string{}
	for _, n := range c.Names() {
		f := c.Fleets[n]
		if !validFleetName(n) || f.Name != n || !filepath.IsAbs(f.Project) || len(f.Command) == 0 ||
			herdrSessionName(f.HerdrSession, false) != nil || !filepath.IsAbs(f.WorktreeRoot) {
			t.Fatalf("accepted fleet %+v", f)
		}
		for k := range f.Env {
			if !validEnvName(k) || hasPrefixFold(k, "HERDR_") || hasPrefixFold(k, "FLEET_") {
				t.Fatalf("accepted env %q", k)
			}
		}
		if f.Port != 0 {
			if o, ok := ports[f.Port]; ok {
				t.Fatalf("fleets %s and %s share port %d", o, n, f.Port)
			}
			ports[f.Port] = n
		}
		if o, ok := sessions[f.HerdrSession]; ok {
			t.Fatalf("fleets %s and %s share herdr session", o, n)
		}
		sessions[f.HerdrSession] = n
		if o, ok := vhosts[f.Vhost]; ok {
			t.Fatalf("fleets %s and %s share vhost", o, n)
		}
		vhosts[f.Vhost] = n
		for _, s := range c.Guard.OperatorSessions {
			if s == f.HerdrSession {
				t.Fatalf("operator session %q is fleet %s's", s, n)
			}
		}
	}
}
