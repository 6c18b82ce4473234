// Package membership is fleetmgr serve's membership of the federation
// (docs/FEDERATION.md): this host's key and broker password, its
// provisioning on the broker (retried while the broker does not answer),
// the federation.Federation runtime started and stopped (this host
// announced offline at a clean stop), and the view, requests and calls
// the proxy reaches other hosts through (Membership has proxy.Remote's
// methods). The serve daemon makes one when fleets.toml has a
// [federation] table.
package membership

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/identity"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/registry"
)

// Membership is serve's membership of the federation, made by New when
// fleets.toml has a [federation] table: the host's key, its broker user,
// the federation.Federation runtime, and the proxy.Remote the proxy shows
// other hosts' fleets and sends NAME@HOST verbs through. Its Run goroutine provisions the host on the broker
// (retrying while the broker does not answer: local fleets are served
// meanwhile), starts the runtime, and on serve's clean stop announces this
// host offline.
type Membership struct {
	cfg      *registry.Federation
	fed      *federation.Federation
	admin    func() (*broker.Admin, error) // the broker administrator (lifecycle.Manager.BrokerAdmin)
	log      *slog.Logger
	password string
	pub      ed25519.PublicKey // this host's public key, recorded on its broker user
	takeOver bool              // --take-over-host: provisioning may replace another key's registration of this host id

	mu      sync.Mutex
	prot    *federation.Protections // guarded by mu: what provisioning found; nil until it succeeded
	provErr error                   // guarded by mu: the last provisioning failure
	subs    []chan struct{}         // guarded by mu: Changes' subscribers
}

// Parts are what the runtime calls back into: the proxy's Source
// (presence), Executor (peers' requests) and CallHandler (peers' tool
// calls and catalogues), set once the proxy exists (before Run).
type Parts struct {
	Source   federation.Source
	Executor federation.Executor
	Calls    federation.CallHandler
}

// partsCalls is the runtime's CallHandler: parts.Calls once the proxy
// exists (it always does before Run starts the runtime).
type partsCalls struct{ parts *Parts }

// Call implements federation.CallHandler.
func (c partsCalls) Call(ctx context.Context, from, fleet, tool string, args, meta json.RawMessage, progress func(json.RawMessage)) (json.RawMessage, error) {
	if c.parts.Calls == nil {
		return nil, fmt.Errorf("this host is not ready to serve tool calls yet")
	}
	return c.parts.Calls.Call(ctx, from, fleet, tool, args, meta, progress)
}

// Catalogue implements federation.CallHandler.
func (c partsCalls) Catalogue(ctx context.Context, from, fleet string) (json.RawMessage, string, error) {
	if c.parts.Calls == nil {
		return nil, "", fmt.Errorf("this host is not ready to serve catalogues yet")
	}
	return c.parts.Calls.Catalogue(ctx, from, fleet)
}

// New loads (or creates) this host's key and its broker password and
// builds the federation runtime, not started yet (Run starts it). Its Source, Executor and Calls are parts' fields, read at
// each call, so the proxy built after it can fill them in before Run.
// admin gives the broker administrator provisioning uses. It
// returns nil without [federation]. A key file or password file that is
// refused (readable by others, not a regular file) fails serve, naming
// the file.
func New(cfg *registry.Config, admin func() (*broker.Admin, error), parts *Parts, reg prometheus.Registerer, takeOver bool, onRefused func(federation.Refused), log *slog.Logger) (*Membership, error) {
	fc := cfg.Federation
	if fc == nil {
		return nil, nil
	}
	if cfg.Broker == nil { // registry refuses this; kept for a Config built by hand
		return nil, fmt.Errorf("%s: [federation] needs a [broker] table", cfg.Path)
	}
	key, created, err := identity.LoadOrCreateKey(fc.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("[federation] key_file in %s: %w", cfg.Path, err)
	}
	pw, err := federation.HostPassword(cfg.Manager.StateDir)
	if err != nil {
		return nil, fmt.Errorf("federation broker password in %s: %w", cfg.Manager.StateDir, err)
	}
	uri, err := broker.VhostURI(cfg.Broker.AMQPURL, federation.BrokerUser(fc.Host), pw, fc.Vhost)
	if err != nil {
		return nil, fmt.Errorf("%s: [broker] amqp_url: %w", cfg.Path, err)
	}
	var h *Membership
	fed, err := federation.New(federation.Config{
		Host: fc.Host, Key: key, Trust: fc.Peers, URI: uri, StateDir: cfg.Manager.StateDir,
		Heartbeat: fc.Heartbeat.Duration, ControlTimeout: fc.ControlTimeout.Duration,
		Source: federation.SourceFunc(func(ctx context.Context) []wire.FleetSummary {
			if parts.Source == nil {
				return nil
			}
			return parts.Source.LocalFleets(ctx)
		}),
		Executor: federation.ExecutorFunc(func(ctx context.Context, from, verb, fleet string, args json.RawMessage) (json.RawMessage, error) {
			if parts.Executor == nil {
				return nil, fmt.Errorf("host %s is not ready to run requests yet", fc.Host)
			}
			return parts.Executor.Control(ctx, from, verb, fleet, args)
		}),
		Calls: partsCalls{parts},
		// The broker refused this host's user: provision it again (h is
		// set below, before the runtime starts).
		Reprovision: func(ctx context.Context) error { return h.provision(ctx) },
		OnRefused:   onRefused,
		Log:         log,
	})
	if err != nil {
		return nil, err
	}
	if reg != nil {
		for _, c := range fed.Metrics().Collectors() {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("federation metrics: %w", err)
			}
		}
	}
	h = &Membership{cfg: fc, fed: fed, admin: admin, log: log, password: pw, pub: identity.PublicKey(key), takeOver: takeOver}
	if created {
		log.Info("federation: created this host's key; add its trust line to each peer's [federation] trust",
			"key_file", fc.KeyFile, "trust_line", fed.TrustLine())
	}
	return h, nil
}

// Run provisions this host on the broker (federation.Provision with the
// administrator's credentials; retried with backoff, 1 s doubling to
// 30 s, while it fails; not retried when refused because the host id is
// registered with another key: that takes the operator, whom the error
// and the status tell what to do), starts the runtime, relays its Changes to every
// subscriber, and when ctx ends stops it: this host is announced offline
// and requests being run are waited for (at most 5 s).
func (h *Membership) Run(ctx context.Context) {
	backoff := time.Second
	for {
		err := h.provision(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		if conflict := (*federation.KeyConflictError)(nil); errors.As(err, &conflict) {
			h.log.Error("federation: refused to provision this host: its id is registered on the broker with another key; federation stays off until serve is restarted (local fleets are served)",
				"host", h.cfg.Host, "reason", "host_key_conflict", "registered_key", identity.FormatPublicKey(conflict.Registered),
				"own_key", identity.FormatPublicKey(conflict.Own), "err", err)
			return
		}
		h.log.Warn("federation: provisioning this host on the broker failed; retrying", "host", h.cfg.Host, "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
	if err := h.fed.Start(ctx); err != nil {
		h.log.Error("federation: not started", "err", err)
		return
	}
	for {
		select {
		case <-ctx.Done():
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			if err := h.fed.Stop(sctx); err != nil {
				h.log.Warn("federation: stop", "err", err)
			}
			cancel()
			h.log.Info("federation: left (offline announced)", "host", h.cfg.Host)
			return
		case <-h.fed.Changes():
			h.mu.Lock()
			for _, c := range h.subs {
				select {
				case c <- struct{}{}:
				default:
				}
			}
			h.mu.Unlock()
		}
	}
}

// provision runs federation.Provision once and records its outcome.
func (h *Membership) provision(ctx context.Context) error {
	admin, err := h.admin()
	if err == nil {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var prot federation.Protections
		prot, err = federation.Provision(pctx, admin, federation.ProvisionOptions{Vhost: h.cfg.Vhost, Host: h.cfg.Host, Password: h.password,
			Key: h.pub, TakeOver: h.takeOver})
		cancel()
		if err == nil {
			h.mu.Lock()
			h.prot, h.provErr = &prot, nil
			h.mu.Unlock()
			outcome := "ok"
			if prot.Replaced != nil {
				outcome = "took_over"
				h.log.Warn("federation: took over this host id from another key (--take-over-host): the manager holding that key is locked out of the broker; give peers this host's new trust line",
					"host", h.cfg.Host, "replaced_key", identity.FormatPublicKey(prot.Replaced), "trust_line", h.fed.TrustLine())
			}
			h.fed.Metrics().Provisioning.WithLabelValues(outcome).Inc()
			h.log.Info("federation: host provisioned on the broker", "host", h.cfg.Host, "vhost", h.cfg.Vhost,
				"user", federation.BrokerUser(h.cfg.Host), "protections", prot.String())
			return nil
		}
	}
	if conflict := (*federation.KeyConflictError)(nil); errors.As(err, &conflict) {
		h.fed.Metrics().Provisioning.WithLabelValues("key_conflict").Inc()
	}
	h.mu.Lock()
	h.provErr = err
	h.mu.Unlock()
	return err
}

// Protections returns what provisioning found in force on the broker;
// false until it succeeded.
func (h *Membership) Protections() (federation.Protections, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.prot == nil {
		return federation.Protections{}, false
	}
	return *h.prot, true
}

// Host implements proxy.Remote.
func (h *Membership) Host() string { return h.cfg.Host }

// View implements proxy.Remote.
func (h *Membership) View() []federation.HostView { return h.fed.View() }

// Control implements proxy.Remote.
func (h *Membership) Control(ctx context.Context, host, verb, fleet string, args json.RawMessage) (json.RawMessage, error) {
	return h.fed.Control(ctx, host, verb, fleet, args)
}

// Changes implements proxy.Remote: each call subscribes anew (a channel
// of capacity 1, signalled coalesced at every change of the view), so
// every consumer calls it once and keeps the channel.
func (h *Membership) Changes() <-chan struct{} {
	c := make(chan struct{}, 1)
	h.mu.Lock()
	h.subs = append(h.subs, c)
	h.mu.Unlock()
	return c
}

// Call implements proxy.Remote.
func (h *Membership) Call(ctx context.Context, host, fleet, tool string, args json.RawMessage, o federation.CallOptions) (json.RawMessage, error) {
	return h.fed.Call(ctx, host, fleet, tool, args, o)
}

// Catalogue implements proxy.Remote.
func (h *Membership) Catalogue(ctx context.Context, host, fleet string) (json.RawMessage, string, error) {
	return h.fed.Catalogue(ctx, host, fleet)
}

// Status implements proxy.Remote: the runtime's connection state; before
// provisioning succeeded, LastError says why it has not yet.
func (h *Membership) Status() federation.Status {
	st := h.fed.Status()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.prot == nil && st.LastError == "" {
		st.LastError = "not provisioned on the broker yet"
		if h.provErr != nil {
			st.LastError = "provisioning: " + h.provErr.Error()
		}
	}
	return st
}

// Runtime is the federation runtime itself (tests, the benchmark).
func (h *Membership) Runtime() *federation.Federation { return h.fed }

// KeyInfo is `fleetmgr federation key`'s answer (its --json).
type KeyInfo struct {
	// Host is this manager's host id ([federation] host).
	Host string `json:"host"`
	// Key is the public key, "ed25519:BASE64".
	Key string `json:"key"`
	// TrustLine is "HOST ed25519:BASE64": what each peer adds to its
	// [federation] trust.
	TrustLine string `json:"trust_line"`
	// KeyFile is the private key's file; Created is true when this call
	// made it.
	KeyFile string `json:"key_file"`
	Created bool   `json:"created"`
}

// Key returns the trust line of the host fc names, creating its key file
// (0600) when there is none yet (identity.LoadOrCreateKey); path is the
// configuration's file, for the error.
func Key(fc *registry.Federation, path string) (*KeyInfo, error) {
	key, created, err := identity.LoadOrCreateKey(fc.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("[federation] key_file in %s: %w", path, err)
	}
	pub := identity.PublicKey(key)
	return &KeyInfo{Host: fc.Host, Key: identity.FormatPublicKey(pub), TrustLine: identity.FormatTrustLine(fc.Host, pub, identity.CapAll),
		KeyFile: fc.KeyFile, Created: created}, nil
}
