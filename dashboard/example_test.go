package dashboard_test

import (
	"context"
	"errors"
	"net/http"

	"github.com/fleetmgr/fleetmgr/dashboard"
	"github.com/fleetmgr/fleetmgr/guard"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/status"
)

// How a daemon mounts the dashboard (daemon/dashboard.go does this): the
// status collector fleetmgr_status uses (with the merged catalogue's drift
// and, when serve federates, the other hosts' fleets added as
// fleetmgr_status adds them), the path of the manager tools for the
// buttons (proxy.Proxy.Act), its lifecycle manager for logs and restart
// times, the proxy's metrics for the sparklines, a signal when a state
// file changes, the status watcher for file changes, and the guard around
// it all, as around /mcp.
func Example() {
	var (
		ctx     context.Context
		m       *lifecycle.Manager
		p       *proxy.Proxy
		metrics *proxy.Metrics
		changes <-chan struct{} // a signal per state file written or config reload
		files   *status.Watcher // serve's inotify file clock
		g       *guard.Guard
		pol     guard.HTTPPolicy
		mux     *http.ServeMux
	)
	col := p.StatusCollector()
	dash, err := dashboard.New(dashboard.Options{
		Status: func(ctx context.Context, names []string) (*status.Report, error) {
			rep, err := col.Collect(ctx, status.Request{Fleets: names})
			if err == nil {
				proxy.NoteDrift(rep, p.Catalogue())
				if len(names) == 0 {
					p.AddRemote(rep, nil)
				}
			}
			return rep, err
		},
		Rows: func(context.Context) (*status.Report, error) {
			rows, err := col.Rows(nil)
			if err != nil {
				return nil, err
			}
			rep := col.Empty(0)
			rep.Fleets = rows
			p.AddRemote(rep, nil)
			return rep, nil
		},
		Action: func(ctx context.Context, a dashboard.Action) (dashboard.ActionResult, error) {
			r, err := p.Act(ctx, string(a.Verb), a.Fleet, a.Lead, nil)
			var unknown *proxy.UnknownFleetError
			if errors.As(err, &unknown) {
				return dashboard.ActionResult{}, dashboard.UnknownFleet(err)
			}
			var res dashboard.ActionResult
			if r != nil {
				res = dashboard.ActionResult{State: r.State, PID: r.PID, Steps: r.Steps}
			}
			return res, err
		},
		Logs:         m,
		Calls:        dashboard.PrometheusCalls(metrics.Registry()),
		RestartTimes: dashboard.ManagerRestartTimes(m),
		Metrics:      metrics.Registry(),
		Changes:      changes,
		Files:        files,
	})
	if err != nil {
		return
	}
	mux.Handle("/", g.Middleware(dash, pol)) // same guard and Host/Origin checks as /mcp
	go dash.Run(ctx)
}
