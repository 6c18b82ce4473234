package herdr

import (
	"errors"
	"testing"
)

// FuzzDecodeResponse checks that DecodeResponse never panics and that its outcome is consistent:
// an *Error always carries a code, and success means the line had an id and a result object.
// Seeds live in testdata/fuzz/FuzzDecodeResponse (response lines shaped as herdr's documented examples).
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"id":"1","result":{"type":"ok"}}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		var anyResult map[string]any
		err := DecodeResponse(line, &anyResult)
		var he *Error
		switch {
		case errors.As(err, &he):
			if he.Code == "" {
				t.Fatalf("*Error without code for %q", line)
			}
		case err == nil:
			if anyResult == nil {
				t.Fatalf("success without result object for %q", line)
			}
		}
		for _, r := range []any{nil, new(Pong), new(PaneReadResult), new(Snapshot), new(int), 0} {
			_ = DecodeResponse(line, r)
		}
	})
}
