package daemon

import (
	"context"
	"log/slog"
	"time"

	"github.com/fleetmgr/fleetmgr/dashboard"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/status"
)

// newDashboard builds the page serve mounts at / (package dashboard;
// routes puts the guard's middleware in front of it, as in front of /mcp),
// wired as dashboard/example_test.go shows:
//   - Status and Rows: the collector behind fleetmgr_status
//     (proxy.StatusCollector: the same watcher, rosters read over the
//     proxy's upstream sessions, one memory of pane output), with the
//     merged catalogue's drift noted as fleetmgr_status notes it, and with
//     [federation] other hosts' fleets (NAME@HOST rows and the report's
//     "federation" object, as fleetmgr_status adds them);
//   - Action: the lifecycle verbs behind fleetmgr_start/stop/restart
//     (dashboardAction);
//   - Logs and RestartTimes: the lifecycle.Manager;
//   - Calls and Metrics: the proxy's Prometheus registry (the sparklines
//     read it; the page's refusals are counted in it, so /metrics shows
//     them).
//
// Serve runs its Server.Run; it samples nothing while no page is open,
// apart from one warm-up sampling at start.
func newDashboard(m *lifecycle.Manager, p *proxy.Proxy, metrics *proxy.Metrics, log *slog.Logger) (*dashboard.Server, error) {
	col := p.StatusCollector()
	return dashboard.New(dashboard.Options{
		Status: func(ctx context.Context, names []string) (*status.Report, error) {
			rep, err := col.Collect(ctx, status.Request{Fleets: names})
			if err == nil {
				proxy.NoteDrift(rep, p.Catalogue())
				if len(names) == 0 {
					p.AddRemote(rep, nil) // other hosts' fleets, with [federation]
				}
			}
			return rep, err
		},
		Rows:         func(context.Context) ([]status.Fleet, error) { return col.Rows(nil) },
		Action:       dashboardAction(m, p),
		Logs:         m,
		Calls:        dashboard.PrometheusCalls(metrics.Registry()),
		RestartTimes: dashboard.ManagerRestartTimes(m),
		Metrics:      metrics.Registry(),
		Log:          log,
	})
}

// dashboardAction runs a page's start, stop or restart as the manager
// tools do: the lifecycle verb with its steps recorded, then a catalogue
// refresh so the fleet enums follow (bounded by 10 s, and not cut short
// when the action's context ends).
func dashboardAction(m *lifecycle.Manager, p *proxy.Proxy) dashboard.ActionFunc {
	return func(ctx context.Context, a dashboard.Action) (dashboard.ActionResult, error) {
		res := dashboard.ActionResult{Steps: []lifecycle.Step{}}
		opt := lifecycle.Options{Lead: a.Lead, Progress: func(s lifecycle.Step) { res.Steps = append(res.Steps, s) }}
		var st *lifecycle.State
		var err error
		switch a.Verb {
		case dashboard.VerbStart:
			st, err = m.Start(ctx, a.Fleet, opt)
		case dashboard.VerbStop:
			st, err = m.Stop(ctx, a.Fleet, opt)
		case dashboard.VerbRestart:
			st, err = m.Restart(ctx, a.Fleet, opt)
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = p.Refresh(rctx)
		if st != nil {
			res.State = st.Phase
			if st.Fleetd != nil {
				res.PID = st.Fleetd.PID
			}
		}
		return res, err
	}
}
