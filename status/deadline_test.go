package status

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
)

// TestRosterHonoursDeadline: a fleetd that accepts connections and never
// answers (hung) costs the roster no more than its context.
func TestRosterHonoursDeadline(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never answered, until the listener closes
		}
	}()
	f := &registry.Fleet{Name: "hung", Port: l.Addr().(*net.TCPAddr).Port, MCPPath: "/mcp"}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, err = MCPRoster("test")(ctx, f)
	if took := time.Since(t0); err == nil || took > time.Second {
		t.Fatalf("roster of a hung fleetd: err %v after %s", err, took)
	}
}
