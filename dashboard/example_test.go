package dashboard_test

import (
	"context"
	"net/http"
	"time"

	"github.com/fleetmgr/fleetmgr/dashboard"
	"github.com/fleetmgr/fleetmgr/guard"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/status"
)

// How a daemon mounts the dashboard: its own status collector (the one
// fleetmgr_status uses, with the merged catalogue's drift noted), its
// lifecycle manager for logs and restart times, the proxy's metrics for the
// sparklines, the lifecycle verbs for the buttons (followed by the
// catalogue refresh the manager tools do), and the guard around it all,
// as around /mcp.
func Example() {
	var (
		ctx     context.Context
		m       *lifecycle.Manager
		col     *status.Collector // status.New(...) as for fleetmgr_status
		p       *proxy.Proxy
		metrics *proxy.Metrics
		g       *guard.Guard
		pol     guard.HTTPPolicy
		mux     *http.ServeMux
	)
	act := func(ctx context.Context, a dashboard.Action) (dashboard.ActionResult, error) {
		var res dashboard.ActionResult
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
		_ = p.Refresh(rctx) // the fleet enums follow, as after fleetmgr_start
		if st != nil {
			res.State = st.Phase
			if st.Fleetd != nil {
				res.PID = st.Fleetd.PID
			}
		}
		return res, err
	}
	dash, err := dashboard.New(dashboard.Options{
		Status: func(ctx context.Context, names []string) (*status.Report, error) {
			rep, err := col.Collect(ctx, status.Request{Fleets: names})
			if err == nil {
				proxy.NoteDrift(rep, p.Catalogue())
			}
			return rep, err
		},
		Rows:         func(context.Context) ([]status.Fleet, error) { return col.Rows(nil) },
		Action:       act,
		Logs:         m,
		Calls:        dashboard.PrometheusCalls(metrics.Registry()),
		RestartTimes: dashboard.ManagerRestartTimes(m),
		Metrics:      metrics.Registry(),
	})
	if err != nil {
		return
	}
	mux.Handle("/", g.Middleware(dash, pol)) // same guard and Host/Origin checks as /mcp
	go dash.Run(ctx)
}
