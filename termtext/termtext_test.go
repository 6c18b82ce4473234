package termtext

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEscape(t *testing.T) {
	for _, c := range []struct{ in, cell, text string }{
		{"plain kb-1 m_2", "plain kb-1 m_2", "plain kb-1 m_2"},
		{"héllo ✓ 日本", "héllo ✓ 日本", "héllo ✓ 日本"},
		{`back\slash`, `back\slash`, `back\slash`},
		{"a\tb\nc", `a\x09b\x0ac`, "a\tb\nc"},
		{"\x1b]52;c;ZWNobw==\x07", `\x1b]52;c;ZWNobw==\x07`, `\x1b]52;c;ZWNobw==\x07`},
		{"\x1b[2J\rover", `\x1b[2J\x0dover`, `\x1b[2J\x0dover`},
		{"\x00\x7f", `\x00\x7f`, `\x00\x7f`},
		{"c1 \u009b31m \u0085", `c1 \u009b31m \u0085`, `c1 \u009b31m \u0085`},
		{"\u202egnp.exe \u2066x\u2069 \u200f\u061c", `\u202egnp.exe \u2066x\u2069 \u200f\u061c`, `\u202egnp.exe \u2066x\u2069 \u200f\u061c`},
		{"bad \xff\xfe utf8 \xc3", `bad \xff\xfe utf8 \xc3`, `bad \xff\xfe utf8 \xc3`},
		{"", "", ""},
	} {
		if got := Cell(c.in); got != c.cell {
			t.Errorf("Cell(%q) = %q, want %q", c.in, got, c.cell)
		}
		if got := Text(c.in); got != c.text {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.text)
		}
	}
}

// FuzzEscape: whatever comes in, what comes out is valid UTF-8 holding no
// character a terminal acts on (Text: but tab and newline), and clean
// input is returned as it is.
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "kb", "\x1b[31mred\x1b[0m", "\u202e\t\n", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, keep := range []bool{false, true} {
			out := escape(s, keep)
			if !utf8.ValidString(out) {
				t.Fatalf("escape(%q, %v) = %q: not UTF-8", s, keep, out)
			}
			clean := true
			for i, r := range out {
				if unsafe(r, utf8.RuneLen(r), keep) {
					t.Fatalf("escape(%q, %v) = %q keeps %U at %d", s, keep, out, r, i)
				}
			}
			for i := 0; i < len(s); {
				r, n := utf8.DecodeRuneInString(s[i:])
				if unsafe(r, n, keep) {
					clean = false
				}
				i += n
			}
			if clean && out != s {
				t.Fatalf("clean %q changed to %q", s, out)
			}
		}
	})
}

func TestLine(t *testing.T) {
	if got := Line("a\tb\nc\x1b"); got != `a`+"\t"+`b\x0ac\x1b` {
		t.Fatalf("Line = %q", got)
	}
}

// TestWriter: a character split across writes is kept whole; control
// sequences are escaped whatever the chunking; what is held back at the
// end comes out on Flush.
func TestWriter(t *testing.T) {
	in := "ok ✓ \x1b[2J\u202ex\ttab\nnext 日本\n"
	want := Text(in)
	for size := 1; size <= len(in); size++ {
		var b strings.Builder
		w := &Writer{W: &b}
		for i := 0; i < len(in); i += size {
			n, err := w.Write([]byte(in[i:min(i+size, len(in))]))
			if err != nil || n != min(size, len(in)-i) {
				t.Fatalf("size %d: write %d, %v", size, n, err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if b.String() != want {
			t.Fatalf("chunks of %d: %q, want %q", size, b.String(), want)
		}
	}
	var b strings.Builder
	w := &Writer{W: &b}
	w.Write([]byte("x\xe6\x97")) // an incomplete 日 at the end
	if b.String() != "x" {
		t.Fatalf("before Flush: %q", b.String())
	}
	w.Flush()
	if b.String() != `x\xe6\x97` {
		t.Fatalf("after Flush: %q", b.String())
	}
}

// TestJSON: the escaped JSON decodes to the same value, and holds none of
// the characters a terminal acts on.
func TestJSON(t *testing.T) {
	v := map[string]any{"id": "m1\x1b]52;c;x\x07\u009b31m\u202e\x7f ✓", "n": 1.5, "list": []any{"\u2066a\u2069"}}
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out := JSON(raw)
	var back any
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatalf("%s: %v", out, err)
	}
	if !reflect.DeepEqual(back, v) {
		t.Fatalf("decoded %#v, want %#v", back, v)
	}
	for i, r := range string(out) {
		if r != '\n' && unsafe(r, utf8.RuneLen(r), true) {
			t.Fatalf("%s keeps %U at %d", out, r, i)
		}
	}
	if clean := []byte(`{"a":"ok ✓"}`); &JSON(clean)[0] != &clean[0] {
		t.Fatal("clean JSON copied")
	}
}
