package herdrd

import (
	"strings"
	"testing"
)

func TestBase32ID(t *testing.T) {
	for n, want := range map[int]string{1: "1", 9: "9", 10: "A", 31: "Z", 32: "0", 33: "11", 64: "10", 65: "21", 1056: "00", 1057: "111"} {
		if got := base32ID(n); got != want {
			t.Errorf("base32ID(%d) = %q, want %q", n, got, want)
		}
	}
	if workspaceID(33) != "w11" || tabID("w1", 2) != "w1:t2" || paneID("w2", 32) != "w2:p0" {
		t.Fatal("id forms")
	}
}

func TestEncodeKey(t *testing.T) {
	for name, want := range map[string]string{"Enter": "\r", "enter": "\r", "Tab": "\t", "Escape": "\x1b", "C-c": "\x03", "ctrl+d": "\x04", "Up": "\x1b[A"} {
		if b, ok := encodeKey(name); !ok || string(b) != want {
			t.Errorf("encodeKey(%q) = %q %v, want %q", name, b, ok, want)
		}
	}
	for _, bad := range []string{"", "C-", "C-1", "Enterprise", "ctrl-cc"} {
		if _, ok := encodeKey(bad); ok {
			t.Errorf("encodeKey(%q) accepted", bad)
		}
	}
}

// sink records what the parser recognised.
type recSink struct{ text, oscs, csis strings.Builder }

func (r *recSink) print(b byte)   { r.text.WriteByte(b) }
func (r *recSink) control(b byte) { r.text.WriteByte(b) }
func (r *recSink) csi(p []byte, f byte) {
	r.csis.Write(p)
	r.csis.WriteByte(f)
	r.csis.WriteByte('|')
}
func (r *recSink) osc(d []byte) { r.oscs.Write(d); r.oscs.WriteByte('|') }

func TestVTParserAcrossChunks(t *testing.T) {
	in := "a\x1b]777;herdr-status;blocked\x07b\x1b[?2004hc\x1b]0;title\x1b\\d\x1bPdcs\x1b\\e\x1b(Bf"
	for split := 0; split <= len(in); split++ {
		var p vtParser
		var r recSink
		p.feed([]byte(in[:split]), &r)
		p.feed([]byte(in[split:]), &r)
		if r.text.String() != "abcdef" || r.oscs.String() != "777;herdr-status;blocked|0;title|" || r.csis.String() != "?2004h|" {
			t.Fatalf("split %d: text %q osc %q csi %q", split, r.text.String(), r.oscs.String(), r.csis.String())
		}
	}
}

func TestRenderText(t *testing.T) {
	raw := "$ echo hi\r\nhi\r\nprogress 10%\rprogress 100%\r\n\x1b[1mbold\x1b[0m\r\nabcdef\b\b\x1b[Kxy\r\n日本\r\n$ \r\n\r\n"
	got := strings.Join(renderText([]byte(raw)), "\n")
	want := "$ echo hi\nhi\nprogress 100%\nbold\nabcdxy\n日本\n$"
	if got != want {
		t.Fatalf("renderText =\n%q\nwant\n%q", got, want)
	}
	long := strings.Repeat("x", renderWidth+5)
	if w := wrapLines([]string{long}, renderWidth); len(w) != 2 || len(w[1]) != 5 {
		t.Fatalf("wrap = %q", w)
	}
	if l, cut := lastLines([]string{"a", "b", "c"}, 2); !cut || strings.Join(l, ",") != "b,c" {
		t.Fatalf("lastLines = %v %v", l, cut)
	}
}
