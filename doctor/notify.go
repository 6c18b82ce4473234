package doctor

import (
	"context"
	"fmt"
	"time"

	"github.com/fleetmgr/fleetmgr/status"
)

// checkNotifySinks says, from the running serve, each notification sink
// whose last delivery failed after its retries (issue 25: a failing sink
// is reported in check, status and /metrics), a warning naming the rule,
// the sink and the last error; when every sink of the rules delivers, one
// ok line. Nothing without [[notify]] rules or without a serve to ask.
func checkNotifySinks(ctx context.Context, e *checkEnv) []Finding {
	if e.sinks == nil || len(e.cfg.Notify) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	failing, ok := e.sinks(cctx, e.cfg)
	if !ok {
		return []Finding{{Check: "notify", Severity: SevInfo, Subject: e.cfg.Path,
			Message: fmt.Sprintf("%d [[notify]] rule(s); no fleetmgr serve answers, and only serve delivers notifications, so whether the sinks deliver is not known", len(e.cfg.Notify)),
			Fix:     "start serve (fleetmgr serve --detach); `fleetmgr notify test` tries each sink"}}
	}
	if len(failing) == 0 {
		return []Finding{{Check: "notify", Severity: SevOK, Subject: e.cfg.Path,
			Message: fmt.Sprintf("%d [[notify]] rule(s); no sink is failing (serve's deliveries so far)", len(e.cfg.Notify))}}
	}
	var out []Finding
	for _, f := range failing {
		out = append(out, Finding{Check: "notify", Severity: SevWarn, Subject: "rule " + f.Rule + ", sink " + f.Sink,
			Message: status.FailingSinkLine(f),
			Fix:     "fix the sink (its URL, url_env/url_file, the receiver, the command), then `fleetmgr notify test " + f.Rule + "`"})
	}
	return out
}
