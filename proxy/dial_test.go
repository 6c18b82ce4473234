package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// kbOnPort is a lifecycle.Manager of one fleet, kb, configured on
// 127.0.0.1:port (nothing started, no state recorded).
func kbOnPort(t testing.TB, port int) *lifecycle.Manager {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "fleets.toml")
	conf := fmt.Sprintf("[manager]\nstate_dir = %q\nport_range = [1024, 65535]\n[fleets.kb]\nproject = %q\ncommand = [\"fleetd\"]\nport = %d\n", filepath.Join(dir, "state"), dir, port)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := registry.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return lifecycle.New(cfg, slog.New(slog.DiscardHandler), nil)
}

// TestDialUpstreamVerifiesFleetPorts: a connection to a configured fleet's
// port held by a process that is not the fleet's recorded fleetd is
// refused (ErrUnverifiedListener) and closed before anything is written;
// a port no fleet uses is dialled as it is.
func TestDialUpstreamVerifiesFleetPorts(t *testing.T) {
	impostor, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer impostor.Close()
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	p := New(Options{Manager: kbOnPort(t, impostor.Addr().(*net.TCPAddr).Port), Version: "test"})
	received := make(chan int, 1)
	go func() {
		c, err := impostor.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 64)
		n, _ := c.Read(b) // returns at the client's close
		received <- n
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := p.ups.dial(ctx, "tcp", impostor.Addr().String())
	if !errors.Is(err, lifecycle.ErrUnverifiedListener) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dial to the fleet's port held by this test: %v, want ErrUnverifiedListener", err)
	}
	if n := <-received; n != 0 {
		t.Fatalf("the impostor received %d bytes", n)
	}
	c, err = p.ups.dial(ctx, "tcp", other.Addr().String())
	if err != nil {
		t.Fatalf("dial to a port no fleet uses: %v", err)
	}
	c.Close()
}
