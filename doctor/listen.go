package doctor

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// checkListen says whether `fleetmgr serve` will serve [manager] listen as
// it is: a loopback address is served; any other is refused unless serve
// is started with --allow-remote and --token-file (docs/SECURITY.md), so
// it is a warning naming both.
func checkListen(_ context.Context, e *checkEnv) []Finding {
	l := e.cfg.Manager.Listen
	host, _, err := net.SplitHostPort(l)
	if err != nil { // registry refuses such a file; kept for safety
		return []Finding{{Check: "listen", Severity: SevError, Subject: e.cfg.Path, Message: fmt.Sprintf("[manager] listen = %q: %v", l, err)}}
	}
	loopback := host == "localhost"
	if a, err := netip.ParseAddr(host); err == nil && a.IsLoopback() {
		loopback = true
	}
	if loopback {
		return []Finding{{Check: "listen", Severity: SevOK, Subject: e.cfg.Path, Message: fmt.Sprintf("[manager] listen = %q is loopback: serve's HTTP mount and dashboard answer this host only", l)}}
	}
	return []Finding{{Check: "listen", Severity: SevWarn, Subject: e.cfg.Path,
		Message: fmt.Sprintf("[manager] listen = %q is not loopback: fleetmgr serve refuses it unless started with --allow-remote and --token-file FILE (callers then need its bearer token)", l),
		Fix:     "use 127.0.0.1:PORT, or start serve with --allow-remote --token-file FILE (docs/SECURITY.md)"}}
}
