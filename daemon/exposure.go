package daemon

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/fleetmgr/fleetmgr/guard"
	"github.com/fleetmgr/fleetmgr/privdir"
	"github.com/fleetmgr/fleetmgr/registry"
)

// Exposure is serve's network exposure (not to be confused with remote fleets, which are federation's): --allow-remote and --token-file.
type Exposure struct {
	// Allow lets [manager] listen be a non-loopback address.
	Allow bool
	// TokenFile holds the bearer token remote peers must send.
	TokenFile string
}

// Args are the flags that give r to a detach stage.
func (r Exposure) Args() []string {
	var out []string
	if r.Allow {
		out = append(out, "--allow-remote")
	}
	if r.TokenFile != "" {
		out = append(out, "--token-file", r.TokenFile)
	}
	return out
}

// Policy checks the network exposure rules (docs/SECURITY.md): [manager]
// listen must be loopback unless both Allow and a private (0600, owned by
// this user) token file of at least 16 characters are given; with them,
// remote peers need the bearer token. An error names the flag or key to
// change.
func (r Exposure) Policy(cfg *registry.Config) (guard.HTTPPolicy, error) {
	host, _, err := net.SplitHostPort(cfg.Manager.Listen)
	if err != nil {
		return guard.HTTPPolicy{}, fmt.Errorf("%s: [manager] listen %q: %v", cfg.Path, cfg.Manager.Listen, err)
	}
	loopback := host == "localhost"
	if a, err := netip.ParseAddr(host); err == nil && a.IsLoopback() {
		loopback = true
	}
	if r.TokenFile != "" && !r.Allow {
		return guard.HTTPPolicy{}, fmt.Errorf("--token-file is only used with --allow-remote; drop it, or add --allow-remote")
	}
	if loopback && !r.Allow {
		return guard.HTTPPolicy{}, nil
	}
	if !r.Allow || r.TokenFile == "" {
		return guard.HTTPPolicy{}, fmt.Errorf("%s: [manager] listen = %q is not a loopback address; fleetmgr only listens beyond loopback with both --allow-remote and --token-file FILE (a 0600 file holding a bearer token)", cfg.Path, cfg.Manager.Listen)
	}
	fi, err := os.Stat(r.TokenFile)
	if err != nil {
		return guard.HTTPPolicy{}, fmt.Errorf("--token-file: %w", err)
	}
	if p := privdir.FileProblem(r.TokenFile, fi); p != "" {
		return guard.HTTPPolicy{}, fmt.Errorf("--token-file %s: %s (it holds the bearer token)", r.TokenFile, p)
	}
	b, err := os.ReadFile(r.TokenFile)
	if err != nil {
		return guard.HTTPPolicy{}, fmt.Errorf("--token-file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < 16 {
		return guard.HTTPPolicy{}, fmt.Errorf("--token-file %s: the token must be at least 16 characters (e.g. openssl rand -hex 32 > %s)", r.TokenFile, r.TokenFile)
	}
	return guard.HTTPPolicy{RemoteToken: tok}, nil
}
