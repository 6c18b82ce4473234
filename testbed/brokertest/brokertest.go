// Package brokertest is test equipment: it finds the real brokers the
// tests run against (scripts/test starts a loopback RabbitMQ and exports
// its addresses; a LavinMQ is used when the tester runs one and names it
// in FLEETMGR_TEST_LAVINMQ_*), runs a test once per broker (Each,
// EachExclusive) or skips it saying why, serialises tests
// that stop a broker against those that merely use it, and stops and
// starts each broker its own way. Nothing in the product imports it.
package brokertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/broker"
)

// Broker names: each matrix subtest is named after its broker.
const (
	NameRabbitMQ = "rabbitmq"
	NameLavinMQ  = "lavinmq"
)

// Environment variables scripts/test exports for the RabbitMQ, with the
// defaults used when they are unset (a RabbitMQ on this host with the
// guest account, which RabbitMQ only lets in from localhost).
const (
	EnvMgmt     = "FLEETMGR_TEST_BROKER_MGMT"     // default http://127.0.0.1:15672
	EnvAMQP     = "FLEETMGR_TEST_AMQP"            // default amqp://127.0.0.1:5672
	EnvUser     = "FLEETMGR_TEST_BROKER_USER"     // default guest
	EnvPassword = "FLEETMGR_TEST_BROKER_PASSWORD" // default guest
)

// Environment variables naming a LavinMQ the tester runs (nothing in the
// repository builds, installs or starts one: no registry reachable here
// carries it). There is no default address: with EnvLavinMQMgmt or
// EnvLavinMQAMQP unset the LavinMQ half of the matrix is skipped, with one
// line saying how to run it, under CI too. Stop and Start (the tests that
// restart the broker) also need the binary, data directory, pid file and
// log of that LavinMQ; without them those tests are skipped, saying which
// variable is missing.
const (
	EnvLavinMQMgmt     = "FLEETMGR_TEST_LAVINMQ_MGMT"     // http://127.0.0.1:PORT
	EnvLavinMQAMQP     = "FLEETMGR_TEST_LAVINMQ_AMQP"     // amqp://127.0.0.1:PORT
	EnvLavinMQUser     = "FLEETMGR_TEST_LAVINMQ_USER"     // default guest
	EnvLavinMQPassword = "FLEETMGR_TEST_LAVINMQ_PASSWORD" // default guest
	EnvLavinMQBin      = "FLEETMGR_TEST_LAVINMQ_BIN"      // the lavinmq executable
	EnvLavinMQDataDir  = "FLEETMGR_TEST_LAVINMQ_DATA_DIR" // its -D
	EnvLavinMQPidFile  = "FLEETMGR_TEST_LAVINMQ_PIDFILE"  // holds the running pid; Start rewrites it
	EnvLavinMQLog      = "FLEETMGR_TEST_LAVINMQ_LOG"      // its stdout and stderr, appended
)

// lavinmqHowTo is the one line a skipped LavinMQ subtest gives.
const lavinmqHowTo = "no LavinMQ named: to run the LavinMQ subtests, start a LavinMQ on loopback and set " +
	EnvLavinMQMgmt + " and " + EnvLavinMQAMQP + " (and, for the restart tests, " + EnvLavinMQBin + ", " +
	EnvLavinMQDataDir + ", " + EnvLavinMQPidFile + ", " + EnvLavinMQLog + "); README \"Test\""

// Broker is one broker under test.
type Broker struct {
	// Name is NameRabbitMQ or NameLavinMQ, the subtest's name.
	Name string
	// Optional: a broker the tester may or may not run (LavinMQ). Its
	// subtests skip when it is not named, or cannot be restarted, even
	// under CI; one that is named but does not answer still fails under CI.
	Optional bool
	// Product is what the broker's GET /api/overview must name
	// (broker.RabbitMQ or broker.LavinMQ; see broker.Overview.Product).
	Product string
	// MgmtURL is the management API base URL.
	MgmtURL string
	// AMQPURL is amqp://host:port (no credentials, no vhost).
	AMQPURL string
	// User and Password are administrator credentials.
	User, Password string

	ctl       controller // how to stop and start it
	lockFile  string     // flock'd: shared by users, exclusive by restarters
	exclusive bool       // this test holds lockFile exclusively
	stopped   bool       // Stop ran and Start has not yet
	// stoppedCleanup: the cleanup that starts a broker left stopped is
	// registered.
	stoppedCleanup bool
}

// controller is one broker's way of being stopped and started again with
// its data kept.
type controller interface {
	// usable returns "" when stop and start can work, else why not.
	usable() string
	stop(t testing.TB)
	start(t testing.TB)
	// version asks the broker's own command-line tool for its version.
	version() (string, error)
}

// spec is a broker as the environment describes it, before any check.
type spec struct {
	b       Broker
	missing string // non-empty: not configured, and why
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// specs returns the brokers of the matrix, RabbitMQ first.
func specs() []spec {
	rabbit := spec{b: Broker{
		Name: NameRabbitMQ, Product: broker.RabbitMQ,
		MgmtURL:  envOr(EnvMgmt, "http://127.0.0.1:15672"),
		AMQPURL:  envOr(EnvAMQP, "amqp://127.0.0.1:5672"),
		User:     envOr(EnvUser, "guest"),
		Password: envOr(EnvPassword, "guest"),
		ctl:      rabbitmqctl{},
		// The lock file RabbitMQ tests have always used, so tests of
		// older checkouts on the same machine still wait for a restart.
		lockFile: filepath.Join(os.TempDir(), "fleetmgr-test-broker.lock"),
	}}
	lav := spec{b: Broker{
		Name: NameLavinMQ, Product: broker.LavinMQ, Optional: true,
		MgmtURL:  os.Getenv(EnvLavinMQMgmt),
		AMQPURL:  os.Getenv(EnvLavinMQAMQP),
		User:     envOr(EnvLavinMQUser, "guest"),
		Password: envOr(EnvLavinMQPassword, "guest"),
	}}
	switch {
	case lav.b.MgmtURL == "" || lav.b.AMQPURL == "":
		lav.missing = lavinmqHowTo
	default:
		lc, err := lavinmqFromEnv(lav.b.MgmtURL, lav.b.AMQPURL)
		if err != nil {
			lav.missing = err.Error()
			break
		}
		lav.b.ctl = lc
		// Beside the data dir when known, so it goes with it at exit.
		lav.b.lockFile = filepath.Join(os.TempDir(), fmt.Sprintf("fleetmgr-test-lavinmq-%d.lock", lc.amqpPort))
		if lc.dataDir != "" {
			lav.b.lockFile = filepath.Join(filepath.Dir(lc.dataDir), "test.lock")
		}
	}
	return []spec{rabbit, lav}
}

// Each runs f once per broker, each in a subtest named after it
// ("rabbitmq", "lavinmq"), so every failure is reported under the
// broker's name. A broker that is not usable fails its subtest under CI
// (CI set to anything non-empty) and skips it otherwise, with the reason.
// f holds a shared lock on its broker: a test that stops it
// (EachExclusive) waits for f to end, across test binaries.
func Each(t *testing.T, f func(t *testing.T, b *Broker)) {
	t.Helper()
	each(t, false, f)
}

// EachExclusive is Each with the broker's lock held exclusively: for a
// test that stops and starts the broker (Stop, Start, Restart) while no
// other test uses it.
func EachExclusive(t *testing.T, f func(t *testing.T, b *Broker)) {
	t.Helper()
	each(t, true, f)
}

func each(t *testing.T, exclusive bool, f func(t *testing.T, b *Broker)) {
	t.Helper()
	for _, s := range specs() {
		t.Run(s.b.Name, func(t *testing.T) {
			b := s.b
			b.require(t, s.missing, exclusive)
			f(t, &b)
		})
	}
}

// EachB is Each for benchmarks: f runs once per broker, each in a
// sub-benchmark named after it, with the broker's lock held shared.
func EachB(b *testing.B, f func(b *testing.B, br *Broker)) {
	b.Helper()
	for _, s := range specs() {
		b.Run(s.b.Name, func(b *testing.B) {
			br := s.b
			br.require(b, s.missing, false)
			f(b, &br)
		})
	}
}

// unusable ends the test for a broker that cannot be used: fails under
// CI, skips otherwise.
func (b *Broker) unusable(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf("%s: CI is set, so the broker tests must run against %s too, but: %s", b.Name, b.Product, why)
	}
	t.Skipf("%s: skipped: %s", b.Name, why)
}

// notConfigured ends the test for a broker the environment does not
// name (or names without what a restart needs): an optional broker's
// subtest skips, even under CI; a required one is unusable.
func (b *Broker) notConfigured(t testing.TB, why string) {
	t.Helper()
	if b.Optional {
		t.Skipf("%s: skipped: %s", b.Name, why)
	}
	b.unusable(t, why)
}

// require takes the broker's lock, then checks that it answers as the
// product it should be.
func (b *Broker) require(t testing.TB, missing string, exclusive bool) {
	t.Helper()
	if missing != "" {
		b.notConfigured(t, missing)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
		if why := b.ctl.usable(); why != "" {
			b.notConfigured(t, "this test stops and starts the broker, which needs "+why)
		}
	}
	flock(t, b.lockFile, how)
	b.exclusive = exclusive
	if err := b.reachable(); err != nil {
		hint := fmt.Sprintf("run scripts/test, or set %s/%s/%s/%s to a RabbitMQ with management", EnvMgmt, EnvAMQP, EnvUser, EnvPassword)
		if b.Name == NameLavinMQ {
			hint = fmt.Sprintf("start it, or unset %s and %s to skip the LavinMQ subtests", EnvLavinMQMgmt, EnvLavinMQAMQP)
		}
		b.unusable(t, fmt.Sprintf("no %s reachable (%v); %s", b.Product, err, hint))
	}
	ov, err := b.overview()
	if err != nil {
		t.Fatalf("%s: %v", b.Name, err)
	}
	if name, version := ov.Product(); name != b.Product {
		t.Fatalf("%s: the broker at %s answers as %q %s, not %s: the %s half of the matrix would test the wrong broker; check the FLEETMGR_TEST_* addresses",
			b.Name, b.MgmtURL, name, version, b.Product, b.Name)
	}
}

// flock takes how (unix.LOCK_SH or unix.LOCK_EX) on path for the rest of
// the test, waiting up to 5 minutes.
func flock(t testing.TB, path string, how int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o666)
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
			t.Fatalf("broker test lock %s: %v", path, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() })
}

// overview reads the broker's GET /api/overview with one attempt.
func (b *Broker) overview() (broker.Overview, error) {
	a, err := broker.NewAdmin(b.MgmtURL, b.User, b.Password, broker.AdminOptions{RetryMax: -1, Timeout: 3 * time.Second})
	if err != nil {
		return broker.Overview{}, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return a.Overview(ctx)
}

// reachable checks the management API (with the admin credentials) and the
// AMQP port.
func (b *Broker) reachable() error {
	if _, err := b.overview(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
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
		t.Fatalf("%s: %v", b.Name, err)
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
				t.Logf("%s cleanup: delete vhost %s: %v", b.Name, v, err)
			}
		}
		for _, u := range users {
			if err := a.DeleteUser(ctx, u); err != nil {
				t.Logf("%s cleanup: delete user %s: %v", b.Name, u, err)
			}
		}
	})
}

// Stop stops the broker with its data kept: RabbitMQ's application with
// `rabbitmqctl stop_app` (the Erlang node keeps running), LavinMQ's
// process with SIGTERM. It returns once the broker is down. Only under
// EachExclusive. If the test ends before Start, the broker is started
// again at cleanup.
func (b *Broker) Stop(t testing.TB) {
	t.Helper()
	if !b.exclusive {
		t.Fatalf("%s: Stop outside EachExclusive would pull the broker from under other tests", b.Name)
	}
	if b.stopped {
		t.Fatalf("%s: Stop called twice", b.Name)
	}
	if !b.stoppedCleanup {
		b.stoppedCleanup = true
		t.Cleanup(func() {
			if b.stopped {
				b.Start(t)
			}
		})
	}
	b.ctl.stop(t)
	b.stopped = true
}

// Start starts the broker stopped by Stop again, on the same data
// (RabbitMQ `rabbitmqctl start_app`; LavinMQ the same command line on the
// same data directory), and returns once its management API and AMQP port
// answer (within 60 s).
func (b *Broker) Start(t testing.TB) {
	t.Helper()
	if !b.stopped {
		t.Fatalf("%s: Start without Stop", b.Name)
	}
	b.ctl.start(t)
	b.stopped = false
	b.waitReachable(t, 60*time.Second)
}

// Restart is Stop then Start.
func (b *Broker) Restart(t testing.TB) {
	t.Helper()
	b.Stop(t)
	b.Start(t)
}

// waitReachable polls the management API and AMQP until both answer or d
// passes.
func (b *Broker) waitReachable(t testing.TB, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		if last = b.reachable(); last == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s not back within %s: %v", b.Name, d, last)
}

// ToolVersion returns the version the broker's own command-line tool
// reports (`rabbitmqctl version`, `lavinmq --version`): a second source
// for what its management API says. ok is false when the tool is not
// available (the reason is logged).
func (b *Broker) ToolVersion(t testing.TB) (version string, ok bool) {
	t.Helper()
	if b.ctl == nil {
		t.Logf("%s: no command-line tool known", b.Name)
		return "", false
	}
	v, err := b.ctl.version()
	if err != nil {
		t.Logf("%s: no version from its command-line tool: %v", b.Name, err)
		return "", false
	}
	return v, true
}

// String describes the broker for logs (no password).
func (b *Broker) String() string {
	return fmt.Sprintf("%s: management %s, AMQP %s, admin %s", b.Name, b.MgmtURL, b.AMQPURL, b.User)
}

// lastLines returns the last n lines of s at most, for messages.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
