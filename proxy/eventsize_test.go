package proxy

import (
	"errors"
	"fmt"
	"testing"
)

// TestEventTooLarge: the go-sdk's over-size refusal is told apart from its
// other "exceeded" error, the one a stopped fleetd causes (the stream gave
// up reconnecting), which is not worth a warning about the cap. The texts
// are the go-sdk v1.8 client's (mcp/event.go, mcp/streamable.go); e2e
// TestMessageSizes checks the real one still matches.
func TestEventTooLarge(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("malformed event: SSE event exceeded %d bytes without terminating", 64<<20), true},
		{fmt.Errorf("wrapped: %w", errors.New("SSE event exceeded maximum size")), true},
		{errors.New("calling \"tools/call\": exceeded 0 retries without progress (session ID: X)"), false},
		{errors.New("context deadline exceeded"), false},
	} {
		if got := eventTooLarge(c.err); got != c.want {
			t.Errorf("eventTooLarge(%q) = %v, want %v", c.err, got, c.want)
		}
	}
}
