package registry

import (
	"strconv"
	"strings"
)

// This file finds the line on which a TOML key is written. BurntSushi/toml
// records key positions only in unexported fields, so the locator scans the
// source itself. It is a tolerant scanner, not a validator: Load runs it only
// on text the real parser accepted, and on any other text it must still
// terminate without panicking (FuzzLoad and FuzzLocate check that).

// pathSep joins key parts inside locator map keys; it cannot occur in a TOML
// key written in a file without an escape, and quoted keys are unescaped, so
// the rare collision only costs a less precise line.
const pathSep = "\x00"

// indexMark starts a path part that stands for an array index.
const indexMark = "\x01"

// indexPart returns the path part for array element i.
func indexPart(i int) string { return indexMark + strconv.Itoa(i) }

// maxDepth bounds how deeply keys and values may nest. fleets.toml needs
// 4 levels (fleets.NAME.env.KEY); BurntSushi/toml takes time quadratic in
// the nesting, so Load refuses deeper text before decoding it, and the
// locator stops following it (which keeps the scan linear).
const maxDepth = 16

// locator maps key paths to the 1-based line where each was first written.
type locator struct {
	lines    map[string]int
	explicit map[string]bool // paths defined by their own [header]
	arrays   map[string]int  // [[array]] header counts, by path
	deepLine int             // first line nesting past maxDepth, 0 if none
	// headers are the table headers ([t] or [[t]]), in source order,
	// with the key each names as written (no array index); a header the
	// scanner could only half read keeps what it read.
	headers []header
	// keys maps the line on which a key/value statement outside any
	// inline table starts to its full key path (section + key).
	keys map[int][]string
}

// header is one table header: its line and the key it names.
type header struct {
	line  int
	parts []string
}

// locate scans src and records the line of every table header, key, and
// array element it can recognise.
func locate(src string) *locator {
	l := &locator{lines: map[string]int{}, explicit: map[string]bool{}, arrays: map[string]int{}, keys: map[int][]string{}}
	s := &scanner{src: src, line: 1}
	defer func() { l.deepLine = s.deepLine }()
	var current []string
	for s.pos < len(s.src) {
		before := s.pos
		s.skipSpaceNewlinesComments()
		if s.pos >= len(s.src) {
			break
		}
		line := s.line
		if s.peek() == '[' {
			s.pos++
			array := s.peek() == '['
			if array {
				s.pos++
			}
			parts := s.key()
			l.headers = append(l.headers, header{line: line, parts: parts})
			s.skipSpace()
			if s.peek() == ']' {
				s.pos++
			}
			if array && s.peek() == ']' {
				s.pos++
			}
			if array {
				k := join(parts)
				n := l.arrays[k]
				l.arrays[k] = n + 1
				l.recordPrefixes(nil, parts, line)
				parts = append(append([]string(nil), parts...), indexPart(n))
				l.record(parts, line)
			} else {
				l.recordPrefixes(nil, parts, line)
				k := join(parts)
				if !l.explicit[k] {
					l.explicit[k] = true
					l.lines[k] = line
				}
			}
			current = parts
			s.skipToLineEnd()
		} else {
			parts := s.key()
			s.skipSpace()
			if len(parts) > 0 && s.peek() == '=' {
				s.pos++
				s.skipSpace()
				l.recordPrefixes(current, parts, line)
				path := s.child(current, parts...)
				if _, ok := l.keys[line]; !ok {
					l.keys[line] = path
				}
				s.value(l, path)
			}
			s.skipToLineEnd()
		}
		if s.pos == before { // guarantee progress on text the scanner cannot read
			s.advance()
		}
	}
	return l
}

// appendPath returns a new slice holding base followed by parts.
func appendPath(base []string, parts ...string) []string {
	out := make([]string, 0, len(base)+len(parts))
	return append(append(out, base...), parts...)
}

// join encodes a path as a map key.
func join(path []string) string { return strings.Join(path, pathSep) }

// record notes line for path unless the path was seen before.
func (l *locator) record(path []string, line int) {
	k := join(path)
	if _, ok := l.lines[k]; !ok {
		l.lines[k] = line
	}
}

// recordPrefixes records base+parts[:i] for every i, so that implicitly
// created tables (by dotted keys or headers) get the line they first appear on.
func (l *locator) recordPrefixes(base, parts []string, line int) {
	for i := 1; i <= len(parts); i++ {
		l.record(appendPath(base, parts[:i]...), line)
	}
}

// line returns the line of path, or of its longest recorded prefix, or 0.
func (l *locator) line(path []string) int {
	for n := len(path); n > 0; n-- {
		if ln, ok := l.lines[join(path[:n])]; ok {
			return ln
		}
	}
	return 0
}

// exact returns the line of path itself and whether it was recorded.
func (l *locator) exact(path []string) (int, bool) {
	ln, ok := l.lines[join(path)]
	return ln, ok
}

// scanner is a cursor over TOML source that counts lines.
type scanner struct {
	src      string
	pos      int
	line     int
	deepLine int // first line nesting past maxDepth
}

// deep notes that the current line nests past maxDepth.
func (s *scanner) deep() {
	if s.deepLine == 0 {
		s.deepLine = s.line
	}
}

// child returns path extended by parts, or path itself (after noting the
// line) when that would nest past maxDepth.
func (s *scanner) child(path []string, parts ...string) []string {
	if len(path)+len(parts) > maxDepth {
		s.deep()
		return path
	}
	return appendPath(path, parts...)
}

// peek returns the byte at the cursor, or 0 at the end.
func (s *scanner) peek() byte {
	if s.pos < len(s.src) {
		return s.src[s.pos]
	}
	return 0
}

// advance moves one byte forward, counting newlines.
func (s *scanner) advance() {
	if s.pos < len(s.src) {
		if s.src[s.pos] == '\n' {
			s.line++
		}
		s.pos++
	}
}

// skipSpace skips blanks on the current line.
func (s *scanner) skipSpace() {
	for s.pos < len(s.src) && (s.src[s.pos] == ' ' || s.src[s.pos] == '\t') {
		s.pos++
	}
}

// skipSpaceNewlinesComments skips blanks, newlines and comments.
func (s *scanner) skipSpaceNewlinesComments() {
	for s.pos < len(s.src) {
		switch s.src[s.pos] {
		case ' ', '\t', '\r', '\n':
			s.advance()
		case '#':
			for s.pos < len(s.src) && s.src[s.pos] != '\n' {
				s.pos++
			}
		default:
			return
		}
	}
}

// skipToLineEnd moves to the next newline (leaving it unread).
func (s *scanner) skipToLineEnd() {
	for s.pos < len(s.src) && s.src[s.pos] != '\n' {
		s.pos++
	}
}

// isBare reports whether c may appear in a bare key.
func isBare(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// key reads a possibly dotted, possibly quoted key and returns its parts.
func (s *scanner) key() []string {
	var parts []string
	for {
		s.skipSpace()
		switch c := s.peek(); {
		case c == '"':
			raw, _ := s.quoted('"', false)
			if u, err := strconv.Unquote(`"` + raw + `"`); err == nil {
				raw = u
			}
			parts = append(parts, raw)
		case c == '\'':
			raw, _ := s.quoted('\'', false)
			parts = append(parts, raw)
		case isBare(c):
			start := s.pos
			for s.pos < len(s.src) && isBare(s.src[s.pos]) {
				s.pos++
			}
			parts = append(parts, s.src[start:s.pos])
		default:
			return parts
		}
		if len(parts) > maxDepth {
			s.deep()
			parts = parts[:maxDepth]
		}
		s.skipSpace()
		if s.peek() != '.' {
			return parts
		}
		s.pos++
	}
}

// quoted reads a string opening at the cursor with quote q. When multi is
// allowed and the string opens with three quotes it reads a multi-line
// string. It returns the raw text between the quotes.
func (s *scanner) quoted(q byte, multi bool) (string, bool) {
	if multi && strings.HasPrefix(s.src[s.pos:], string([]byte{q, q, q})) {
		s.pos += 3
		start := s.pos
		for s.pos < len(s.src) {
			c := s.src[s.pos]
			if c == '\\' && q == '"' {
				s.advance()
				s.advance()
				continue
			}
			if c == q && strings.HasPrefix(s.src[s.pos:], string([]byte{q, q, q})) {
				end := s.pos
				s.pos += 3
				// Up to two more quotes may belong to the content.
				for i := 0; i < 2 && s.peek() == q; i++ {
					s.pos++
					end++
				}
				return s.src[start:end], true
			}
			s.advance()
		}
		return s.src[start:], false
	}
	s.pos++ // opening quote
	start := s.pos
	for s.pos < len(s.src) {
		c := s.src[s.pos]
		if c == '\n' {
			return s.src[start:s.pos], false
		}
		if c == '\\' && q == '"' {
			s.pos++
			if s.pos < len(s.src) && s.src[s.pos] != '\n' {
				s.pos++
			}
			continue
		}
		if c == q {
			s.pos++
			return s.src[start : s.pos-1], true
		}
		s.pos++
	}
	return s.src[start:], false
}

// value reads one value whose key path is path, recording inline table keys
// and array elements.
func (s *scanner) value(l *locator, path []string) {
	switch s.peek() {
	case '"', '\'':
		s.quoted(s.peek(), true)
	case '{':
		s.pos++
		for s.pos < len(s.src) {
			before := s.pos
			s.skipSpaceNewlinesComments()
			switch s.peek() {
			case '}':
				s.pos++
				return
			case ',':
				s.pos++
				continue
			}
			line := s.line
			parts := s.key()
			s.skipSpace()
			if len(parts) == 0 || s.peek() != '=' {
				if s.pos == before {
					s.advance()
				}
				if s.peek() == '\n' || s.pos >= len(s.src) {
					return
				}
				continue
			}
			s.pos++
			s.skipSpace()
			l.recordPrefixes(path, parts, line)
			s.value(l, s.child(path, parts...))
			if s.pos == before {
				s.advance()
			}
		}
	case '[':
		s.pos++
		for i := 0; s.pos < len(s.src); {
			before := s.pos
			s.skipSpaceNewlinesComments()
			switch s.peek() {
			case ']':
				s.pos++
				return
			case ',':
				s.pos++
				continue
			}
			elem := s.child(path, indexPart(i))
			l.record(elem, s.line)
			s.value(l, elem)
			i++
			if s.pos == before {
				s.advance()
			}
		}
	default:
		for s.pos < len(s.src) {
			switch s.src[s.pos] {
			case ',', ']', '}', '\n', '#':
				return
			}
			s.pos++
		}
	}
}
