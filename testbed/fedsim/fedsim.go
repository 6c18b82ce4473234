// Package fedsim is test equipment: it simulates N federated managers
// against a real broker and measures what one observing manager sees
// (docs/FEDERATION.md "Benchmark"): how long its union view takes to converge, how
// long a killed host takes to expire, the observer's CPU and RSS, and the
// broker's message rates. Nothing in the product imports it.
//
// Each simulated host is a real federation.Federation in this process,
// with its own key, broker user, connection and F fleets; they consume
// and verify everyone's presence, as real managers would. The observer
// runs in a process of its own (Options.ObserverExec, normally this
// command re-executed with "observe"), so its CPU and RSS are its alone;
// a real `fleetmgr serve` can take its place later.
package fedsim

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	amqp "github.com/rabbitmq/amqp091-go"
	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// Options are a run's parameters.
type Options struct {
	// MgmtURL, AMQPURL, AdminUser and AdminPassword reach the broker.
	MgmtURL, AMQPURL, AdminUser, AdminPassword string
	// Hosts is N, the simulated managers; Fleets the fleets of each.
	Hosts, Fleets int
	// Heartbeat of every manager.
	Heartbeat time.Duration
	// Window is the steady-state measurement window (CPU, rates).
	Window time.Duration
	// Full makes each simulated host a whole federation.Federation that
	// verifies everyone's presence (N² verifications in this process);
	// otherwise a host is light: its own connection, key and roster queue
	// (so the broker's fan-out is the same), signed presence every beat,
	// and a consumer that discards what it gets unread.
	Full bool
	// Idle makes light hosts not consume their roster queues: the broker
	// still routes every beat into every queue (where it expires after 3
	// beats), but nothing is delivered to them — the broker's delivery
	// work and this process's reading are left out, to see the observer
	// without them on a small machine.
	Idle bool
	// ObserverExec is the observer's argv prefix; "observe CONFIG" is
	// appended. Required unless Serve is set.
	ObserverExec []string
	// Serve, when set, is the fleetmgr binary whose `serve` is the
	// observer instead (a real daemon with [broker] and [federation]: its
	// view read over MCP while converging and expiring, never during the
	// window; see startServeObserver). HerdrBin is its [manager]
	// herdr_bin (the stand-in will do: it serves no fleet).
	Serve, HerdrBin string
	// Log receives progress; nil discards.
	Log *slog.Logger
}

// Result holds one run's figures.
type Result struct {
	Hosts, Fleets int
	Heartbeat     time.Duration
	// Provision is how long provisioning the N+1 broker users took.
	Provision time.Duration
	// ColdStart is from starting the N simulated hosts together to all
	// connected.
	ColdStart time.Duration
	// Converge is from the observer's connection to its view holding
	// every host online with all its fleets.
	Converge time.Duration
	// Expire is from killing one host's connection to the observer
	// showing it expired; ExpireAfterLastBeat from that host's last beat
	// (as the observer received it).
	Expire, ExpireAfterLastBeat time.Duration
	// ObserverCPU is the observer's CPU use over Window as a percentage
	// of one core; ObserverRSSMB its resident set at the end of the
	// window and ObserverPeakMB its peak.
	ObserverCPU float64
	// PresenceAgeP50 and PresenceAgeP99 are the observer's presence age
	// (arrival minus issued) over the run.
	PresenceAgeP50, PresenceAgeP99 time.Duration
	ObserverRSSMB, ObserverPeak    float64
	// PublishRate and DeliverRate are the vhost's messages per second
	// over Window, from the management API's counters.
	PublishRate, DeliverRate float64
	// Window is how long was measured.
	Window time.Duration
	// Flaps counts hosts the observer showed expired while they were
	// alive (during the window, before the kill): beats that arrived
	// more than 3 heartbeats apart.
	Flaps int
}

// observerConfig is what the parent hands the observer process.
type observerConfig struct {
	Host      string   `json:"host"`
	KeyFile   string   `json:"key_file"`
	StateDir  string   `json:"state_dir"`
	URI       string   `json:"uri"`
	Trust     []string `json:"trust"`
	Heartbeat string   `json:"heartbeat"`
	Fleets    int      `json:"fleets"`
}

// event is one line the observer prints.
type event struct {
	Event string `json:"event"`
	Host  string `json:"host,omitempty"`
	// SinceLastSeenMS is, for "expired", the time from the host's last
	// beat to the expiry, on the observer's clock.
	SinceLastSeenMS int64  `json:"since_last_seen_ms,omitempty"`
	Online          int    `json:"online,omitempty"`
	Err             string `json:"err,omitempty"`
	// AgeP50MS and AgeP99MS ("age") are bucket bounds of the observer's
	// presence age so far.
	AgeP50MS float64 `json:"age_p50_ms,omitempty"`
	AgeP99MS float64 `json:"age_p99_ms,omitempty"`
}

// simHost is one simulated manager.
type simHost struct {
	id, password string
	key          ed25519.PrivateKey
	net          *killSwitch
	fed          *federation.Federation // full mode
	cancel       context.CancelFunc     // light mode
	conn         *amqp.Connection       // light mode
}

// stop ends the host (a full one announces offline).
func (h *simHost) stop() {
	if h.fed != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = h.fed.Stop(ctx)
	}
	if h.cancel != nil {
		h.cancel()
	}
	if h.conn != nil {
		_ = h.conn.Close()
	}
}

// startLight connects a light host: its own roster queue, drained unread,
// and signed presence every heartbeat until stop or kill.
func (h *simHost) startLight(ctx context.Context, uri string, hb time.Duration, fleets []wire.FleetSummary, consume bool, wg *sync.WaitGroup) error {
	conn, err := amqp.DialConfig(uri, amqp.Config{Heartbeat: 10 * time.Second, Dial: h.net.dial})
	if err != nil {
		return fmt.Errorf("%s: %w", h.id, err)
	}
	h.conn = conn
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	q := federation.RosterQueue(h.id)
	if _, err := ch.QueueDeclare(q, false, true, true, false, amqp.Table{"x-max-length": int64(federation.RosterMaxLength)}); err != nil {
		return fmt.Errorf("%s: %w", h.id, err)
	}
	if err := ch.QueueBind(q, "roster.#", federation.ExchangeRoster, false, nil); err != nil {
		return fmt.Errorf("%s: %w", h.id, err)
	}
	ds := make(<-chan amqp.Delivery)
	if consume {
		if ds, err = ch.Consume(q, "", true, true, false, false, nil); err != nil {
			return fmt.Errorf("%s: %w", h.id, err)
		}
	}
	body, _ := json.Marshal(&wire.Presence{HeartbeatMS: hb.Milliseconds(), StartedMS: time.Now().UnixMilli(), Fleets: fleets})
	hctx, cancel := context.WithCancel(ctx)
	h.cancel = cancel
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case _, ok := <-ds:
				if !ok {
					return
				}
			case <-hctx.Done():
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		t := time.NewTicker(hb)
		defer t.Stop()
		for {
			now := time.Now()
			env := &wire.Envelope{Kind: wire.KindPresence, ID: wire.NewID(), From: h.id, To: wire.Broadcast,
				Issued: now, Expires: now.Add(federation.ExpiryBeats * hb), Body: body}
			hdr, err := wire.Seal(env, h.key)
			if err == nil {
				err = ch.PublishWithContext(hctx, federation.ExchangeRoster, federation.RosterKey(h.id), false, false,
					amqp.Publishing{Headers: amqp.Table(hdr), ContentType: "application/json", Body: body,
						Expiration: strconv.FormatInt((federation.ExpiryBeats * hb).Milliseconds(), 10)})
			}
			if err != nil {
				return // killed or stopped
			}
			select {
			case <-hctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// Run performs one measurement: provision N+1 hosts on a fresh vhost,
// start the N simulated hosts, start the observer, measure convergence,
// a steady window and the expiry of one killed host, and clean up (vhost
// and users deleted).
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Hosts < 1 || o.Fleets < 0 || o.Heartbeat <= 0 || len(o.ObserverExec) == 0 && o.Serve == "" {
		return nil, errors.New("fedsim: need Hosts ≥ 1, Fleets ≥ 0, a heartbeat and ObserverExec or Serve")
	}
	admin, err := broker.NewAdmin(o.MgmtURL, o.AdminUser, o.AdminPassword, broker.AdminOptions{})
	if err != nil {
		return nil, err
	}
	tag := randHex(3)
	vhost := "fedsim-" + tag
	dir, err := os.MkdirTemp("", "fedsim-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	res := &Result{Hosts: o.Hosts, Fleets: o.Fleets, Heartbeat: o.Heartbeat}

	hosts := make([]*simHost, o.Hosts+1) // the last is the observer
	for i := range hosts {
		id := fmt.Sprintf("s%s-%03d", tag, i)
		if i == o.Hosts {
			id = "obs-" + tag
		}
		hosts[i] = &simHost{id: id, net: &killSwitch{}}
	}
	var users []string
	for _, h := range hosts {
		users = append(users, federation.BrokerUser(h.id))
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if _, err := admin.DeleteVhost(cctx, vhost); err != nil {
			o.Log.Warn("cleanup: vhost", "err", err)
		}
		for _, u := range users {
			_ = admin.DeleteUser(cctx, u)
		}
	}()

	// Keys, passwords, provisioning (8 at a time).
	var lines []string
	for _, h := range hosts {
		hdir := filepath.Join(dir, h.id)
		k, _, err := identity.LoadOrCreateKey(filepath.Join(hdir, "federation.key"))
		if err != nil {
			return nil, err
		}
		h.key = k
		if h.password, err = federation.HostPassword(hdir); err != nil {
			return nil, err
		}
		lines = append(lines, identity.FormatTrustLine(h.id, identity.PublicKey(k), identity.CapAll))
	}
	t0 := time.Now()
	if err := parallel(8, len(hosts), func(i int) error {
		_, err := federation.Provision(ctx, admin, federation.ProvisionOptions{Vhost: vhost, Host: hosts[i].id, Password: hosts[i].password, Key: identity.PublicKey(hosts[i].key)})
		return err
	}); err != nil {
		return nil, err
	}
	res.Provision = time.Since(t0)
	o.Log.Info("provisioned", "hosts", len(hosts), "took", res.Provision)
	trust, err := identity.ParseTrust(lines)
	if err != nil {
		return nil, err
	}

	// The simulated hosts, started together.
	fleets := make([]wire.FleetSummary, o.Fleets)
	for i := range fleets {
		fleets[i] = wire.FleetSummary{Name: fmt.Sprintf("fleet%02d", i), State: "running", UptimeS: 3600, Members: 8,
			Verdicts: map[string]int{"WORKING": 5, "IDLE": 2, "STALLED": 1}, Catalogue: strings.Repeat("c", 64)}
	}
	src := federation.SourceFunc(func(context.Context) []wire.FleetSummary { return fleets })
	exec0 := federation.ExecutorFunc(func(context.Context, string, string, string, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`{}`), nil
	})
	t0 = time.Now()
	var wg sync.WaitGroup
	defer func() {
		// Stop every simulated host at once (a stop waits for its
		// offline's confirm).
		var sw sync.WaitGroup
		for _, h := range hosts[:o.Hosts] {
			sw.Add(1)
			go func() { defer sw.Done(); h.stop() }()
		}
		sw.Wait()
		wg.Wait()
	}()
	err = parallel(16, o.Hosts, func(i int) error {
		h := hosts[i]
		uri, err := broker.VhostURI(o.AMQPURL, federation.BrokerUser(h.id), h.password, vhost)
		if err != nil {
			return err
		}
		if !o.Full {
			return h.startLight(ctx, uri, o.Heartbeat, fleets, !o.Idle, &wg)
		}
		f, err := federation.New(federation.Config{Host: h.id, Key: h.key, Trust: trust, URI: uri, Dial: h.net.dial,
			StateDir: filepath.Join(dir, h.id), Heartbeat: o.Heartbeat, Source: src, Executor: exec0})
		if err != nil {
			return err
		}
		if err := f.Start(ctx); err != nil {
			return err
		}
		h.fed = f
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := f.WaitConnected(wctx); err != nil {
			return fmt.Errorf("%s: %w", h.id, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	res.ColdStart = time.Since(t0)
	o.Log.Info("simulated hosts connected", "n", o.Hosts, "took", res.ColdStart)

	// The observer: a process of its own (this package's Observe, or a
	// real `fleetmgr serve` with Options.Serve).
	ob := hosts[o.Hosts]
	uri, err := broker.VhostURI(o.AMQPURL, federation.BrokerUser(ob.id), ob.password, vhost)
	if err != nil {
		return nil, err
	}
	var obs *observer
	if o.Serve != "" {
		obs, err = startServeObserver(ctx, o, ob.id, filepath.Join(dir, ob.id), vhost, lines)
	} else {
		obs, err = startObserver(ctx, o, observerConfig{Host: ob.id, KeyFile: filepath.Join(dir, ob.id, "federation.key"), StateDir: filepath.Join(dir, ob.id),
			URI: uri, Trust: lines, Heartbeat: o.Heartbeat.String(), Fleets: o.Fleets}, dir)
	}
	if err != nil {
		return nil, err
	}
	defer obs.stop()
	events := obs.events
	wait := func(what string, d time.Duration, match func(e event) bool) (event, time.Time, error) {
		timer := time.NewTimer(d)
		defer timer.Stop()
		for {
			select {
			case e, ok := <-events:
				if !ok {
					return event{}, time.Time{}, fmt.Errorf("observer exited while waiting for %s", what)
				}
				if e.Event == "error" {
					return event{}, time.Time{}, fmt.Errorf("observer: %s", e.Err)
				}
				if e.Event == "age" {
					res.PresenceAgeP50 = time.Duration(e.AgeP50MS * float64(time.Millisecond))
					res.PresenceAgeP99 = time.Duration(e.AgeP99MS * float64(time.Millisecond))
				}
				if match(e) {
					return e, time.Now(), nil
				}
			case <-timer.C:
				return event{}, time.Time{}, fmt.Errorf("observer: no %s within %s", what, d)
			case <-ctx.Done():
				return event{}, time.Time{}, ctx.Err()
			}
		}
	}
	_, connAt, err := wait("connection", time.Minute, func(e event) bool { return e.Event == "connected" })
	if err != nil {
		return nil, err
	}
	_, convAt, err := wait("convergence", time.Minute, func(e event) bool { return e.Event == "converged" })
	if err != nil {
		return nil, err
	}
	res.Converge = convAt.Sub(connAt)
	o.Log.Info("observer converged", "took", res.Converge)

	// Steady state. Expiries seen from here on, before the kill, are
	// flaps: beats arriving more than 3 heartbeats apart.
	flaps := 0
	countFlaps := func() {
		for {
			select {
			case e, ok := <-events:
				if !ok {
					return
				}
				if e.Event == "expired" {
					flaps++
				}
				if e.Event == "age" {
					res.PresenceAgeP50 = time.Duration(e.AgeP50MS * float64(time.Millisecond))
					res.PresenceAgeP99 = time.Duration(e.AgeP99MS * float64(time.Millisecond))
				}
			default:
				return
			}
		}
	}
	pid := obs.pid
	cpu0, _ := procCPU(pid)
	st0, _ := vhostStats(ctx, o, vhost)
	w0 := time.Now()
	select {
	case <-time.After(o.Window):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	countFlaps()
	cpu1, _ := procCPU(pid)
	st1, _ := vhostStats(ctx, o, vhost)
	res.Window = time.Since(w0)
	res.ObserverCPU = 100 * (cpu1 - cpu0).Seconds() / res.Window.Seconds()
	res.ObserverRSSMB, res.ObserverPeak = procRSS(pid)
	if obs.ages != nil {
		res.PresenceAgeP50, res.PresenceAgeP99 = obs.ages()
	}
	res.PublishRate = float64(st1.publish-st0.publish) / res.Window.Seconds()
	res.DeliverRate = float64(st1.deliver-st0.deliver) / res.Window.Seconds()

	// Kill one host: its TCP connection closes, no offline is sent.
	victim := hosts[0]
	countFlaps()
	res.Flaps = flaps
	if obs.arm != nil {
		obs.arm()
	}
	killAt := time.Now()
	victim.net.kill()
	if h := victim; h.cancel != nil {
		h.cancel()
	}
	e, expAt, err := wait("expiry of "+victim.id, time.Duration(federation.ExpiryBeats+3)*o.Heartbeat+10*time.Second,
		func(e event) bool { return e.Event == "expired" && e.Host == victim.id })
	if err != nil {
		return nil, err
	}
	res.Expire = expAt.Sub(killAt)
	res.ExpireAfterLastBeat = time.Duration(e.SinceLastSeenMS) * time.Millisecond
	return res, nil
}

// Observe is the observer process: it joins with the config at cfgPath,
// prints "connected", then "converged" once every trusted host is online
// with its fleets, then "expired" for each host that expires; it stops
// (announcing offline) when stdin closes.
func Observe(cfgPath string, out io.Writer) error {
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		return err
	}
	var cfg observerConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return err
	}
	emit := func(e event) {
		b, _ := json.Marshal(e)
		fmt.Fprintf(out, "%s\n", b)
	}
	key, err := identity.LoadKey(cfg.KeyFile)
	if err != nil {
		return err
	}
	trust, err := identity.ParseTrust(cfg.Trust)
	if err != nil {
		return err
	}
	hb, err := time.ParseDuration(cfg.Heartbeat)
	if err != nil {
		return err
	}
	f, err := federation.New(federation.Config{Host: cfg.Host, Key: key, Trust: trust, URI: cfg.URI, StateDir: cfg.StateDir,
		Heartbeat: hb, Source: federation.SourceFunc(func(context.Context) []wire.FleetSummary { return nil }),
		Executor: federation.ExecutorFunc(func(context.Context, string, string, string, json.RawMessage) (json.RawMessage, error) {
			return nil, errors.New("observer")
		})})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	if err := f.Start(ctx); err != nil {
		return err
	}
	defer f.Stop(context.Background())
	if err := f.WaitConnected(ctx); err != nil {
		emit(event{Event: "error", Err: err.Error()})
		return err
	}
	emit(event{Event: "connected"})
	want := len(trust.Hosts()) - 1 // every trusted host but itself
	converged := false
	expired := map[string]bool{}
	lastAge := time.Now()
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		online := 0
		for _, hv := range f.View() {
			if hv.Online && len(hv.Fleets) == cfg.Fleets {
				online++
			}
			// Report each transition to expired (a host whose beats
			// arrive too late flaps: expired, online, expired …).
			if hv.State == federation.HostExpired && !expired[hv.Host] {
				emit(event{Event: "expired", Host: hv.Host, SinceLastSeenMS: time.Since(hv.LastSeen).Milliseconds()})
			}
			expired[hv.Host] = hv.State == federation.HostExpired
		}
		if !converged && online == want {
			converged = true
			emit(event{Event: "converged", Online: online})
		}
		if time.Since(lastAge) > time.Second {
			lastAge = time.Now()
			p50, p99 := quantiles(f.Metrics().PresenceAge)
			emit(event{Event: "age", AgeP50MS: p50 * 1000, AgeP99MS: p99 * 1000})
		}
	}
}

// quantiles returns the upper bounds of the buckets holding the 50th and
// 99th percentiles of h.
func quantiles(h prometheus.Histogram) (p50, p99 float64) {
	var m dto.Metric
	if h.Write(&m) != nil || m.Histogram == nil {
		return 0, 0
	}
	n := float64(m.Histogram.GetSampleCount())
	p50, p99 = -1, -1
	for _, b := range m.Histogram.Bucket {
		c := float64(b.GetCumulativeCount())
		if p50 < 0 && c >= 0.5*n {
			p50 = b.GetUpperBound()
		}
		if p99 < 0 && c >= 0.99*n {
			p99 = b.GetUpperBound()
		}
	}
	return max(p50, 0), max(p99, 0)
}

// killSwitch is a dialer whose connections can be closed at once.
type killSwitch struct {
	mu    sync.Mutex
	conns []net.Conn
	dead  bool
}

func (k *killSwitch) dial(network, addr string) (net.Conn, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		return nil, errors.New("killed")
	}
	c, err := net.DialTimeout(network, addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	k.conns = append(k.conns, c)
	return c, nil
}

func (k *killSwitch) kill() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dead = true
	for _, c := range k.conns {
		_ = c.Close()
	}
}

// parallel runs fn(0..n-1) with at most w at once; the first error wins.
func parallel(w, n int, fn func(i int) error) error {
	sem := make(chan struct{}, w)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return first
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// procCPU returns utime+stime of pid.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("bad stat")
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 13 {
		return 0, errors.New("short stat")
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(u+st) * time.Second / hz, nil
}

// procRSS returns VmRSS and VmHWM of pid in MiB.
func procRSS(pid int) (rss, peak float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			rss = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return rss, peak
}

type stats struct{ publish, deliver int64 }

// vhostStats reads the vhost's message counters (GET /api/vhosts/{vhost}):
// RabbitMQ refreshes them every few seconds, so windows should be long.
func vhostStats(ctx context.Context, o Options, vhost string) (stats, error) {
	u, err := url.Parse(strings.TrimSuffix(o.MgmtURL, "/") + "/api/vhosts/" + url.PathEscape(vhost))
	if err != nil {
		return stats{}, err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	req.SetBasicAuth(o.AdminUser, o.AdminPassword)
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return stats{}, err
	}
	defer resp.Body.Close()
	var v struct {
		MessageStats struct {
			Publish    int64  `json:"publish"`
			DeliverGet *int64 `json:"deliver_get"` // RabbitMQ
			Deliver    int64  `json:"deliver"`     // LavinMQ: deliver + get + get_no_ack
			Get        int64  `json:"get"`
			GetNoAck   int64  `json:"get_no_ack"`
		} `json:"message_stats"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return stats{}, err
	}
	ms := v.MessageStats
	d := ms.Deliver + ms.Get + ms.GetNoAck
	if ms.DeliverGet != nil {
		d = *ms.DeliverGet
	}
	return stats{ms.Publish, d}, nil
}

// LockBroker takes the shared lock the broker tests take
// (testbed/brokertest: $TMPDIR/fleetmgr-test-broker.lock), so a test that
// restarts the broker waits for the run instead of cutting it short. It
// waits up to 5 minutes.
func LockBroker() (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "fleetmgr-test-broker.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		if err == nil {
			return func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("broker lock: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
