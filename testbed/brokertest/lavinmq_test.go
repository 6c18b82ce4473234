package brokertest

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestLavinMQPidRefusesForeignProcess: a pid file naming a process that is
// not this LavinMQ (here the test binary itself, as after pid reuse) is
// refused, so Stop never signals it; a missing pid file is an error too.
func TestLavinMQPidRefusesForeignProcess(t *testing.T) {
	dir := t.TempDir()
	c := &lavinmqCtl{bin: "/nonexistent/lavinmq", dataDir: filepath.Join(dir, "data"), pidFile: filepath.Join(dir, "pid"),
		logFile: filepath.Join(dir, "log"), amqpPort: 1, httpPort: 2, host: "127.0.0.1"}
	if _, err := c.pid(); err == nil {
		t.Fatal("no pid file: accepted")
	}
	if err := os.WriteFile(c.pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if pid, err := c.pid(); err == nil || !strings.Contains(err.Error(), "is not this LavinMQ") {
		t.Fatalf("pid() = %d, %v; want a refusal of the test binary's pid", pid, err)
	}
	if err := os.WriteFile(c.pidFile, []byte("twelve\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.pid(); err == nil || !strings.Contains(err.Error(), "not a pid") {
		t.Fatalf("pid() of a garbled file: %v", err)
	}
}

func TestLavinMQFromEnv(t *testing.T) {
	t.Setenv(EnvLavinMQBin, "/x/lavinmq")
	t.Setenv(EnvLavinMQDataDir, "")
	t.Setenv(EnvLavinMQPidFile, "/x/pid")
	t.Setenv(EnvLavinMQLog, "/x/log")
	c, err := lavinmqFromEnv("http://127.0.0.1:15673", "amqp://127.0.0.1:5673")
	if err != nil || c.httpPort != 15673 || c.amqpPort != 5673 || c.host != "127.0.0.1" {
		t.Fatalf("lavinmqFromEnv = %+v, %v", c, err)
	}
	if why := c.usable(); !strings.Contains(why, EnvLavinMQDataDir) || strings.Contains(why, EnvLavinMQBin) {
		t.Errorf("usable() with the data dir unset = %q", why)
	}
	c.dataDir = "/x/data"
	if why := c.usable(); why != "" {
		t.Errorf("usable() = %q", why)
	}
	if want := []string{"/x/lavinmq", "-D", "/x/data", "-p", "5673", "--http-port", "15673"}; !slices.Equal(c.args()[:7], want) {
		t.Errorf("args() = %q", c.args())
	}
	t.Setenv(EnvLavinMQDataDir, "/x/data")
	if c, err := lavinmqFromEnv("http://10.0.0.2:15673", "amqp://10.0.0.2:5673"); err != nil || !strings.Contains(c.usable(), "127.0.0.1") {
		t.Errorf("a remote LavinMQ: %v, usable() = %q", err, c.usable())
	}
	for _, bad := range [][2]string{{"http://127.0.0.1", "amqp://127.0.0.1:5673"}, {"http://127.0.0.1:15673", "amqp://127.0.0.1:0"}, {"http://127.0.0.1:15673", "%zz"}} {
		if _, err := lavinmqFromEnv(bad[0], bad[1]); err == nil {
			t.Errorf("lavinmqFromEnv(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

func TestLavinMQEnv(t *testing.T) {
	got := lavinmqEnv([]string{"PATH=/bin", "NOTIFY_SOCKET=/run/systemd/notify", "CONFIGURATION_DIRECTORY=/etc/lavinmq", "LISTEN_FDS=2", "HOME=/root"})
	want := []string{"PATH=/bin", "HOME=/root", "CONFIGURATION_DIRECTORY=/nonexistent"}
	if !slices.Equal(got, want) {
		t.Errorf("lavinmqEnv = %q, want %q", got, want)
	}
}
