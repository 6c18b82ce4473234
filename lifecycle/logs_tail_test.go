package lifecycle

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadTailLongLines: lines around the 1 MiB window readTail reads. A
// line that starts before the window was dropped whole, so a log whose
// last lines include one longer than the window showed fewer lines than
// asked (the long line, and what was written on it, missing). It is shown
// by its end, marked as cut; a window starting exactly at a line is not
// marked.
func TestReadTailLongLines(t *testing.T) {
	const window = 1 << 20
	path := filepath.Join(t.TempDir(), "fleetd.log")
	long := bytes.Repeat([]byte("a"), 2*window)
	for _, tc := range []struct {
		name string
		data []byte
		n    int
		want []string // each a suffix of the line; "" prefix checks below
		cut  []bool
	}{
		{"long line then a short one", append(append([]byte("first\n"), long...), "END\nlast\n"...), 3,
			[]string{"aEND", "last"}, []bool{true, false}},
		{"only a long line, no newline", long, 2, []string{"aaa"}, []bool{true}},
		{"window starts at a line", append(append(bytes.Repeat([]byte("b"), 99), '\n'), bytes.Repeat([]byte("c\n"), window/2)...), 2,
			[]string{"c", "c"}, []bool{false, false}},
		{"window starts right after a line's newline", append(append(bytes.Repeat([]byte("d"), 10), '\n'), append(bytes.Repeat([]byte("e"), window-1), '\n')...), 0,
			[]string{"eee"}, []bool{false}},
	} {
		if err := os.WriteFile(path, tc.data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readTail(path, tc.n)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(tc.want) {
			t.Errorf("%s: %d lines, want %d", tc.name, len(got), len(tc.want))
			continue
		}
		for i, l := range got {
			if !strings.HasSuffix(l, tc.want[i]) || strings.HasPrefix(l, cutMark) != tc.cut[i] {
				t.Errorf("%s: line %d (%d bytes) %.60q…%q; want suffix %q, cut %v", tc.name, i, len(l), l, l[max(0, len(l)-10):], tc.want[i], tc.cut[i])
			}
		}
	}
}
