package registry

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/fleetmgr/fleetmgr/herdr"
)

// fleetNamePattern is the rule for fleet names, quoted in errors.
const fleetNamePattern = `^[a-z][a-z0-9_-]{0,31}$`

// maxSocketPath is the longest unix socket path Linux accepts: sun_path is
// 108 bytes including the terminating NUL.
const maxSocketPath = 107

// ValidFleetName reports whether n is a valid fleet name,
// ^[a-z][a-z0-9_-]{0,31}$: the only names fleetmgr turns into paths in its
// state directory.
func ValidFleetName(n string) bool { return validFleetName(n) }

// validFleetName reports whether n matches fleetNamePattern.
func validFleetName(n string) bool {
	if len(n) < 1 || len(n) > 32 || n[0] < 'a' || n[0] > 'z' {
		return false
	}
	for i := 1; i < len(n); i++ {
		c := n[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// herdrSessionName checks a herdr session name as herdr does
// (herdr src/session.rs validate_name; docs/herdr.md "Sessions on disk"): 1–64 bytes of
// [A-Za-z0-9._-], not "." or "..". A fleet may not use "default", the
// session every plain `herdr` shares; operator_sessions may name it.
func herdrSessionName(n string, allowDefault bool) error {
	ok := len(n) >= 1 && len(n) <= 64 && n != "." && n != ".."
	for i := 0; ok && i < len(n); i++ {
		c := n[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("herdr session name %q is invalid: herdr accepts 1-64 characters of [A-Za-z0-9._-], other than \".\" and \"..\"", n)
	}
	if n == "default" && !allowDefault {
		return fmt.Errorf("herdr session %q is herdr's default session, shared with every plain `herdr`; a fleet needs a session of its own", n)
	}
	return nil
}

// validEnvName reports whether s is a portable environment variable name.
func validEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// checkURLPath checks an HTTP path such as "/mcp".
func checkURLPath(s string) error {
	if !strings.HasPrefix(s, "/") {
		return fmt.Errorf("%q must be a URL path starting with \"/\", e.g. \"/mcp\"", s)
	}
	if strings.ContainsAny(s, "?# ") || strings.ContainsFunc(s, isControl) {
		return fmt.Errorf("%q must be a plain URL path: no query, fragment, spaces or control characters", s)
	}
	return nil
}

// checkVhost checks a broker vhost name.
func checkVhost(s string) error {
	switch {
	case s == "":
		return fmt.Errorf("must not be empty")
	case s == "/":
		return fmt.Errorf("%q is the broker's shared default vhost; a fleet needs a vhost of its own", s)
	case len(s) > 255:
		return fmt.Errorf("%d bytes, more than 255", len(s))
	case strings.ContainsFunc(s, isControl):
		return fmt.Errorf("%q contains control characters", s)
	}
	return nil
}

// listenPort parses host:port and returns the port. The host may be any
// address: whether a non-loopback listen is allowed is serve's decision
// (--allow-remote with --token-file), not the file's.
func listenPort(listen string) (int, error) {
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		return 0, fmt.Errorf("%q is not host:port: %v", listen, err)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q: port %q is not a number in 1-65535", listen, port)
	}
	return n, nil
}

// validate checks what single keys cannot: listen, template fields, port
// bounds, isolation between fleets and the guard's operator sessions.
func (ld *loader) validate(c *Config) {
	m := &c.Manager
	ld.validateNotify(c)
	lport := 0
	if n, err := listenPort(m.Listen); err != nil {
		ld.fail([]string{"manager", "listen"}, "%v", err)
	} else {
		lport = n
	}
	if len(m.MCPSocket) > maxSocketPath {
		ld.fail([]string{"manager", "mcp_socket"}, "%s is %d bytes; unix socket paths must be at most %d (set mcp_socket or a shorter state_dir)", m.MCPSocket, len(m.MCPSocket), maxSocketPath)
	}

	names := c.Names()
	for _, name := range names {
		f := c.Fleets[name]
		p := func(k string) []string { return []string{"fleets", name, k} }
		if f.fixedPort() {
			switch {
			case f.Port < m.PortRange[0] || f.Port > m.PortRange[1]:
				ld.fail(p("port"), "port %d is outside manager.port_range [%d, %d]", f.Port, m.PortRange[0], m.PortRange[1])
			case f.Port == lport:
				ld.fail(p("port"), "port %d is the manager's own (manager.listen = %q, %s)", f.Port, m.Listen, ld.where([]string{"manager", "listen"}))
			}
		}
		for i, arg := range f.Command {
			ip := appendPath(p("command"), indexPart(i))
			t, err := parseTemplate(fieldName(ip), arg)
			if err != nil {
				ld.fail(ip, "%v", err)
				continue
			}
			_ = t
		}
		ld.herdrSockets(f)
		// Without config_template, fleetmgr renders a default config (a TOML
		// file with the contract fields) to config_file, so .ConfigPath is
		// always meaningful.
		if f.ConfigTemplate != "" {
			if _, err := checkTemplateFile(f.ConfigTemplate); err != nil {
				ld.fail(p("config_template"), "%v", err)
			}
		}
	}

	// Isolation (docs/fleetd.md "Isolation"): each clash
	// is reported on the later fleet (by name), pointing at the first one
	// holding the value. Maps keep this linear in the number of fleets.
	ports := map[int]string{}
	sessions := map[string]string{}
	vhosts := map[string]string{}
	roots := map[string]string{} // keyed by realPath, so a symlink is no way around the check
	configs := map[string]string{}
	for _, bn := range names {
		b := c.Fleets[bn]
		bp := func(k string) []string { return []string{"fleets", bn, k} }
		if an, ok := ports[b.Port]; ok && b.fixedPort() {
			ld.fail(bp("port"), "port %d is also fleet %q's (%s); two fleets cannot share a port",
				b.Port, an, ld.where([]string{"fleets", an, "port"}))
		} else if b.fixedPort() {
			ports[b.Port] = bn
		}
		if an, ok := sessions[b.HerdrSession]; ok {
			ld.fail(bp("herdr_session"), "herdr session %q%s is also fleet %q's (%s); two fleets cannot share a herdr session",
				b.HerdrSession, ld.dflt(bn, "herdr_session", "the fleet's name"), an, ld.whereKey(an, "herdr_session"))
		} else if b.HerdrSession != "" {
			sessions[b.HerdrSession] = bn
		}
		if an, ok := vhosts[b.Vhost]; ok {
			ld.fail(bp("vhost"), "vhost %q%s is also fleet %q's (%s); two fleets cannot share a broker vhost",
				b.Vhost, ld.dflt(bn, "vhost", DefaultVhostPrefix+"<name>"), an, ld.whereKey(an, "vhost"))
		} else if b.Vhost != "" {
			vhosts[b.Vhost] = bn
		}
		if an, ok := configs[b.ConfigFile]; ok {
			ld.fail(bp("config_file"), "config file %s is also fleet %q's (%s); two fleets cannot share a rendered config",
				b.ConfigFile, an, ld.whereKey(an, "config_file"))
		} else if b.ConfigFile != "" {
			configs[b.ConfigFile] = bn
		}
		if an, ok := roots[realPath(b.WorktreeRoot)]; ok && b.WorktreeRoot != "" {
			ld.fail(bp("worktree_root"), "worktree root %s is also fleet %q's (%s%s); two fleets cannot share a worktree root",
				b.WorktreeRoot, an, c.Fleets[an].WorktreeRoot+" at ", ld.whereKey(an, "worktree_root"))
		} else if b.WorktreeRoot != "" {
			roots[realPath(b.WorktreeRoot)] = bn
		}
	}
	// Nesting: walk each root's ancestors and look them up.
	for _, xn := range names {
		x := c.Fleets[xn]
		if x.WorktreeRoot == "" || roots[realPath(x.WorktreeRoot)] != xn {
			continue // empty, or already reported as shared
		}
		for d := filepath.Dir(realPath(x.WorktreeRoot)); ; d = filepath.Dir(d) {
			if yn, ok := roots[d]; ok && yn != xn {
				y := c.Fleets[yn]
				if xn > yn { // x is the later fleet and lies inside y
					ld.fail([]string{"fleets", xn, "worktree_root"}, "worktree root %s is inside fleet %q's worktree root %s (%s); worktree roots must not nest",
						x.WorktreeRoot, yn, y.WorktreeRoot, ld.whereKey(yn, "worktree_root"))
				} else { // y is the later fleet and contains x
					ld.fail([]string{"fleets", yn, "worktree_root"}, "worktree root %s contains fleet %q's worktree root %s (%s); worktree roots must not nest",
						y.WorktreeRoot, xn, x.WorktreeRoot, ld.whereKey(xn, "worktree_root"))
				}
			}
			if parent := filepath.Dir(d); parent == d {
				break
			}
		}
	}

	for i, s := range c.Guard.OperatorSessions {
		for _, name := range names {
			if c.Fleets[name].HerdrSession == s {
				ld.fail([]string{"guard", "operator_sessions", indexPart(i)},
					"%q is the herdr session of fleet %q (%s): allowing it would let that fleet's members (the agents in its panes) call fleetmgr and drive every fleet",
					s, name, ld.whereKey(name, "herdr_session"))
			}
		}
	}
}

// dflt returns " (default: WHY)" when fleet name does not set key.
func (ld *loader) dflt(name, key, why string) string {
	if _, ok := ld.loc.exact([]string{"fleets", name, key}); ok {
		return ""
	}
	return " (default: " + why + ")"
}

// whereKey is where for fleets.NAME.KEY, marked "default" when the fleet
// does not set key (the place is then the fleet's header).
func (ld *loader) whereKey(name, key string) string {
	path := []string{"fleets", name, key}
	if _, ok := ld.loc.exact(path); ok {
		return ld.where(path)
	}
	return "default, " + ld.where(path)
}

// realPath is p with symlinks resolved in its longest existing prefix (the
// rest, not created yet, appended as written), so two worktree roots that
// reach one directory through a symlink compare equal. A
// path that cannot be resolved at all is returned cleaned.
func realPath(p string) string {
	if p == "" {
		return ""
	}
	p = filepath.Clean(p)
	rest := ""
	for d := p; ; d = filepath.Dir(d) {
		if r, err := filepath.EvalSymlinks(d); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(d)
		if parent == d {
			return p
		}
		rest = filepath.Join(filepath.Base(d), rest)
	}
}

// herdrSockets refuses a fleet whose herdr sockets would be longer than a
// unix socket path can be: herdr does not check it, so its server would
// fail to bind ("bind: invalid argument") at the fleet's first start. The
// paths are resolved as a start resolves them (herdr.ConfigDir from
// XDG_CONFIG_HOME, HOME and TMPDIR of this environment, then
// sessions/<herdr_session>/); the client socket, the longer name, decides.
func (ld *loader) herdrSockets(f *Fleet) {
	if f.HerdrSession == "" || herdrSessionName(f.HerdrSession, false) != nil {
		return // reported on its own
	}
	dir := herdr.ConfigDir(ld.env.getenv)
	api, client := herdr.SocketPath(dir, f.HerdrSession), herdr.ClientSocketPath(dir, f.HerdrSession)
	if len(client) <= maxSocketPath {
		return
	}
	from := "$XDG_CONFIG_HOME"
	switch {
	case ld.env.getenv("XDG_CONFIG_HOME") != "":
	case ld.env.getenv("HOME") != "":
		from = "$HOME/.config"
	default:
		from = "$TMPDIR"
	}
	ld.fail([]string{"fleets", f.Name, "herdr_session"},
		"herdr session %q%s would put its sockets at %s (%d bytes) and %s (%d bytes); unix socket paths must be at most %d bytes (sun_path), so herdr could not bind them: use a shorter herdr_session, or start fleetmgr with a shorter %s (herdr keeps sessions under %s/herdr/sessions/)",
		f.HerdrSession, ld.dflt(f.Name, "herdr_session", "the fleet's name"), api, len(api), client, len(client), maxSocketPath, from, from)
}
