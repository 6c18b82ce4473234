// Package brokertest is test equipment: it finds the real broker the tests
// run against (scripts/test starts a loopback RabbitMQ and exports its
// addresses), decides whether a test runs or skips, and serialises tests
// that restart the broker against those that merely use it. Nothing in the
// product imports it.
package brokertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/broker"
)

// Environment variables scripts/test exports, with the defaults used when
// they are unset (a RabbitMQ on this host with the guest account, which
// RabbitMQ only lets in from localhost).
const (
	EnvMgmt     = "FLEETMGR_TEST_BROKER_MGMT"     // default http://127.0.0.1:15672
	EnvAMQP     = "FLEETMGR_TEST_AMQP"            // default amqp://127.0.0.1:5672
	EnvUser     = "FLEETMGR_TEST_BROKER_USER"     // default guest
	EnvPassword = "FLEETMGR_TEST_BROKER_PASSWORD" // default guest
)

// Broker is the broker under test.
type Broker struct {
	// MgmtURL is the management API base URL.
	MgmtURL string
	// AMQPURL is amqp://host:port (no credentials, no vhost).
	AMQPURL string
	// User and Password are administrator credentials.
	User, Password string
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// lockPath is the file whose flock orders broker users (shared) against
// broker restarters (exclusive), across test binaries.
func lockPath() string { return filepath.Join(os.TempDir(), "fleetmgr-test-broker.lock") }

// flock takes how (unix.LOCK_SH or unix.LOCK_EX) on lockPath for the rest
// of the test, waiting up to 5 minutes.
func flock(t testing.TB, how int) {
	t.Helper()
	f, err := os.OpenFile(lockPath(), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		t.Fatalf("broker test lock: %v", err)
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			t.Fatalf("broker test lock %s: %v", lockPath(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() })
}

// Require returns the broker under test, or ends the test: under CI
// (CI set to anything non-empty) an unusable broker fails the test,
// otherwise it skips with the reason. It holds a shared lock for the rest
// of the test, so a test that restarts the broker (RequireExclusive) waits
// for it, across test binaries.
func Require(t testing.TB) *Broker {
	t.Helper()
	return require(t, unix.LOCK_SH)
}

// RequireExclusive is Require with the lock held exclusively: for a test
// that stops or restarts the broker while no other test uses it.
func RequireExclusive(t testing.TB) *Broker {
	t.Helper()
	return require(t, unix.LOCK_EX)
}

func require(t testing.TB, how int) *Broker {
	t.Helper()
	b := &Broker{
		MgmtURL:  envOr(EnvMgmt, "http://127.0.0.1:15672"),
		AMQPURL:  envOr(EnvAMQP, "amqp://127.0.0.1:5672"),
		User:     envOr(EnvUser, "guest"),
		Password: envOr(EnvPassword, "guest"),
	}
	flock(t, how)
	if err := b.reachable(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set, so the broker tests must run, but the broker is not usable: %v (scripts/test starts one)", err)
		}
		t.Skipf("no broker reachable (%v); run scripts/test, or set %s/%s/%s/%s to a RabbitMQ or LavinMQ with management", err, EnvMgmt, EnvAMQP, EnvUser, EnvPassword)
	}
	return b
}

// reachable checks the management API (with the admin credentials) and the
// AMQP port.
func (b *Broker) reachable() error {
	a, err := broker.NewAdmin(b.MgmtURL, b.User, b.Password, broker.AdminOptions{RetryMax: -1, Timeout: 3 * time.Second})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := a.Overview(ctx); err != nil {
		return err
	}
	uri, err := broker.VhostURI(b.AMQPURL, b.User, b.Password, "/")
	if err != nil {
		return err
	}
	c, err := broker.Dial(ctx, uri)
	if err != nil && !broker.IsAccessRefused(err) {
		return err
	}
	if c != nil {
		c.Close()
	}
	return nil
}

// Admin returns a management client with the admin credentials.
func (b *Broker) Admin(t testing.TB) *broker.Admin {
	t.Helper()
	a, err := broker.NewAdmin(b.MgmtURL, b.User, b.Password, broker.AdminOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Unique returns prefix + "-" + 8 random hex digits, for vhost and user
// names that no other test (or earlier run) uses.
func Unique(prefix string) string {
	var r [4]byte
	_, _ = rand.Read(r[:])
	return prefix + "-" + hex.EncodeToString(r[:])
}

// Cleanup deletes vhosts and users when the test ends (best effort).
func (b *Broker) Cleanup(t testing.TB, vhosts, users []string) {
	t.Helper()
	a := b.Admin(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, v := range vhosts {
			if _, err := a.DeleteVhost(ctx, v); err != nil {
				t.Logf("cleanup: delete vhost %s: %v", v, err)
			}
		}
		for _, u := range users {
			if err := a.DeleteUser(ctx, u); err != nil {
				t.Logf("cleanup: delete user %s: %v", u, err)
			}
		}
	})
}

// Rabbitmqctl runs rabbitmqctl with args (bounded to 60 s) and returns its
// combined output. The test is skipped (failed under CI) when rabbitmqctl
// is not installed, e.g. against a LavinMQ.
func Rabbitmqctl(t testing.TB, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("rabbitmqctl")
	if err != nil {
		for _, p := range []string{"/usr/sbin/rabbitmqctl", "/usr/lib/rabbitmq/bin/rabbitmqctl"} {
			if _, serr := os.Stat(p); serr == nil {
				bin, err = p, nil
				break
			}
		}
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("rabbitmqctl not found under CI: %v", err)
		}
		t.Skipf("rabbitmqctl not found (%v): this test restarts a local RabbitMQ", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// WaitManagement polls GET /api/overview until it answers or d passes.
func (b *Broker) WaitManagement(t testing.TB, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		if last = b.reachable(); last == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("broker not back within %s: %v", d, last)
}

// String describes the broker for logs (no password).
func (b *Broker) String() string {
	return fmt.Sprintf("management %s, AMQP %s, admin %s", b.MgmtURL, b.AMQPURL, b.User)
}
