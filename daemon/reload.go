package daemon

import (
	"context"
	"crypto/sha256"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/fleetmgr/fleetmgr/lastgood"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// reloader is serve's config reload: it re-reads the file serve was started
// with and swaps it into the Manager (lifecycle.Manager.Reload), which every
// part of the daemon reads its config from. It runs on SIGHUP, on the tool
// fleetmgr_reload (`fleetmgr reload`), and when a manager tool names a
// fleet the config in force does not define while the file changed. One
// reload at a time; a file that does not load changes nothing, and each of
// its problems is logged with file:line.
type reloader struct {
	path string // the absolute fleets.toml serve was started with
	m    *lifecycle.Manager
	log  *slog.Logger
	// kick runs after a swap (the status watcher looks again); refresh
	// after a swap on SIGHUP: the proxy re-lists its catalogue at once.
	// The proxy's tools that reload (fleetmgr_reload, a manager tool
	// naming a fleet just added) refresh it themselves before they
	// answer: a refresh asked here too would list every fleet twice, and
	// a fleetd that does not answer would hold the answer twice as long.
	kick    func()
	refresh func()
	// done, if set, is told of each reload that read the file: its
	// report, or why it was not applied (serve's journal).
	done func(*lifecycle.ReloadReport, error)

	mu      sync.Mutex
	last    [sha256.Size]byte // digest of the file's bytes as last read
	lastErr error             // why those bytes could not be applied (nil: they were)
	// probed is the digest of bytes problem loaded without applying them,
	// probedErr what that found.
	probed    [sha256.Size]byte
	probedErr error
}

func newReloader(cfg *registry.Config, m *lifecycle.Manager, log *slog.Logger) *reloader {
	r := &reloader{path: cfg.Path, m: m, log: log, kick: func() {}, refresh: func() {}}
	if sum, ok := fileDigest(r.path); ok {
		r.last = sum // what serve loaded at start, near enough
	}
	return r
}

// fileDigest is the SHA-256 of the regular file at path (at most 1 MiB,
// the most registry.Load accepts); false when it cannot be read as such.
func fileDigest(path string) ([sha256.Size]byte, bool) {
	var sum [sha256.Size]byte
	if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
		return sum, false // never open a FIFO: it would block
	}
	f, err := os.Open(path)
	if err != nil {
		return sum, false
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 1<<20+1))
	if err != nil {
		return sum, false
	}
	return sha256.Sum256(b), true
}

// reload re-reads the file and swaps it in. With ifChanged, when the
// file's bytes are those last read, it does nothing and returns (nil, the
// error that kept them from being applied, if any).
func (r *reloader) reload(ctx context.Context, ifChanged bool) (rep *lifecycle.ReloadReport, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	sum, ok := fileDigest(r.path)
	if ifChanged && ok && sum == r.last {
		return nil, r.lastErr
	}
	if ok {
		r.last = sum
		defer func() { r.lastErr = err }()
	}
	cfg, data, err := registry.LoadBytes(r.path)
	if err == nil {
		err = cfg.AllocatePorts()
	}
	if err == nil {
		rep, err = r.m.Reload(cfg)
	}
	if err == nil {
		saveInForce(cfg, data)
	}
	if r.done != nil {
		r.done(rep, err)
	}
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			r.log.Error("reload: fleets.toml not applied; the config in force stays", "problem", line)
		}
		return nil, err
	}
	r.log.Info("config reloaded", "config", rep.Config, "generation", rep.Generation, "fleets", rep.Fleets,
		"added", rep.Added, "removed", rep.Removed, "retired", rep.Retired, "changed", rep.Changed)
	for _, l := range rep.Lines()[1:] {
		r.log.Info("reload: " + l)
	}
	if len(rep.ServeRestart) > 0 {
		r.log.Warn("reload: these keys changed but only a new fleetmgr serve applies them; the daemon keeps their old values", "keys", rep.ServeRestart)
	}
	r.kick()
	return rep, nil
}

// saveInForce records data, the bytes of cfg's file, as the configuration
// this serve has in force (lastgood.ServeFile), for the CLI to use while
// the file does not load; best effort.
func saveInForce(cfg *registry.Config, data []byte) {
	_ = lastgood.Save(cfg.Manager.StateDir, lastgood.ServeFile, cfg.Path, data, "serve", os.Getpid())
}

// problem is why fleets.toml as it now reads cannot be applied, nil when
// it can (or was): a file changed since the last read is loaded to see,
// never applied. The MCP tools and the dashboard show it.
func (r *reloader) problem() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	sum, ok := fileDigest(r.path)
	if !ok {
		return nil
	}
	if sum == r.last {
		return r.lastErr
	}
	if sum == r.probed {
		return r.probedErr
	}
	_, err := registry.Load(r.path)
	r.probed, r.probedErr = sum, err
	return err
}

// onHangup reloads at every SIGHUP on hup until ctx ends. A SIGHUP never
// stops serve.
func (r *reloader) onHangup(ctx context.Context, hup <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			r.log.Info("SIGHUP: re-reading fleets.toml", "config", r.path)
			if rep, _ := r.reload(ctx, false); rep != nil {
				r.refresh()
			}
		}
	}
}

// CatchHangup makes SIGHUP a request to reload instead of the end of
// the process, from now on; signals arrive on the returned channel
// (buffered: one pending reload stands for any number of signals). serve
// calls it before anything else, so no SIGHUP ends it; the function
// returned stops catching.
func CatchHangup() (<-chan os.Signal, func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	return hup, func() { signal.Stop(hup) }
}
