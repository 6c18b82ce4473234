package herdrd

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// vtSink receives what vtParser recognises in a terminal output stream.
type vtSink interface {
	print(b byte)                  // a byte of printable text (UTF-8 sequences arrive bytewise)
	control(b byte)                // a C0 control such as '\n', '\r', '\b', '\t'
	csi(params []byte, final byte) // ESC [ params final
	osc(data []byte)               // ESC ] data (BEL | ESC \)
}

// Parser states.
const (
	vtGround = iota
	vtEsc
	vtEscInter
	vtCSI
	vtOSC
	vtOSCEsc
	vtStr
	vtStrEsc
)

// maxOSC bounds a buffered OSC payload; longer payloads are dropped.
const maxOSC = 4096

// vtParser is a minimal incremental ECMA-48 escape-sequence parser. Its state carries across
// feed calls, so sequences split between reads are recognised.
type vtParser struct {
	state int
	buf   []byte
	over  bool // the current OSC payload exceeded maxOSC
}

// feed parses p, calling sink for each recognised element.
func (v *vtParser) feed(p []byte, sink vtSink) {
	for _, b := range p {
		switch v.state {
		case vtGround:
			switch {
			case b == 0x1b:
				v.state = vtEsc
			case b < 0x20 || b == 0x7f:
				sink.control(b)
			default:
				sink.print(b)
			}
		case vtEsc:
			switch b {
			case '[':
				v.state, v.buf = vtCSI, v.buf[:0]
			case ']':
				v.state, v.buf, v.over = vtOSC, v.buf[:0], false
			case 'P', 'X', '^', '_':
				v.state = vtStr
			case '(', ')', '*', '+', '#', '%', ' ':
				v.state = vtEscInter
			case 0x1b:
			default:
				v.state = vtGround
			}
		case vtEscInter:
			v.state = vtGround
		case vtCSI:
			switch {
			case b >= 0x40 && b <= 0x7e:
				sink.csi(v.buf, b)
				v.state = vtGround
			case b == 0x1b:
				v.state = vtEsc
			case b == 0x18 || b == 0x1a:
				v.state = vtGround
			case len(v.buf) < 64:
				v.buf = append(v.buf, b)
			}
		case vtOSC:
			switch b {
			case 0x07:
				v.endOSC(sink)
			case 0x1b:
				v.state = vtOSCEsc
			case 0x18, 0x1a:
				v.state = vtGround
			default:
				if len(v.buf) < maxOSC {
					v.buf = append(v.buf, b)
				} else {
					v.over = true
				}
			}
		case vtOSCEsc:
			v.endOSC(sink) // ESC \ is ST; any other ESC x also ends the OSC
			if b != '\\' {
				v.state = vtEsc
				v.feed([]byte{b}, sink)
			}
		case vtStr:
			if b == 0x07 || b == 0x18 || b == 0x1a {
				v.state = vtGround
			} else if b == 0x1b {
				v.state = vtStrEsc
			}
		case vtStrEsc:
			v.state = vtStr
			if b == '\\' {
				v.state = vtGround
			}
		}
	}
}

// endOSC delivers a complete OSC payload and returns to ground.
func (v *vtParser) endOSC(sink vtSink) {
	if !v.over {
		sink.osc(v.buf)
	}
	v.state = vtGround
}

// renderWidth is the stand-in's terminal width; "recent" and "visible" wrap lines at it.
const renderWidth = 120

// renderRows is the stand-in's terminal height; "visible" shows at most this many rows.
const renderRows = 40

// textRenderer turns an output stream into plain text lines, emulating only what line-oriented
// programs and readline use: CR, LF, BS, TAB, and CSI K/C/D/G/P/@/X. Cursor addressing is ignored.
type textRenderer struct {
	lines [][]rune
	cur   []rune
	col   int
	utf   []byte
}

func (r *textRenderer) print(b byte) {
	r.utf = append(r.utf, b)
	if !utf8.FullRune(r.utf) && len(r.utf) < utf8.UTFMax {
		return
	}
	for len(r.utf) > 0 {
		ru, n := utf8.DecodeRune(r.utf)
		r.utf = r.utf[n:]
		r.put(ru)
	}
}

func (r *textRenderer) put(ru rune) {
	for len(r.cur) < r.col {
		r.cur = append(r.cur, ' ')
	}
	if r.col < len(r.cur) {
		r.cur[r.col] = ru
	} else {
		r.cur = append(r.cur, ru)
	}
	r.col++
}

func (r *textRenderer) control(b byte) {
	switch b {
	case '\n':
		r.lines = append(r.lines, r.cur)
		r.cur, r.col = nil, 0
	case '\r':
		r.col = 0
	case '\b':
		if r.col > 0 {
			r.col--
		}
	case '\t':
		r.col = (r.col/8 + 1) * 8
	}
}

func (r *textRenderer) csi(params []byte, final byte) {
	n := 1
	if v, err := strconv.Atoi(string(params)); err == nil && v > 0 {
		n = v
	}
	switch final {
	case 'K':
		switch string(params) {
		case "", "0":
			if r.col < len(r.cur) {
				r.cur = r.cur[:r.col]
			}
		case "1":
			for i := 0; i < r.col && i < len(r.cur); i++ {
				r.cur[i] = ' '
			}
		case "2":
			r.cur = nil
		}
	case 'C':
		r.col += n
	case 'D':
		r.col = max(0, r.col-n)
	case 'G':
		r.col = n - 1
	case 'P':
		if r.col < len(r.cur) {
			end := min(len(r.cur), r.col+n)
			r.cur = append(r.cur[:r.col], r.cur[end:]...)
		}
	case '@':
		if r.col < len(r.cur) {
			ins := make([]rune, n)
			for i := range ins {
				ins[i] = ' '
			}
			r.cur = append(r.cur[:r.col], append(ins, r.cur[r.col:]...)...)
		}
	case 'X':
		for i := r.col; i < r.col+n && i < len(r.cur); i++ {
			r.cur[i] = ' '
		}
	}
}

func (r *textRenderer) osc([]byte) {}

// renderText renders raw terminal output as plain-text logical lines (unwrapped), trailing
// spaces removed, trailing empty lines dropped.
func renderText(raw []byte) []string {
	var p vtParser
	var r textRenderer
	p.feed(raw, &r)
	all := append(r.lines, r.cur)
	out := make([]string, len(all))
	for i, l := range all {
		out[i] = strings.TrimRight(string(l), " ")
	}
	for len(out) > 0 && out[len(out)-1] == "" {
		out = out[:len(out)-1]
	}
	return out
}

// wrapLines splits each line into rows of at most width runes, as a terminal soft-wraps.
func wrapLines(lines []string, width int) []string {
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		rs := []rune(l)
		for len(rs) > width {
			out = append(out, string(rs[:width]))
			rs = rs[width:]
		}
		out = append(out, string(rs))
	}
	return out
}

// lastLines keeps the last n lines (all when n <= 0) and reports whether any were dropped.
func lastLines(lines []string, n int) ([]string, bool) {
	if n > 0 && len(lines) > n {
		return lines[len(lines)-n:], true
	}
	return lines, false
}
