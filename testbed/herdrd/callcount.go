package herdrd

import (
	"context"
	"log/slog"
	"maps"
	"sync"
)

// CallCounter is a slog.Handler for Config.Log that counts the stand-in's
// "api call" records (Config.LogCalls) by method: what a client asked of
// herdr. Tests use it to check how many requests of each kind fleetmgr
// made. Safe for concurrent use; the zero value is ready.
type CallCounter struct {
	mu sync.Mutex
	n  map[string]int
}

// Enabled takes every record.
func (c *CallCounter) Enabled(context.Context, slog.Level) bool { return true }

// WithAttrs returns c: the counter keeps no attributes.
func (c *CallCounter) WithAttrs([]slog.Attr) slog.Handler { return c }

// WithGroup returns c.
func (c *CallCounter) WithGroup(string) slog.Handler { return c }

// Handle counts an "api call" record by its method attribute.
func (c *CallCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "api call" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key != "method" {
			return true
		}
		c.mu.Lock()
		if c.n == nil {
			c.n = map[string]int{}
		}
		c.n[a.Value.String()]++
		c.mu.Unlock()
		return false
	})
	return nil
}

// Counts is a copy of the counts so far, by method.
func (c *CallCounter) Counts() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

// Take returns method's count and resets it to 0.
func (c *CallCounter) Take(method string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n[method]
	delete(c.n, method)
	return n
}
