package main

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"

	"github.com/fleetmgr/fleetmgr/guard"
	"github.com/fleetmgr/fleetmgr/registry"
)

// remoteOpts are serve's --allow-remote and --token-file.
type remoteOpts struct {
	allow     bool
	tokenFile string
}

func (r remoteOpts) args() []string {
	var out []string
	if r.allow {
		out = append(out, "--allow-remote")
	}
	if r.tokenFile != "" {
		out = append(out, "--token-file", r.tokenFile)
	}
	return out
}

// policy checks the network exposure rules of issue #3: [manager] listen must
// be loopback unless both --allow-remote and a private (0600) token file are
// given; with them, remote peers need the bearer token.
func (r remoteOpts) policy(cfg *registry.Config) (guard.HTTPPolicy, error) {
	host, _, err := net.SplitHostPort(cfg.Manager.Listen)
	if err != nil {
		return guard.HTTPPolicy{}, fmt.Errorf("%s: [manager] listen %q: %v", cfg.Path, cfg.Manager.Listen, err)
	}
	loopback := host == "localhost"
	if a, err := netip.ParseAddr(host); err == nil && a.IsLoopback() {
		loopback = true
	}
	if r.tokenFile != "" && !r.allow {
		return guard.HTTPPolicy{}, fmt.Errorf("--token-file is only used with --allow-remote; drop it, or add --allow-remote")
	}
	if loopback && !r.allow {
		return guard.HTTPPolicy{}, nil
	}
	if !r.allow || r.tokenFile == "" {
		return guard.HTTPPolicy{}, fmt.Errorf("%s: [manager] listen = %q is not a loopback address; fleetmgr only listens beyond loopback with both --allow-remote and --token-file FILE (a 0600 file holding a bearer token)", cfg.Path, cfg.Manager.Listen)
	}
	fi, err := os.Stat(r.tokenFile)
	if err != nil {
		return guard.HTTPPolicy{}, fmt.Errorf("--token-file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return guard.HTTPPolicy{}, fmt.Errorf("--token-file %s has mode %04o; make it private: chmod 600 %s", r.tokenFile, fi.Mode().Perm(), r.tokenFile)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return guard.HTTPPolicy{}, fmt.Errorf("--token-file %s is owned by uid %d, not by you (uid %d)", r.tokenFile, st.Uid, os.Getuid())
	}
	b, err := os.ReadFile(r.tokenFile)
	if err != nil {
		return guard.HTTPPolicy{}, fmt.Errorf("--token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return guard.HTTPPolicy{}, fmt.Errorf("--token-file %s: the token must be at least 16 characters (e.g. openssl rand -hex 32 > %s)", r.tokenFile, r.tokenFile)
	}
	return guard.HTTPPolicy{RemoteToken: tok}, nil
}
