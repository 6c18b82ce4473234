package registry

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/BurntSushi/toml"

	"github.com/fleetmgr/fleetmgr/atomicfile"
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
	return loadData(path, data, e)
}

// loadData is load of data, read from (or kept as a copy of) path.
func loadData(path string, data []byte, e env) (*Config, error) {
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

// readBounded reads a regular file of at most maxConfigBytes (through
// atomicfile.Read: an open that never blocks on a named pipe), naming what
// else it found and what --config must name.
func readBounded(path string) ([]byte, error) {
	data, err := atomicfile.Read(path, maxConfigBytes)
	switch {
	case errors.Is(err, atomicfile.ErrNotRegular):
		kind := "not a regular file"
		if st, serr := os.Stat(path); serr == nil {
			kind = fileKind(st.Mode())
		}
		return nil, fmt.Errorf("%s: not a regular file (%s); --config must name a fleets.toml file", path, kind)
	case errors.Is(err, atomicfile.ErrTooLarge):
		return nil, fmt.Errorf("%s: more than the %d bytes allowed", path, maxConfigBytes)
	}
	return data, err
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
	if bareCR(src) {
		e.Msg += " (the file ends lines with a bare carriage return, as classic Mac OS did: save it with LF line endings)"
	}
	if at := pe.Position.Start; at >= 0 && at <= len(src) && (at > 0 || e.Line <= 1) {
		e.Line = strings.Count(src[:at], "\n") + 1
	}
	path, note := loc.syntaxField(e.Line, keyParts(pe.LastKey))
	e.Field, e.Msg = fieldName(path), e.Msg+note
	return e
}

// bareCR reports whether src holds a carriage return not followed by a
// line feed: TOML allows only LF and CRLF line endings (TOML 1.0,
// "Newline"), and the parser's own message only names the character.
func bareCR(src string) bool {
	for i := strings.IndexByte(src, '\r'); i >= 0; {
		if i+1 >= len(src) || src[i+1] != '\n' {
			return true
		}
		j := strings.IndexByte(src[i+1:], '\r')
		if j < 0 {
			return false
		}
		i += 1 + j
	}
	return false
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
		b.WriteString(quoteKey(shortKey(p)))
	}
	return b.String()
}

// maxKeyShown is the longest key part an error message repeats whole, in
// bytes; a longer one (a pasted blob, a broken quote that swallowed lines)
// is cut by shortKey.
const maxKeyShown = 64

// shortKey returns k, or for a key over maxKeyShown bytes its first 40
// bytes (cut at a rune boundary) followed by "…(N bytes)".
func shortKey(k string) string {
	if len(k) <= maxKeyShown {
		return k
	}
	cut := 40
	for cut > 0 && !utf8.RuneStart(k[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…(%d bytes)", k[:cut], len(k))
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

// durationSyntax is the form time.ParseDuration reads: signed decimal
// numbers, each with a unit.
var durationSyntax = regexp.MustCompile(`^[-+]?([0-9]*(\.[0-9]*)?(ns|us|µs|μs|ms|s|m|h))+$`)

// duration returns v as a positive Duration written as a string.
func (ld *loader) duration(path []string, v any) (Duration, bool) {
	s, ok := v.(string)
	if !ok {
		ld.wrongType(path, `duration string such as "10s"`, v)
		return Duration{}, false
	}
	var d Duration
	if err := d.UnmarshalText([]byte(s)); err != nil {
		if durationSyntax.MatchString(s) {
			// Written as a duration, yet refused: time.ParseDuration's
			// int64 nanoseconds overflowed.
			ld.fail(path, "duration %q is too long: at most 2562047h (about 292 years)", s)
		} else {
			ld.fail(path, "expected a duration such as \"10s\" or \"1m30s\", got %q", s)
		}
		return Duration{}, false
	}
	if d.Duration <= 0 {
		ld.fail(path, "must be positive, got %q", s)
		return Duration{}, false
	}
	return d, true
}

// field is one key of a table, as Load decodes it. A table's decoder is
// its list of fields: the keys it accepts, how each is decoded and in
// which order; decodeTable refuses every other key of the table.
type field struct {
	key string
	// set decodes the key's value v; path is the key's.
	set func(path []string, v any)
	// unset, if not nil, runs when the key is absent: a default that
	// depends on keys decoded before it, or a check of the default. A
	// plain default is set before the table is decoded.
	unset func(path []string)
	// first marks a key other keys of the table depend on: it is decoded
	// before every field not so marked.
	first bool
	// shared marks a key of a group several tables accept (the
	// supervision keys, log_max_*, pass_env) or one refused with advice
	// (the broker's secret-looking keys): an unknown key's message
	// neither suggests it nor lists it, and names the table's own keys.
	shared bool
}

// decodeTable decodes table t at path by fields (those marked first, then
// the others, each in list order), then refuses every key of t that no
// field names, suggesting the nearest of the table's own keys or else
// listing them.
func (ld *loader) decodeTable(path []string, t map[string]any, fields []field) {
	for _, first := range []bool{true, false} {
		for _, f := range fields {
			if f.first != first {
				continue
			}
			p := appendPath(path, f.key)
			if v, ok := t[f.key]; ok {
				f.set(p, v)
			} else if f.unset != nil {
				f.unset(p)
			}
		}
	}
	var own []string
	for _, f := range fields {
		if !f.shared {
			own = append(own, f.key)
		}
	}
	for k := range t {
		if slices.ContainsFunc(fields, func(f field) bool { return f.key == k }) {
			continue
		}
		if near := nearest(k, own); near != "" {
			ld.fail(appendPath(path, k), "unknown key (did you mean %s?)", near)
		} else {
			ld.fail(appendPath(path, k), "unknown key (known keys here: %s)", strings.Join(own, ", "))
		}
	}
}

// subtable returns the table at root[key], or nil when it is absent or
// not a table (refused).
func (ld *loader) subtable(path []string, v any) map[string]any {
	t, _ := ld.table(path, v)
	return t
}

// The setters of common fields: each decodes a value of one type into
// dst, leaving dst as it was when the value is refused.

// setStr decodes a string.
func (ld *loader) setStr(dst *string) func([]string, any) {
	return func(p []string, v any) {
		if s, ok := ld.str(p, v); ok {
			*dst = s
		}
	}
}

// setPath decodes a path: a string, ~ and $VARs expanded, made absolute
// (expand).
func (ld *loader) setPath(dst *string) func([]string, any) {
	return func(p []string, v any) {
		if s, ok := ld.str(p, v); ok {
			*dst, _ = ld.expand(p, s)
		}
	}
}

// setDuration decodes a positive duration string.
func (ld *loader) setDuration(dst *Duration) func([]string, any) {
	return func(p []string, v any) {
		if d, ok := ld.duration(p, v); ok {
			*dst = d
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
	ld.decodeTable(nil, root, []field{
		{key: "manager",
			set:   func(p []string, v any) { ld.manager(&c.Manager, ld.subtable(p, v)) },
			unset: func([]string) { ld.manager(&c.Manager, nil) }},
		{key: "guard",
			set:   func(p []string, v any) { ld.guard(&c.Guard, ld.subtable(p, v)) },
			unset: func([]string) { ld.guard(&c.Guard, nil) }},
		{key: "status",
			set:   func(p []string, v any) { ld.statusTable(&c.Status, ld.subtable(p, v)) },
			unset: func([]string) { ld.statusTable(&c.Status, nil) }},
		// First: its admin variables may not be passed to fleets.
		{key: "broker", first: true, set: func(p []string, v any) { ld.brokerTable(c, p, v) }},
		{key: "federation", set: func(p []string, v any) { ld.federationTable(c, p, v) }},
		// First: its url_env names may not be passed to fleets.
		{key: "notify", first: true, set: func(p []string, v any) { ld.notifyTable(c, p, v) }},
		{key: "fleets", set: func(p []string, v any) {
			for name, fv := range ld.subtable(p, v) {
				if ft, ok := ld.table(appendPath(p, name), fv); ok {
					c.Fleets[name] = ld.fleet(&c.Manager, name, ft)
				}
			}
		}},
	})
}

// manager decodes [manager] (t, nil when absent) and applies its
// defaults.
func (ld *loader) manager(m *Manager, t map[string]any) {
	path := []string{"manager"}
	m.Restart = defaultRestartPolicy()
	m.LogMaxMB, m.LogMaxBackups = DefaultLogMaxMB, DefaultLogMaxBackups
	m.Listen = DefaultListen
	m.HerdrBin = DefaultHerdrBin
	m.PortRange = [2]int{DefaultPortLow, DefaultPortHigh}
	m.StopGrace.Duration = DefaultStopGrace
	m.StartTimeout.Duration = DefaultStartTimeout
	m.CallTimeout.Duration = DefaultCallTimeout
	m.FastPath = true
	m.HerdrLabels = true
	m.Journal, m.JournalMaxMB, m.JournalMaxAge.Duration = true, DefaultJournalMaxMB, DefaultJournalMaxAge
	ld.decodeTable(path, t, slices.Concat(ld.restartFields(&m.Restart), ld.logFields(m), ld.journalFields(m), []field{
		ld.passEnvField(&m.PassEnv, nil),
		{key: "herdr_labels", set: func(p []string, v any) {
			if b, ok := ld.boolean(p, v); ok {
				m.HerdrLabels = b
			}
		}},
		ld.toolsField(&m.Tools),
		{key: "listen", set: ld.setStr(&m.Listen)},
		{key: "state_dir", set: ld.setPath(&m.StateDir), unset: func(p []string) {
			if x := ld.env.getenv("XDG_STATE_HOME"); filepath.IsAbs(x) {
				m.StateDir = filepath.Join(filepath.Clean(x), "fleetmgr")
			} else if home := ld.env.getenv("HOME"); home != "" {
				m.StateDir = filepath.Join(home, ".local", "state", "fleetmgr")
			} else {
				ld.fail(p, "no default: neither $XDG_STATE_HOME nor $HOME is set; set state_dir")
			}
		}},
		{key: "herdr_bin", set: func(p []string, v any) {
			if s, ok := ld.nonEmpty(p, v); ok {
				m.HerdrBin = s
				if strings.ContainsRune(s, '/') || strings.HasPrefix(s, "~") {
					m.HerdrBin, _ = ld.expand(p, s)
				}
			}
		}},
		{key: "port_range", set: func(p []string, v any) {
			if r, ok := ld.ints(p, v); ok {
				switch {
				case len(r) != 2:
					ld.fail(p, "expected two integers [low, high], got %d", len(r))
				case r[0] < 1 || r[1] > 65535 || r[0] > r[1]:
					ld.fail(p, "[%d, %d] is not a port range: need 1 <= low <= high <= 65535", r[0], r[1])
				default:
					m.PortRange = [2]int{r[0], r[1]}
				}
			}
		}},
		{key: "stop_grace", set: ld.setDuration(&m.StopGrace)},
		{key: "start_timeout", set: ld.setDuration(&m.StartTimeout)},
		{key: "call_timeout", set: ld.setDuration(&m.CallTimeout)},
		{key: "fast_path", set: func(p []string, v any) {
			if b, ok := ld.boolean(p, v); ok {
				m.FastPath = b
			}
		}},
		{key: "mcp_socket", set: ld.setPath(&m.MCPSocket), unset: func([]string) {
			if m.StateDir != "" {
				m.MCPSocket = filepath.Join(m.StateDir, "fleetmgr.sock")
			}
		}},
	}))
	ld.checkRestart(path, m.Restart)
}

// guard decodes [guard] (t, nil when absent) and applies its defaults.
func (ld *loader) guard(g *Guard, t map[string]any) {
	g.AllowedUIDs = []int{ld.env.uid}
	g.OperatorSessions = []string{}
	ld.decodeTable([]string{"guard"}, t, []field{
		{key: "allowed_uids", set: func(p []string, v any) {
			uids, ok := ld.ints(p, v)
			if !ok {
				return
			}
			good := true
			if len(uids) == 0 {
				ld.fail(p, "must list at least one uid: an empty list would refuse every caller (leave the key out for the manager's own uid)")
				good = false
			}
			for i, u := range uids {
				if u < 0 || u > math.MaxUint32-1 {
					ld.fail(appendPath(p, indexPart(i)), "%d is not a uid", u)
					good = false
				}
			}
			if good {
				g.AllowedUIDs = uids
			}
		}},
		{key: "operator_sessions", set: func(p []string, v any) {
			if names, ok := ld.strs(p, v); ok {
				for i, n := range names {
					if err := herdrSessionName(n, true); err != nil {
						ld.fail(appendPath(p, indexPart(i)), "%v", err)
					}
				}
				g.OperatorSessions = names
			}
		}},
	})
}

// fleet decodes one [fleets.NAME] table and applies its defaults. Values
// that failed to decode are left at their default.
func (ld *loader) fleet(m *Manager, name string, t map[string]any) *Fleet {
	base := []string{"fleets", name}
	if !validFleetName(name) {
		ld.fail(base, "fleet name %q is not allowed: names must match %s (a lowercase letter, then up to 31 lowercase letters, digits, '_' or '-')", name, fleetNamePattern)
	}
	f := &Fleet{Name: name, Env: map[string]string{}, Restart: m.Restart, Host: LocalHost,
		HerdrSession: name, BrokerURIEnv: DefaultBrokerURIEnv, MCPPath: DefaultMCPPath,
		LeadTab: DefaultLeadTab, LeadCommand: defaultLeadCommand(), LeadReadyTimeout: Duration{DefaultLeadReady}, CallTimeout: m.CallTimeout,
		Vhost: DefaultVhostPrefix + name, BrokerUser: DefaultVhostPrefix + name}
	if ln, ok := ld.loc.exact(base); ok {
		f.Line = ln
	} else {
		f.Line = ld.loc.line(base)
	}
	if m.StateDir != "" {
		f.StateDir = filepath.Join(m.StateDir, "fleets", name)
		f.LogDir = f.StateDir
	}
	// herdr_session and vhost are checked when set, and as defaulted
	// from a valid fleet name (an invalid name is reported once, above).
	checkSession := func(p []string) {
		if err := herdrSessionName(f.HerdrSession, false); err != nil {
			ld.fail(p, "%v", err)
		}
	}
	checkVhostOf := func(p []string) {
		if err := checkVhost(f.Vhost); err != nil {
			ld.fail(p, "%v", err)
		}
	}
	ifValidName := func(check func([]string)) func([]string) {
		return func(p []string) {
			if validFleetName(name) {
				check(p)
			}
		}
	}
	ld.decodeTable(base, t, slices.Concat(ld.restartFields(&f.Restart), []field{
		{key: "project", set: ld.setPath(&f.Project), unset: func(p []string) {
			ld.fail(p, "missing: every fleet needs project = \"<directory the fleet works in>\"")
		}},
		{key: "command", set: func(p []string, v any) {
			if argv, ok := ld.strs(p, v); ok {
				if len(argv) == 0 || argv[0] == "" {
					ld.fail(p, "must be a non-empty argv whose first element names fleetd, e.g. [\"fleetd\", \"--config\", \"{{.ConfigPath}}\"]")
				}
				f.Command = argv
			}
		}, unset: func(p []string) {
			ld.fail(p, "missing: every fleet needs command = [\"<fleetd>\", \"<arg>\", ...]")
		}},
		{key: "port", set: func(p []string, v any) {
			if n, ok := ld.integer(p, v); ok {
				if n < 1 || n > 65535 {
					ld.fail(p, "%d is not a TCP port (1-65535)", n)
				} else {
					f.Port = n
				}
			}
		}},
		{key: "herdr_session", set: func(p []string, v any) {
			ld.setStr(&f.HerdrSession)(p, v)
			checkSession(p)
		}, unset: ifValidName(checkSession)},
		{key: "worktree_root", set: ld.setPath(&f.WorktreeRoot), unset: func([]string) {
			if f.StateDir != "" {
				f.WorktreeRoot = filepath.Join(f.StateDir, "worktrees")
			}
		}},
		ld.passEnvField(&f.PassEnv, f),
		ld.toolsField(&f.Tools),
		{key: "env", set: func(p []string, v any) { ld.fleetEnv(f, p, v) }},
		{key: "mcp_path", set: func(p []string, v any) {
			if s, ok := ld.str(p, v); ok {
				f.MCPPath = s
				if err := checkURLPath(s); err != nil {
					ld.fail(p, "%v", err)
				}
			}
		}},
		{key: "config_template", set: ld.setPath(&f.ConfigTemplate)},
		{key: "config_file", set: ld.setPath(&f.ConfigFile), unset: func([]string) {
			if f.StateDir != "" {
				f.ConfigFile = filepath.Join(f.StateDir, "fleetd.conf")
			}
		}},
		{key: "lead", set: func(p []string, v any) { f.Lead, _ = ld.boolean(p, v) }},
		{key: "lead_tab", set: func(p []string, v any) {
			if s, ok := ld.nonEmpty(p, v); ok {
				f.LeadTab = s
				if strings.ContainsFunc(s, isControl) {
					ld.fail(p, "%q contains control characters", s)
				}
			}
		}},
		{key: "lead_command", set: func(p []string, v any) {
			if argv, ok := ld.strs(p, v); ok {
				if len(argv) == 0 || argv[0] == "" {
					ld.fail(p, "must be a non-empty argv, e.g. [\"claude\"]")
				}
				f.LeadCommand = argv
			}
		}},
		{key: "lead_ready_timeout", set: ld.setDuration(&f.LeadReadyTimeout)},
		{key: "call_timeout", set: ld.setDuration(&f.CallTimeout)},
		{key: "vhost", set: func(p []string, v any) {
			ld.setStr(&f.Vhost)(p, v)
			checkVhostOf(p)
		}, unset: ifValidName(checkVhostOf)},
		ld.brokerURIEnvField(f),
		ld.brokerUserField(f),
		// Where the fleet runs: "local" or this host's name means here;
		// any other value makes the fleet REMOTE in status, never probed.
		{key: "host", set: func(p []string, v any) {
			if s, ok := ld.nonEmpty(p, v); ok {
				f.Host = s
			}
		}},
	}))
	ld.checkRestart(base, f.Restart)
	return f
}

// fleetEnv decodes [fleets.NAME.env]: variables for the fleet's processes,
// none of them HERDR_*, FLEET_*, the fleet's broker_uri_env or a secret
// of the manager's.
func (ld *loader) fleetEnv(f *Fleet, path []string, v any) {
	et, ok := ld.table(path, v)
	if !ok {
		return
	}
	for k, ev := range et {
		kp := appendPath(path, k)
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

// isControl reports whether r is an ASCII control character.
func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// hasPrefixFold reports whether s starts with prefix, ignoring ASCII case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}
