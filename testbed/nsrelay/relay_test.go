package nsrelay

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/netns"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
)

// relayBin builds testbed/cmd/nsrelay once per test binary.
func relayBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fmrlbin")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "nsrelay")
		out, err := exec.Command("go", "build", "-o", builtBin, "../cmd/nsrelay").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build ../cmd/nsrelay: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builtBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtBin != "" {
		os.RemoveAll(filepath.Dir(builtBin))
	}
	os.Exit(code)
}

// TestRelayProcesses: the two nsrelay processes carry a host port into a
// namespace (same number inside), and only that port; Kill cuts an open
// connection and leaves the port refusing inside; Restart brings it back;
// a connection through Dial (outer half only) works too.
func TestRelayProcesses(t *testing.T) {
	ns := netns.New(t, "relay")
	up := startUpstream(t, false)
	other := startUpstream(t, false)
	r := Start(t, ns, relayBin(t), up.port)
	addr := fmt.Sprintf("127.0.0.1:%d", up.port)

	c, err := ns.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s inside: %v\n%s", addr, err, r.Log())
	}
	if got := roundTrip(t, c, []byte("hello")); string(got) != "olleh" {
		t.Fatalf("through the relay: %q", got)
	}
	if r.Conns("outer", up.port) != 1 || r.Conns("inner", up.port) != 1 {
		t.Errorf("relay log does not count one connection per half:\n%s", r.Log())
	}
	if c, err := ns.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", other.port)); err == nil {
		c.Close()
		t.Fatalf("a host port not relayed (%d) is reachable inside", other.port)
	}

	// Through the outer half only.
	dc, err := r.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if got := roundTrip2(t, dc, []byte("via")); string(got) != "aiv" {
		t.Fatalf("Relay.Dial: %q", got)
	}

	// Kill with a connection open: it breaks, and the port refuses.
	held, err := ns.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := held.Write([]byte("partial")); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 5*time.Second, "the held connection relayed", func() (bool, string) {
		return r.Conns("outer", up.port) >= 3, r.Log()
	})
	pids := r.PIDs()
	r.Kill()
	_ = held.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := held.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection through the relay survived Kill")
	} else if ne := (net.Error)(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("a connection through the relay still hangs after Kill")
	}
	for _, p := range pids {
		if err := syscall.Kill(p, 0); err == nil {
			t.Errorf("relay process %d still exists after Kill", p)
		}
	}
	if c, err := ns.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatal("the port still accepts inside after Kill")
	} else if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial after Kill: %v, want connection refused", err)
	}

	r.Restart()
	c, err = ns.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("after Restart: %v\n%s", err, r.Log())
	}
	if got := roundTrip(t, c, []byte("back")); string(got) != "kcab" {
		t.Fatalf("after Restart: %q", got)
	}
}

// roundTrip2 is roundTrip for a unix connection.
func roundTrip2(t *testing.T, c net.Conn, body []byte) []byte {
	t.Helper()
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.UnixConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPortsOf: ports come from loopback URLs with explicit ports, once
// each, in order; anything else is refused by name.
func TestPortsOf(t *testing.T) {
	got, err := PortsOf("http://127.0.0.1:15672", "amqp://127.0.0.1:5672", "amqp://localhost:5672/vh", "http://[::1]:15673")
	if err != nil || fmt.Sprint(got) != "[15672 5672 15673]" {
		t.Fatalf("PortsOf = %v, %v", got, err)
	}
	for _, bad := range []string{"amqp://10.0.0.1:5672", "amqp://127.0.0.1", "http://127.0.0.1:0", "::"} {
		if _, err := PortsOf(bad); err == nil {
			t.Errorf("PortsOf(%q) accepted", bad)
		}
	}
}

// TestSweepDirs: a relay directory whose creator is gone is removed, one
// whose creator runs (this process) is kept, and so is anything else.
func TestSweepDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(tmp, dirPrefix()+"1")
	stale := filepath.Join(tmp, fmt.Sprintf("fmrl-%d-1-2", gone.Process.Pid))
	other := filepath.Join(tmp, "fmrl-x")
	for _, d := range []string{mine, stale, other} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(stale, "relay.sock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var said []string
	sweepDirs(func(f string, a ...any) { said = append(said, fmt.Sprintf(f, a...)) })
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale %s: %v, want removed", stale, err)
	}
	for _, d := range []string{mine, other} {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v, want kept", d, err)
		}
	}
	if len(said) != 1 {
		t.Errorf("sweep said %q, want one line", said)
	}
}
