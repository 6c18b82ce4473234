package dashboard

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"os"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetmgr/fleetmgr/mcpwire"
)

//go:embed assets
var assetFS embed.FS

// ContentSecurityPolicy is the Content-Security-Policy of every response:
// only this origin's own scripts, styles, images and connections; no
// inline script or style (no 'unsafe-inline'); no plugin, no <base>, forms
// only to this origin, never framed; and Trusted Types required with one
// policy allowed, fleetmgr-worker, which app.js creates to make exactly
// the shared worker's URL (new SharedWorker takes a TrustedScriptURL), so
// an assignment of a string to innerHTML (or any other HTML sink) throws
// instead of parsing markup.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; " +
	"frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types fleetmgr-worker"

// CSRFHeader is the request header carrying the page's CSRF token on
// POST /api/action.
const CSRFHeader = "X-Fleetmgr-Csrf"

// Server is the dashboard: an http.Handler serving the page, its assets
// and its API, and Run, which owns the sampling loops. Build it with New,
// mount it (behind the guard) and run it:
//
//	dash, err := dashboard.New(opts)
//	mux.Handle("/", g.Middleware(dash, pol))
//	go dash.Run(ctx)
//
// Endpoints (every response carries ContentSecurityPolicy, nosniff,
// Referrer-Policy no-referrer and frame denial):
//
//	GET  /                 the page (a fresh CSRF token in a meta tag)
//	GET  /app.js, /worker.js, /app.css, /favicon.svg   embedded assets
//	GET  /api/snapshot     JSON for the first paint: the status report
//	                       (docs/status-schema.json, with the members of the
//	                       newest report serve made for anyone: Observe) and
//	                       the histories
//	GET  /events           Server-Sent Events: snapshot, fleet, report,
//	                       calls, federation; resumable with Last-Event-ID (or
//	                       ?since=ID on the first connection)
//	POST /api/action       {"verb":"start|stop|restart","fleet":NAME,"lead":bool};
//	                       same-origin, JSON, CSRF token; other methods 405
//	GET  /api/logs?fleet=NAME[&fleet=…][&proc=fleetd|herdr]   SSE: each
//	                       fleet's last lines, then appended ones
type Server struct {
	opt    Options
	hub    *hub
	secret []byte // HMAC key of the CSRF tokens, random per Server
	mux    *http.ServeMux
	index  *template.Template
	assets map[string]asset

	refusals *prometheus.CounterVec

	done     chan struct{} // closed when Run ends: streams close
	doneOnce sync.Once

	histMu sync.Mutex // one loadHistory at a time

	actMu    sync.Mutex
	inAction map[string]bool // fleets with an action under way

	eventStreams, logStreams atomic.Int32 // open streams, bounded by max*Streams

	samplings, filesSamplings atomic.Int64 // Status calls; of them, made for a file change (tests read them)
}

// Bounds of the open streams per Server: a page holds one of each, so
// these allow many tabs while a runaway client cannot hold thousands of
// goroutines (each log stream also follows up to maxLogFleets files).
const (
	maxEventStreams = 64
	maxLogStreams   = 16
)

// openStream counts a stream in n unless max are open; false (answered
// 503, logged, counted) when they are.
func (s *Server) openStream(w http.ResponseWriter, r *http.Request, n *atomic.Int32, max int32) bool {
	if n.Add(1) > max {
		n.Add(-1)
		w.Header().Set("Retry-After", "10")
		s.refuse(w, r, http.StatusServiceUnavailable, "too_many_streams", fmt.Sprintf("%d streams of %s are open already", max, r.URL.Path))
		return false
	}
	return true
}

type asset struct {
	body        []byte
	contentType string
	etag        string
}

// New returns a Server. It fails when a required option is missing or the
// refusal counter cannot be registered.
func New(opt Options) (*Server, error) {
	if opt.Status == nil || opt.Rows == nil || opt.Action == nil {
		return nil, errors.New("dashboard.New: Options.Status, Rows and Action are required")
	}
	opt.defaults()
	var rnd [40]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	s := &Server{
		opt:      opt,
		secret:   rnd[:32],
		hub:      newHub(&opt, hex.EncodeToString(rnd[32:]), host),
		done:     make(chan struct{}),
		inAction: map[string]bool{},
		assets:   map[string]asset{},
	}
	s.hub.opt = &s.opt
	s.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetmgr_dashboard_refusals_total",
		Help: "Dashboard requests refused, by reason (method, origin, content_type, csrf, bad_request, busy, unknown_fleet, remote, too_many_streams).",
	}, []string{"reason"})
	if opt.Metrics != nil {
		if err := opt.Metrics.Register(s.refusals); err != nil {
			return nil, fmt.Errorf("dashboard: register metrics: %w", err)
		}
	}
	if err := s.loadAssets(); err != nil {
		return nil, err
	}
	s.mux = http.NewServeMux()
	s.mux.HandleFunc("GET /{$}", s.serveIndex)
	for name := range s.assets {
		s.mux.HandleFunc("GET /"+name, s.serveAsset)
	}
	s.mux.HandleFunc("GET /api/snapshot", s.serveSnapshot)
	s.mux.HandleFunc("GET /events", s.serveEvents)
	s.mux.HandleFunc("/api/action", s.serveAction) // every method: a refused one is logged and counted
	s.mux.HandleFunc("GET /api/logs", s.serveLogs)
	return s, nil
}

// loadAssets reads the embedded files: index.html as a template, the rest
// served as they are with a content-hash ETag.
func (s *Server) loadAssets() error {
	types := map[string]string{".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
	return fs.WalkDir(assetFS, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assetFS.ReadFile(p)
		if err != nil {
			return err
		}
		name := path.Base(p)
		if name == "index.html" {
			s.index, err = template.New(name).Parse(string(b))
			return err
		}
		sum := sha256.Sum256(b)
		s.assets[name] = asset{body: b, contentType: types[path.Ext(name)], etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
}

// ServeHTTP serves the dashboard, with the security headers on every
// response (refusals and 404s included).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", ContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), usb=(), payment=()")
	s.mux.ServeHTTP(w, r)
}

// Run keeps the page's data fresh until ctx ends, but only while a page
// is open (and Linger after); with none open it waits without polling
// anything. It reads the lifecycle rows on every Options.Changes signal
// and every StateEvery; samples members at a cadence between SampleEvery
// and SampleIdle (faster while things change), and at once for a fleet
// that came up, was acted on or whose files changed (Options.Files); and
// reads the call counters every CallsEvery. One member sampling is taken
// at the start so the first page has members to show (Options.Warm, which
// the daemon makes read no resources: nobody looks yet). When ctx ends,
// every open stream is closed (so http.Server.Shutdown is not held up)
// and Run returns once its goroutines have.
func (s *Server) Run(ctx context.Context) {
	s.run(ctx)
}

// Sample asks for the named fleets to be sampled now while a page is open
// (as an action or a file change does): the daemon calls it when herdr
// pushed a member's verdict change, so the page's event stream shows it
// without waiting for the next sampling. It never blocks.
func (s *Server) Sample(names ...string) { s.hub.askSample(names) }

func (s *Server) run(ctx context.Context) {
	s.refreshRows(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.sampleLoop(ctx) })
	wg.Go(func() { s.rowsLoop(ctx) })
	if s.opt.Calls != nil {
		wg.Go(func() { s.callsLoop(ctx) })
	}
	if s.opt.Journal != nil {
		wg.Go(func() { s.followJournal(ctx) })
	}
	<-ctx.Done()
	s.doneOnce.Do(func() { close(s.done) })
	s.hub.closeAll()
	wg.Wait()
}

// waitActive blocks while no page is open; false when ctx ended. waited
// says whether it had to (the loop was idle).
func (s *Server) waitActive(ctx context.Context) (ok, waited bool) {
	for {
		on, wake := s.hub.active()
		if on {
			return true, waited
		}
		waited = true
		select {
		case <-ctx.Done():
			return false, waited
		case <-wake:
		}
	}
}

// refreshRows reads the lifecycle rows once and applies them; a fleet
// that came up is sampled at once.
func (s *Server) refreshRows(ctx context.Context) {
	rep, err := s.opt.Rows(ctx)
	if err != nil {
		s.opt.Log.Warn("dashboard: read fleet rows", "err", err)
		return
	}
	s.hub.applyFederation(rep.Federation)
	s.hub.askSample(s.hub.applyRows(rep.Fleets, time.Now()))
}

// known reports whether name is a fleet of the current rows, reading the
// rows again when it is not (a request may come before Run's first read,
// or right after a config reload added the fleet).
func (s *Server) known(ctx context.Context, name string) bool {
	if s.hub.known(name) {
		return true
	}
	s.refreshRows(ctx)
	return s.hub.known(name)
}

// rowsLoop reads the rows every StateEvery and on every Changes signal
// while a page is open (a signal while none is open is taken when one
// opens: one read more).
func (s *Server) rowsLoop(ctx context.Context) {
	t := time.NewTicker(s.opt.StateEvery)
	defer t.Stop()
	for {
		if ok, _ := s.waitActive(ctx); !ok {
			return
		}
		s.refreshRows(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.opt.Changes: // nil: never
		}
	}
}

// sampleLoop runs the member samplings: full ones at a period that starts
// at SampleEvery and doubles after each one that found nothing changed, up
// to SampleIdle; and, in between, of the fleets askSample names or whose
// files changed (Options.Files, every FilesEvery). A change found, a poke
// or a page opened after an idle time brings the period back to
// SampleEvery.
func (s *Server) sampleLoop(ctx context.Context) {
	period := s.opt.SampleEvery
	last := time.Now() // when the last full sampling began
	s.warm(ctx)        // the first page shows members at once
	next := last.Add(period)
	var files <-chan time.Time
	if s.opt.Files != nil {
		t := time.NewTicker(s.opt.FilesEvery)
		defer t.Stop()
		files = t.C
	}
	for {
		ok, waited := s.waitActive(ctx)
		if !ok {
			return
		}
		if waited { // a page opened after none was: back to the fast pace
			period = s.opt.SampleEvery
			if soon := last.Add(period); soon.Before(next) {
				next = soon
			}
		}
		timer := time.NewTimer(max(0, time.Until(next)))
		var names []string
		full, poked := false, false
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
			full = true
			s.hub.takeWanted() // a full sampling covers them
		case <-s.hub.poke:
			timer.Stop()
			if names = s.hub.takeWanted(); len(names) == 0 {
				continue
			}
			poked = true
		case <-files:
			timer.Stop()
			if names = s.hub.filesChanged(s.opt.Files); len(names) == 0 {
				continue
			}
			s.filesSamplings.Add(1)
		}
		if on, _ := s.hub.active(); !on {
			continue // the last page closed (and Linger passed) while this waited
		}
		started := time.Now()
		if full {
			last = started
		}
		changed := s.sample(ctx, names)
		switch {
		case full && !changed:
			period = min(2*period, s.opt.SampleIdle)
			next = started.Add(period)
		case full:
			period = s.opt.SampleEvery
			next = started.Add(period)
		case changed || poked:
			period = s.opt.SampleEvery
			if soon := started.Add(period); soon.Before(next) {
				next = soon
			}
		}
	}
}

// warm runs the one sampling taken before any page is open (Options.Warm,
// else Status) and applies it.
func (s *Server) warm(ctx context.Context) {
	f := s.opt.Warm
	if f == nil {
		s.sample(ctx, nil)
		return
	}
	started := time.Now()
	s.samplings.Add(1)
	rep, err := f(ctx, nil)
	if err != nil {
		if ctx.Err() == nil {
			s.opt.Log.Warn("dashboard: warm-up sampling", "err", err)
		}
		return
	}
	s.hub.applyReport(rep, started)
}

// sample runs one Status for names (nil: all) and applies it; it reports
// whether the sampled fleets changed (hub.applyReport).
func (s *Server) sample(ctx context.Context, names []string) bool {
	started := time.Now()
	s.samplings.Add(1)
	rep, err := s.opt.Status(ctx, names)
	if err != nil {
		if ctx.Err() == nil {
			s.opt.Log.Warn("dashboard: status sampling", "fleets", names, "err", err)
		}
		return false
	}
	return s.hub.applyReport(rep, started)
}

func (s *Server) callsLoop(ctx context.Context) {
	t := time.NewTicker(s.opt.CallsEvery)
	defer t.Stop()
	for {
		ok, waited := s.waitActive(ctx)
		if !ok {
			return
		}
		if waited {
			// Calls made while nobody watched would all land in one point:
			// after an idle time the history is read again (from the
			// journal, up to a new baseline of the counters; the page's
			// first snapshot usually did it already), and the next point
			// is one period later.
			s.loadHistory(ctx)
			t.Reset(s.opt.CallsEvery)
		} else if counts, err := s.opt.Calls(); err != nil {
			s.opt.Log.Warn("dashboard: read call counters", "err", err)
		} else {
			s.hub.applyCalls(counts, time.Now())
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// serveIndex serves the page with a CSRF token of its own.
func (s *Server) serveIndex(w http.ResponseWriter, r *http.Request) {
	tok, err := s.newToken()
	if err != nil {
		http.Error(w, "cannot make a CSRF token", http.StatusInternalServerError)
		return
	}
	var b bytes.Buffer
	if err := s.index.Execute(&b, map[string]string{
		"CSRF": tok, "JS": "/app.js?v=" + s.assets["app.js"].etag[1:9], "CSS": "/app.css?v=" + s.assets["app.css"].etag[1:9],
		"Worker": "/worker.js?v=" + s.assets["worker.js"].etag[1:9],
	}); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b.Bytes())
}

// serveAsset serves an embedded file; the page links it with its hash, so
// it can be cached, and revalidates by ETag otherwise.
func (s *Server) serveAsset(w http.ResponseWriter, r *http.Request) {
	a := s.assets[path.Base(r.URL.Path)]
	w.Header().Set("Content-Type", a.contentType)
	w.Header().Set("ETag", a.etag)
	w.Header().Set("Cache-Control", "no-cache")
	if r.Header.Get("If-None-Match") == a.etag {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write(a.body)
}

// serveSnapshot reads the lifecycle rows (so even a page opened after a
// long idle starts from the current states), takes the members serve
// knows from reports newer than its own last sampling (Observe), and
// returns the full view. A page opened after none was open reads the
// history first (loadHistory: restarts and sparklines from the journal).
func (s *Server) serveSnapshot(w http.ResponseWriter, r *http.Request) {
	s.refreshRows(r.Context())
	s.loadHistory(r.Context())
	s.hub.mu.Lock()
	s.hub.applyKnownLocked()
	snap := s.hub.snapshotLocked()
	b, err := json.Marshal(snap)
	s.hub.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}

// serveEvents is the SSE stream. The browser's EventSource reconnects on
// its own (after the retry below) with Last-Event-ID; the first connection
// names the snapshot it starts from with ?since=.
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	if !s.openStream(w, r, &s.eventStreams, maxEventStreams) {
		return
	}
	defer s.eventStreams.Add(-1)
	last := r.Header.Get("Last-Event-ID")
	if last == "" {
		last = r.URL.Query().Get("since")
	}
	s.loadHistory(r.Context()) // a stream opened without a snapshot read first
	sub, first := s.hub.subscribe(last)
	defer s.hub.unsubscribe(sub)
	// Each write gets its own deadline: a page that stopped reading ends
	// the stream instead of holding a goroutine for ever.
	es := mcpwire.NewEventStream(w, 10*time.Second)
	defer es.Close()
	es.Header().Set("Cache-Control", "no-store")
	es.Header().Set("X-Accel-Buffering", "no")
	if es.Retry(time.Second) != nil {
		return
	}
	for _, f := range first {
		if es.WriteEncoded(f) != nil {
			return
		}
	}
	if es.Flush() != nil {
		return
	}
	hb := time.NewTicker(s.opt.Heartbeat)
	defer hb.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			return
		case <-sub.gone:
			return
		case ev := <-sub.ch:
			if es.WriteEncoded(ev.frame) != nil {
				return
			}
			for drained := false; !drained; { // batch what is queued into one flush
				select {
				case ev := <-sub.ch:
					if es.WriteEncoded(ev.frame) != nil {
						return
					}
				default:
					drained = true
				}
			}
		case <-hb.C:
			if es.Comment("keep-alive") != nil {
				return
			}
		}
		if es.Flush() != nil {
			return
		}
	}
}

// refuse answers a refused request with status and a JSON error, logs it
// with the reason and counts it in fleetmgr_dashboard_refusals_total.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, status int, reason, msg string) {
	s.refusals.WithLabelValues(reason).Inc()
	s.opt.Log.Warn("dashboard: refused", "reason", reason, "detail", msg, "method", r.Method, "path", r.URL.Path,
		"origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "refused": reason, "error": msg})
}
