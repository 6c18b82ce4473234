package registry

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// env is what Load takes from the process: the environment (for ~ and
// $VAR expansion and XDG defaults) and the uid (default allowed uid).
type env struct {
	getenv   func(string) string
	uid      int
	hostname func() (string, error) // nil: os.Hostname ([federation] host default)
}

// loader carries one Load: the file being read and the problems found.
type loader struct {
	file string // path as given, for messages
	dir  string // absolute directory of the file, for relative paths
	loc  *locator
	env  env
	errs []*Error
	// secrets are the variable names no fleet may get (secretEnvNames),
	// known once [broker] is decoded.
	secrets map[string]string
}

// maxConfigBytes bounds the size of fleets.toml and of config templates.
const maxConfigBytes = 1 << 20

// load is Load with the process-dependent inputs passed in.
func load(path string, e env) (*Config, error) {
	data, err := readBounded(path)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	src := string(data)
	loc := locate(src)
	if loc.deepLine > 0 {
		return nil, &Error{File: path, Line: loc.deepLine, Msg: fmt.Sprintf("keys or values nested more than %d levels deep; fleets.toml needs at most 4", maxDepth)}
	}
	var raw map[string]any
	if _, err := toml.Decode(src, &raw); err != nil {
		return nil, parseError(path, src, loc, err)
	}
	ld := &loader{file: path, dir: filepath.Dir(abs), loc: loc, env: e}
	c := &Config{Path: abs, Fleets: map[string]*Fleet{}}
	ld.decode(c, raw)
	ld.validate(c)
	ld.validateBroker(c)
	ld.validateFederation(c)
	if len(ld.errs) > 0 {
		return nil, ld.joined()
	}
	return c, nil
}

// fileKind names a mode's file type in words ("a directory", "a named
// pipe (FIFO)", …).
func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&os.ModeCharDevice != 0:
		return "a character device"
	case m&os.ModeDevice != 0:
		return "a block device"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "a special file"
}

// readBounded reads a regular file of at most maxConfigBytes.
func readBounded(path string) ([]byte, error) {
	// Refuse a FIFO, device or directory before opening it: opening a
	// FIFO blocks until a writer comes (red-team C9).
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s); --config must name a fleets.toml file", path, fileKind(st.Mode()))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() > maxConfigBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d allowed", path, st.Size(), maxConfigBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(data) > maxConfigBytes {
		return nil, fmt.Errorf("%s: more than the %d bytes allowed", path, maxConfigBytes)
	}
	return data, nil
}

// parseError turns a BurntSushi error on src into an *Error with its
// position. The parser's line is one too far when the error is found on a
// line's newline, so the line is counted from the error's byte offset. The
// parser's own idea of the key (its LastKey) is the last key it read, which
// on a broken table header or after a finished value is the previous
// section's: syntaxField checks it against the source (loc) before naming
// it.
func parseError(file, src string, loc *locator, err error) error {
	var pe toml.ParseError
	if ppe := (*toml.ParseError)(nil); errors.As(err, &ppe) {
		pe = *ppe
	} else if !errors.As(err, &pe) {
		return &Error{File: file, Msg: "invalid TOML: " + err.Error()}
	}
	e := &Error{File: file, Line: pe.Position.Line, Msg: "invalid TOML: " + pe.Message}
	if at := pe.Position.Start; at >= 0 && at <= len(src) && (at > 0 || e.Line <= 1) {
		e.Line = strings.Count(src[:at], "\n") + 1
	}
	path, note := loc.syntaxField(e.Line, keyParts(pe.LastKey))
	e.Field, e.Msg = fieldName(path), e.Msg+note
	return e
}

// keyParts splits a dotted key as BurntSushi writes it (parts quoted
// where needed) into its parts.
func keyParts(k string) []string {
	s := &scanner{src: k, line: 1}
	return s.key()
}

// syntaxField returns the key path a syntax error on line is about, given
// the parser's last key, and a note for the message:
//   - on a table header line: the header's table when the parser had
//     read it (junk after a good header), else none (the header itself is
//     broken, or defines a table again: the message names it);
//   - inside a value (last is a key of the section in effect at line):
//     last, noting the line its value starts on when that is an earlier
//     one;
//   - between values: the key written on line, else the section;
//   - last outside the section in effect (a stale key): the section, or
//     none at the top level.
func (l *locator) syntaxField(line int, last []string) ([]string, string) {
	var section []string
	for _, h := range l.headers {
		if h.line > line {
			break
		}
		if h.line == line {
			if len(last) > 0 && slices.Equal(last, h.parts) {
				return last, ""
			}
			return nil, ""
		}
		section = h.parts
	}
	if !hasPrefix(last, section) {
		return section, ""
	}
	if len(last) > len(section) {
		// A key written on this line (a duplicate, say) is named as it
		// is; one whose value began earlier gets that line too.
		if k, ok := l.keys[line]; ok && hasPrefix(last, k) {
			return last, ""
		}
		if ln, ok := l.exact(last); ok && ln < line {
			return last, fmt.Sprintf(" (in the value of %s, which starts on line %d)", fieldName(last), ln)
		}
		return last, ""
	}
	if k, ok := l.keys[line]; ok && len(k) > len(section) && hasPrefix(k, section) {
		return k, ""
	}
	return section, ""
}

// hasPrefix reports whether path starts with prefix.
func hasPrefix(path, prefix []string) bool {
	return len(path) >= len(prefix) && slices.Equal(path[:len(prefix)], prefix)
}

// joined returns the problems sorted by line, joined.
func (ld *loader) joined() error {
	sort.SliceStable(ld.errs, func(i, j int) bool { return ld.errs[i].Line < ld.errs[j].Line })
	errs := make([]error, len(ld.errs))
	for i, e := range ld.errs {
		errs[i] = e
	}
	return errors.Join(errs...)
}

// fail records a problem with the key at path, on the line of that key or
// of its nearest enclosing table.
func (ld *loader) fail(path []string, format string, args ...any) {
	ld.errs = append(ld.errs, &Error{File: ld.file, Line: ld.loc.line(path), Field: fieldName(path), Msg: fmt.Sprintf(format, args...)})
}

// where returns "file:line" for path, for messages that point at a second
// place.
func (ld *loader) where(path []string) string {
	if ln := ld.loc.line(path); ln > 0 {
		return fmt.Sprintf("%s:%d", ld.file, ln)
	}
	return ld.file
}

// fieldName renders a path as a dotted TOML key with [i] for indices.
func fieldName(path []string) string {
	var b strings.Builder
	for i, p := range path {
		if strings.HasPrefix(p, indexMark) {
			b.WriteString("[" + p[len(indexMark):] + "]")
			continue
		}
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(quoteKey(p))
	}
	return b.String()
}

// quoteKey returns k as a bare TOML key when it can be one, else quoted.
func quoteKey(k string) string {
	if k == "" {
		return `""`
	}
	for i := 0; i < len(k); i++ {
		if !isBare(k[i]) {
			return strconv.Quote(k)
		}
	}
	return k
}

// typeName returns the TOML type name of a decoded value.
func typeName(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case int64:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "boolean"
	case time.Time:
		return "datetime"
	case []any, []map[string]any:
		return "array"
	case map[string]any:
		return "table"
	}
	return fmt.Sprintf("%T", v)
}

// describe returns the type and, for scalars, a short rendering of v.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 40 {
			x = x[:40] + "…"
		}
		return "string " + strconv.Quote(x)
	case int64, float64, bool:
		return fmt.Sprintf("%s %v", typeName(v), x)
	case time.Time:
		return "datetime " + x.Format(time.RFC3339)
	}
	return typeName(v)
}

// wrongType records "expected WANT, got TYPE VALUE".
func (ld *loader) wrongType(path []string, want string, v any) {
	ld.fail(path, "expected %s, got %s", want, describe(v))
}

// table returns v as a table.
func (ld *loader) table(path []string, v any) (map[string]any, bool) {
	t, ok := v.(map[string]any)
	if !ok {
		ld.wrongType(path, "table", v)
	}
	return t, ok
}

// str returns v as a string.
func (ld *loader) str(path []string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		ld.wrongType(path, "string", v)
	}
	return s, ok
}

// nonEmpty returns v as a string that is not empty.
func (ld *loader) nonEmpty(path []string, v any) (string, bool) {
	s, ok := ld.str(path, v)
	if ok && s == "" {
		ld.fail(path, "must not be empty")
		return "", false
	}
	return s, ok
}

// integer returns v as an int.
func (ld *loader) integer(path []string, v any) (int, bool) {
	n, ok := v.(int64)
	if !ok {
		ld.wrongType(path, "integer", v)
		return 0, false
	}
	if n > math.MaxInt || n < math.MinInt {
		ld.fail(path, "integer %d out of range", n)
		return 0, false
	}
	return int(n), true
}

// boolean returns v as a bool.
func (ld *loader) boolean(path []string, v any) (bool, bool) {
	b, ok := v.(bool)
	if !ok {
		ld.wrongType(path, "boolean (true or false)", v)
	}
	return b, ok
}

// array returns v as a list of elements.
func (ld *loader) array(path []string, want string, v any) ([]any, bool) {
	switch a := v.(type) {
	case []any:
		return a, true
	case []map[string]any:
		out := make([]any, len(a))
		for i := range a {
			out[i] = a[i]
		}
		return out, true
	}
	ld.wrongType(path, want, v)
	return nil, false
}

// strs returns v as a list of strings; every element must be a string.
func (ld *loader) strs(path []string, v any) ([]string, bool) {
	a, ok := ld.array(path, "array of strings", v)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(a))
	good := true
	for i, e := range a {
		s, ok := ld.str(appendPath(path, indexPart(i)), e)
		good = good && ok
		out = append(out, s)
	}
	return out, good
}

// ints returns v as a list of integers.
func (ld *loader) ints(path []string, v any) ([]int, bool) {
	a, ok := ld.array(path, "array of integers", v)
	if !ok {
		return nil, false
	}
	out := make([]int, 0, len(a))
	good := true
	for i, e := range a {
		n, ok := ld.integer(appendPath(path, indexPart(i)), e)
		good = good && ok
		out = append(out, n)
	}
	return out, good
}

// duration returns v as a positive Duration written as a string.
func (ld *loader) duration(path []string, v any) (Duration, bool) {
	s, ok := v.(string)
	if !ok {
		ld.wrongType(path, `duration string such as "10s"`, v)
		return Duration{}, false
	}
	var d Duration
	if err := d.UnmarshalText([]byte(s)); err != nil {
		ld.fail(path, "expected a duration such as \"10s\" or \"1m30s\", got %q", s)
		return Duration{}, false
	}
	if d.Duration <= 0 {
		ld.fail(path, "must be positive, got %q", s)
		return Duration{}, false
	}
	return d, true
}

// known refuses the keys of t that are not in keys, suggesting a near
// match.
func (ld *loader) known(path []string, t map[string]any, keys ...string) {
	for k := range t {
		found := false
		for _, want := range keys {
			if k == want {
				found = true
				break
			}
		}
		if found {
			continue
		}
		if near := nearest(k, keys); near != "" {
			ld.fail(appendPath(path, k), "unknown key (did you mean %s?)", near)
		} else {
			ld.fail(appendPath(path, k), "unknown key (known keys here: %s)", strings.Join(keys, ", "))
		}
	}
}

// nearest returns the key in keys within edit distance 2 of k, or "".
func nearest(k string, keys []string) string {
	best, bestD := "", 3
	for _, c := range keys {
		if d := editDistance(k, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b (bytes).
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// expand expands a leading ~ and $VAR / ${VAR} references in s and makes
// the result absolute relative to the config file's directory, cleaned.
// Unset or empty variables are refused rather than expanded to "".
func (ld *loader) expand(path []string, s string) (string, bool) {
	if s == "" {
		ld.fail(path, "must not be empty")
		return "", false
	}
	prefix := ""
	if strings.HasPrefix(s, "~") {
		if s != "~" && s[1] != '/' {
			ld.fail(path, "%q: ~user is not supported; write the path in full", s)
			return "", false
		}
		home := ld.env.getenv("HOME")
		if home == "" {
			ld.fail(path, "%q: cannot expand ~: $HOME is not set", s)
			return "", false
		}
		prefix, s = home, s[1:]
	}
	var missing []string
	s = os.Expand(s, func(name string) string {
		v := ld.env.getenv(name)
		if v == "" {
			missing = append(missing, "$"+name)
		}
		return v
	})
	if len(missing) > 0 {
		ld.fail(path, "%s not set or empty in the environment", strings.Join(missing, ", "))
		return "", false
	}
	s = prefix + s
	if !filepath.IsAbs(s) {
		s = filepath.Join(ld.dir, s)
	}
	return filepath.Clean(s), true
}

// decode fills c from the decoded TOML tree.
func (ld *loader) decode(c *Config, root map[string]any) {
	ld.known(nil, root, "manager", "guard", "status", "broker", "federation", "fleets")
	// [broker] first: its admin variables may not be passed to fleets.
	ld.brokerTable(c, root)
	ld.secrets = secretEnvNames(c.Broker)
	mgr := map[string]any{}
	if v, ok := root["manager"]; ok {
		if t, ok := ld.table([]string{"manager"}, v); ok {
			mgr = t
		}
	}
	ld.manager(&c.Manager, mgr)
	guard := map[string]any{}
	if v, ok := root["guard"]; ok {
		if t, ok := ld.table([]string{"guard"}, v); ok {
			guard = t
		}
	}
	ld.guard(&c.Guard, guard)
	status := map[string]any{}
	if v, ok := root["status"]; ok {
		if t, ok := ld.table([]string{"status"}, v); ok {
			status = t
		}
	}
	ld.statusTable(&c.Status, status)
	ld.federationTable(c, root)
	if v, ok := root["fleets"]; ok {
		if t, ok := ld.table([]string{"fleets"}, v); ok {
			for name, fv := range t {
				path := []string{"fleets", name}
				ft, ok := ld.table(path, fv)
				if !ok {
					continue
				}
				c.Fleets[name] = ld.fleet(&c.Manager, name, ft)
			}
		}
	}
}

// manager decodes [manager] and applies its defaults.
func (ld *loader) manager(m *Manager, t map[string]any) {
	p := func(k string) []string { return []string{"manager", k} }
	m.Restart = ld.restartPolicy([]string{"manager"}, t, defaultRestartPolicy())
	ld.logSettings(m, t)
	m.PassEnv = ld.passEnv([]string{"manager"}, t)
	ld.known([]string{"manager"}, without(t, restartKeys, logKeys, envKeys), "listen", "state_dir", "herdr_bin", "port_range",
		"stop_grace", "start_timeout", "call_timeout", "mcp_socket")

	m.Listen = DefaultListen
	if v, ok := t["listen"]; ok {
		if s, ok := ld.str(p("listen"), v); ok {
			m.Listen = s
		}
	}

	if v, ok := t["state_dir"]; ok {
		if s, ok := ld.str(p("state_dir"), v); ok {
			m.StateDir, _ = ld.expand(p("state_dir"), s)
		}
	} else if x := ld.env.getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
		m.StateDir = filepath.Join(filepath.Clean(x), "fleetmgr")
	} else if home := ld.env.getenv("HOME"); home != "" {
		m.StateDir = filepath.Join(home, ".local", "state", "fleetmgr")
	} else {
		ld.fail(p("state_dir"), "no default: neither $XDG_STATE_HOME nor $HOME is set; set state_dir")
	}

	m.HerdrBin = DefaultHerdrBin
	if v, ok := t["herdr_bin"]; ok {
		if s, ok := ld.nonEmpty(p("herdr_bin"), v); ok {
			m.HerdrBin = s
			if strings.ContainsRune(s, '/') || strings.HasPrefix(s, "~") {
				m.HerdrBin, _ = ld.expand(p("herdr_bin"), s)
			}
		}
	}

	m.PortRange = [2]int{DefaultPortLow, DefaultPortHigh}
	if v, ok := t["port_range"]; ok {
		if r, ok := ld.ints(p("port_range"), v); ok {
			switch {
			case len(r) != 2:
				ld.fail(p("port_range"), "expected two integers [low, high], got %d", len(r))
			case r[0] < 1 || r[1] > 65535 || r[0] > r[1]:
				ld.fail(p("port_range"), "[%d, %d] is not a port range: need 1 <= low <= high <= 65535", r[0], r[1])
			default:
				m.PortRange = [2]int{r[0], r[1]}
			}
		}
	}

	durations := []struct {
		key string
		dst *Duration
		def time.Duration
	}{
		{"stop_grace", &m.StopGrace, DefaultStopGrace},
		{"start_timeout", &m.StartTimeout, DefaultStartTimeout},
		{"call_timeout", &m.CallTimeout, DefaultCallTimeout},
	}
	for _, d := range durations {
		d.dst.Duration = d.def
		if v, ok := t[d.key]; ok {
			if x, ok := ld.duration(p(d.key), v); ok {
				*d.dst = x
			}
		}
	}

	if v, ok := t["mcp_socket"]; ok {
		if s, ok := ld.str(p("mcp_socket"), v); ok {
			m.MCPSocket, _ = ld.expand(p("mcp_socket"), s)
		}
	} else if m.StateDir != "" {
		m.MCPSocket = filepath.Join(m.StateDir, "fleetmgr.sock")
	}
}

// guard decodes [guard] and applies its defaults.
func (ld *loader) guard(g *Guard, t map[string]any) {
	p := func(k string) []string { return []string{"guard", k} }
	ld.known([]string{"guard"}, t, "allowed_uids", "operator_sessions")
	g.AllowedUIDs = []int{ld.env.uid}
	if v, ok := t["allowed_uids"]; ok {
		if uids, ok := ld.ints(p("allowed_uids"), v); ok {
			good := true
			if len(uids) == 0 {
				ld.fail(p("allowed_uids"), "must list at least one uid: an empty list would refuse every caller (leave the key out for the manager's own uid)")
				good = false
			}
			for i, u := range uids {
				if u < 0 || u > math.MaxUint32-1 {
					ld.fail(appendPath(p("allowed_uids"), indexPart(i)), "%d is not a uid", u)
					good = false
				}
			}
			if good {
				g.AllowedUIDs = uids
			}
		}
	}
	g.OperatorSessions = []string{}
	if v, ok := t["operator_sessions"]; ok {
		if names, ok := ld.strs(p("operator_sessions"), v); ok {
			for i, n := range names {
				if err := herdrSessionName(n, true); err != nil {
					ld.fail(appendPath(p("operator_sessions"), indexPart(i)), "%v", err)
				}
			}
			g.OperatorSessions = names
		}
	}
}

// fleet decodes one [fleets.NAME] table and applies its defaults. Values
// that failed to decode are left at their zero value.
func (ld *loader) fleet(m *Manager, name string, t map[string]any) *Fleet {
	base := []string{"fleets", name}
	p := func(k string) []string { return appendPath(base, k) }
	if !validFleetName(name) {
		ld.fail(base, "fleet name %q is not allowed: names must match %s (a lowercase letter, then up to 31 lowercase letters, digits, '_' or '-')", name, fleetNamePattern)
	}
	ld.known(base, without(t, restartKeys, envKeys), "project", "command", "port", "herdr_session", "worktree_root", "env",
		"mcp_path", "config_template", "config_file", "lead", "lead_tab", "lead_command",
		"call_timeout", "vhost", "broker_uri_env", "broker_user", "host")

	f := &Fleet{Name: name, Env: map[string]string{}}
	f.Restart = ld.restartPolicy(base, t, m.Restart)
	ld.fleetHost(f, t)
	if ln, ok := ld.loc.exact(base); ok {
		f.Line = ln
	} else {
		f.Line = ld.loc.line(base)
	}
	if m.StateDir != "" {
		f.StateDir = filepath.Join(m.StateDir, "fleets", name)
		f.LogDir = f.StateDir
	}

	if v, ok := t["project"]; ok {
		if s, ok := ld.str(p("project"), v); ok {
			f.Project, _ = ld.expand(p("project"), s)
		}
	} else {
		ld.fail(p("project"), "missing: every fleet needs project = \"<directory the fleet works in>\"")
	}

	if v, ok := t["command"]; ok {
		if argv, ok := ld.strs(p("command"), v); ok {
			if len(argv) == 0 || argv[0] == "" {
				ld.fail(p("command"), "must be a non-empty argv whose first element names fleetd, e.g. [\"fleetd\", \"--config\", \"{{.ConfigPath}}\"]")
			}
			f.Command = argv
		}
	} else {
		ld.fail(p("command"), "missing: every fleet needs command = [\"<fleetd>\", \"<arg>\", ...]")
	}

	if v, ok := t["port"]; ok {
		if n, ok := ld.integer(p("port"), v); ok {
			if n < 1 || n > 65535 {
				ld.fail(p("port"), "%d is not a TCP port (1-65535)", n)
			} else {
				f.Port = n
			}
		}
	}

	f.HerdrSession = name
	if v, ok := t["herdr_session"]; ok {
		if s, ok := ld.str(p("herdr_session"), v); ok {
			f.HerdrSession = s
		}
	}
	if _, set := t["herdr_session"]; set || validFleetName(name) {
		if err := herdrSessionName(f.HerdrSession, false); err != nil {
			ld.fail(p("herdr_session"), "%v", err)
		}
	}

	if v, ok := t["worktree_root"]; ok {
		if s, ok := ld.str(p("worktree_root"), v); ok {
			f.WorktreeRoot, _ = ld.expand(p("worktree_root"), s)
		}
	} else if f.StateDir != "" {
		f.WorktreeRoot = filepath.Join(f.StateDir, "worktrees")
	}

	f.BrokerURIEnv = DefaultBrokerURIEnv
	if v, ok := t["broker_uri_env"]; ok {
		if s, ok := ld.str(p("broker_uri_env"), v); ok {
			f.BrokerURIEnv = s
			if !validEnvName(s) {
				ld.fail(p("broker_uri_env"), "%q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", s)
			} else if hasPrefixFold(s, "HERDR_") {
				ld.fail(p("broker_uri_env"), "%q: HERDR_* variables are removed from every fleet's environment", s)
			}
		}
	}

	if why := ld.secretEnv(f.BrokerURIEnv); why != "" {
		ld.fail(p("broker_uri_env"), "%s is %s; name a variable of the fleet's own, e.g. %s", f.BrokerURIEnv, why, DefaultBrokerURIEnv)
	}
	f.PassEnv = ld.passEnv(base, t)
	if i := slices.Index(f.PassEnv, f.BrokerURIEnv); i >= 0 {
		ld.fail(p("pass_env"), "%s is this fleet's broker_uri_env: fleetmgr sets it to the broker URI", f.BrokerURIEnv)
		f.PassEnv = slices.Delete(f.PassEnv, i, i+1)
	}
	if v, ok := t["env"]; ok {
		if et, ok := ld.table(p("env"), v); ok {
			for k, ev := range et {
				kp := appendPath(p("env"), k)
				s, ok := ld.str(kp, ev)
				if !ok {
					continue
				}
				switch {
				case !validEnvName(k):
					ld.fail(kp, "%q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", k)
				case hasPrefixFold(k, "HERDR_"):
					ld.fail(kp, "HERDR_* variables are refused: they would tie the fleet to a herdr pane or session other than its own")
				case hasPrefixFold(k, "FLEET_"):
					ld.fail(kp, "FLEET_* variables are refused: fleetmgr sets them (the contract with fleetd)")
				case k == f.BrokerURIEnv:
					ld.fail(kp, "%s is this fleet's broker_uri_env: fleetmgr sets it to the broker URI", k)
				case ld.secretEnv(k) != "":
					ld.refuseSecret(kp, k, ld.secretEnv(k))
				default:
					f.Env[k] = s
				}
			}
		}
	}

	f.MCPPath = DefaultMCPPath
	if v, ok := t["mcp_path"]; ok {
		if s, ok := ld.str(p("mcp_path"), v); ok {
			f.MCPPath = s
			if err := checkURLPath(s); err != nil {
				ld.fail(p("mcp_path"), "%v", err)
			}
		}
	}

	if v, ok := t["config_template"]; ok {
		if s, ok := ld.str(p("config_template"), v); ok {
			f.ConfigTemplate, _ = ld.expand(p("config_template"), s)
		}
	}
	if v, ok := t["config_file"]; ok {
		if s, ok := ld.str(p("config_file"), v); ok {
			f.ConfigFile, _ = ld.expand(p("config_file"), s)
		}
	} else if f.StateDir != "" {
		f.ConfigFile = filepath.Join(f.StateDir, "fleetd.conf")
	}

	if v, ok := t["lead"]; ok {
		f.Lead, _ = ld.boolean(p("lead"), v)
	}
	f.LeadTab = DefaultLeadTab
	if v, ok := t["lead_tab"]; ok {
		if s, ok := ld.nonEmpty(p("lead_tab"), v); ok {
			f.LeadTab = s
			if strings.ContainsFunc(s, isControl) {
				ld.fail(p("lead_tab"), "%q contains control characters", s)
			}
		}
	}
	f.LeadCommand = defaultLeadCommand()
	if v, ok := t["lead_command"]; ok {
		if argv, ok := ld.strs(p("lead_command"), v); ok {
			if len(argv) == 0 || argv[0] == "" {
				ld.fail(p("lead_command"), "must be a non-empty argv, e.g. [\"claude\"]")
			}
			f.LeadCommand = argv
		}
	}

	f.CallTimeout = m.CallTimeout
	if v, ok := t["call_timeout"]; ok {
		if d, ok := ld.duration(p("call_timeout"), v); ok {
			f.CallTimeout = d
		}
	}

	f.Vhost = DefaultVhostPrefix + name
	ld.fleetBroker(f, t)
	if v, ok := t["vhost"]; ok {
		if s, ok := ld.str(p("vhost"), v); ok {
			f.Vhost = s
		}
	}
	if _, set := t["vhost"]; set || validFleetName(name) {
		if err := checkVhost(f.Vhost); err != nil {
			ld.fail(p("vhost"), "%v", err)
		}
	}

	return f
}

// isControl reports whether r is an ASCII control character.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// hasPrefixFold reports whether s starts with prefix, ignoring ASCII case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
