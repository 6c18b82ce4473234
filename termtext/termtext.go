// Package termtext makes text from elsewhere safe to print on the
// operator's terminal. What fleets and other hosts send — member ids,
// roster fields, log lines, error messages of a peer's verbs — is hostile
// input (docs/SECURITY.md "Text from fleets and peers"): printed as it
// came, a control sequence in it acts on the terminal (OSC 52 writes the
// clipboard in terminals that allow it, so the next paste runs what the
// sender chose; CSI sequences redraw the screen or hide lines; a carriage
// return overwrites what the operator reads), and a bidirectional
// override reorders what is shown (Trojan Source, CVE-2021-42574). The
// functions here show every such character as a Go-style escape (\x1b,
// \u009b, \u202e) instead, so it stays visible and inert; other text,
// UTF-8 included, is returned unchanged.
package termtext

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Cell returns s for one cell of a table or one field of a line: every C0
// control character (tab and newline too: they would break the layout),
// DEL, every C1 control character, every bidirectional formatting
// character (U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) and
// every byte that is not UTF-8 escaped; a backslash is left as it is.
func Cell(s string) string { return escape(s, false) }

// Text is Cell for free text of several lines (an error message, a log
// file's content): tab and newline are kept, everything else Cell escapes
// is escaped.
func Text(s string) string { return escape(s, true) }

// Line is Cell for one line of free text (a log line received as a
// string): tab is kept, a newline is escaped, so the line cannot pass for
// several.
func Line(s string) string { return strings.ReplaceAll(escape(s, true), "\n", `\x0a`) }

// Writer passes what is written on to W as Text escapes it. A character
// split across two writes is escaped as a whole (up to 3 bytes are held
// back until the next write completes it); Flush writes what is held
// back, escaped as the bytes it is.
type Writer struct {
	W    io.Writer
	held []byte
}

// Write escapes p (with the bytes held back from the last write) and
// writes it to W. It reports len(p) when W took everything.
func (w *Writer) Write(p []byte) (int, error) {
	buf := append(w.held, p...)
	cut := len(buf)
	// Hold back an incomplete UTF-8 sequence at the end.
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-3; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				cut = i
			}
			break
		}
	}
	w.held = append(w.held[:0:0], buf[cut:]...)
	if _, err := io.WriteString(w.W, escape(string(buf[:cut]), true)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes the bytes held back (an incomplete character at the end of
// the input), escaped.
func (w *Writer) Flush() error {
	if len(w.held) == 0 {
		return nil
	}
	_, err := io.WriteString(w.W, escape(string(w.held), true))
	w.held = nil
	return err
}

// JSON returns the JSON text b (as encoding/json writes it: control
// characters below 0x20 already escaped, invalid UTF-8 already replaced)
// with the other characters Cell escapes — DEL, C1 controls, the bidi
// formatting characters — written as \uXXXX escapes too. They occur only
// inside strings, where the escape means the same character, so the JSON
// is unchanged for any parser while a terminal it is printed on sees
// nothing to act on.
func JSON(b []byte) []byte {
	i := 0
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		if r >= 0x20 && unsafe(r, n, true) {
			break
		}
		i += n
	}
	if i == len(b) {
		return b
	}
	out := make([]byte, 0, len(b)+12)
	out = append(out, b[:i]...)
	for i < len(b) {
		r, n := utf8.DecodeRune(b[i:])
		if r >= 0x20 && !(r == utf8.RuneError && n == 1) && unsafe(r, n, true) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

func escape(s string, keepLayout bool) string {
	i := 0
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unsafe(r, n, keepLayout) {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	b.WriteString(s[:i])
	for i < len(s) {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case !unsafe(r, n, keepLayout):
			b.WriteString(s[i : i+n])
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += n
	}
	return b.String()
}

// unsafe reports whether rune r (n bytes of input) must be escaped.
func unsafe(r rune, n int, keepLayout bool) bool {
	switch {
	case r == utf8.RuneError && n == 1:
		return true
	case r == '\t' || r == '\n':
		return !keepLayout
	case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c || r == 0x200e || r == 0x200f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069:
		return true
	}
	return false
}
