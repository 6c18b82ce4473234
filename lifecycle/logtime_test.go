package lifecycle

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestLogStampsRoundTrip: what the copier stamps, written in any chunking,
// reads back through unstampWriter as it was printed, and through
// splitStamp with its time; lines without a stamp pass unchanged.
func TestLogStampsRoundTrip(t *testing.T) {
	at := time.Date(2026, 12, 3, 9, 19, 10, 123e6, time.UTC)
	var file bytes.Buffer
	sw := &stampWriter{w: &file, now: func() time.Time { return at }}
	printed := "first line\nsecond, in two wri"
	printed2 := "tes\n\nlast\n"
	sw.Write([]byte(printed))
	sw.Write([]byte(printed2))
	want := printed + printed2
	raw := file.String()
	if strings.Count(raw, "2026-12-03T09:19:10.123Z ") != 4 {
		t.Fatalf("stamped file:\n%q", raw)
	}
	raw += "an unstamped line\n2026-12-03 not a stamp\n"
	want += "an unstamped line\n2026-12-03 not a stamp\n"
	for _, size := range []int{1, 2, 7, 25, 26, 1000} {
		var out bytes.Buffer
		u := &unstampWriter{w: &out}
		for i := 0; i < len(raw); i += size {
			u.Write([]byte(raw[i:min(i+size, len(raw))]))
		}
		if out.String() != want {
			t.Errorf("chunks of %d: %q, want %q", size, out.String(), want)
		}
	}
	l := splitStamp(strings.Split(raw, "\n")[0])
	if !l.Time.Equal(at) || l.Text != "first line" {
		t.Errorf("splitStamp: %+v", l)
	}
	if l := splitStamp("an unstamped line"); !l.Time.IsZero() || l.Text != "an unstamped line" {
		t.Errorf("splitStamp of an unstamped line: %+v", l)
	}
}
