package daemon

import (
	"context"
	"errors"
	"log/slog"

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
//   - Action: proxy.Proxy.Act, the path of fleetmgr_start/stop/restart
//     (dashboardAction);
//   - Logs and RestartTimes: the lifecycle.Manager;
//   - Journal: serve's journal (nil when it could not be opened), so the
//     restart marks and the sparklines a page opens with come from it
//     (they survive a serve restart);
//   - Calls and Metrics: the proxy's call metrics (the sparklines read
//     them through CallsGatherer) and its Prometheus registry (the page's
//     refusals are counted in it, so /metrics shows them);
//   - Changes: stateWatch's signals (a state file written, a config
//     reload), so the rows are read when something changed rather than
//     polled; nil (no inotify): polled every 250 ms;
//   - Files: the status watcher (nil when serve walks), so a stalled
//     member writing again is sampled at once, while an idle page lets the
//     samplings slow down to one a minute.
//
// Serve runs its Server.Run; it samples nothing while no page is open,
// apart from one warm-up sampling at start, which reads no resources
// (no status.Request.Resources: nobody looks yet).
func newDashboard(m *lifecycle.Manager, p *proxy.Proxy, metrics *proxy.Metrics, changes <-chan struct{}, files *status.Watcher, att *attention, log *slog.Logger) (*dashboard.Server, error) {
	col := p.StatusCollector()
	return dashboard.New(dashboard.Options{
		Status: dashboardStatus(col, p, false),
		Warm:   dashboardStatus(col, p, true), // at serve start, nobody looks: no /proc read
		Rows: func(context.Context) (*status.Report, error) {
			rows, err := col.Rows(nil)
			if err != nil {
				return nil, err
			}
			rep := col.Empty(0)
			rep.Fleets = rows
			p.NoteServe(rep)
			p.AddRemote(rep, nil) // from presence in memory: nothing is asked of the peers
			return rep, nil
		},
		Action:       dashboardAction(p, att),
		Logs:         m,
		Calls:        dashboard.PrometheusCalls(metrics.CallsGatherer()),
		RestartTimes: dashboard.ManagerRestartTimes(m),
		Journal:      att.dashboardJournal(),
		Metrics:      metrics.Registry(),
		Log:          log,
		Changes:      changes,
		Files:        fileActivity(files),
	})
}

// dashboardJournal is the journal as the dashboard reads it; nil (not a
// nil pointer in the interface) when serve runs without one.
func (a *attention) dashboardJournal() dashboard.Journal {
	if a.j == nil {
		return nil
	}
	return a.j
}

// fileActivity is w as a dashboard.FileActivity, nil when w is (a nil
// *status.Watcher in the interface would not be nil).
func fileActivity(w *status.Watcher) dashboard.FileActivity {
	if w == nil {
		return nil
	}
	return w
}

// dashboardAction runs a page's start, stop or restart through
// proxy.Proxy.Act, the path of the manager tools fleetmgr_start,
// fleetmgr_stop and fleetmgr_restart: a name serve does not know yet makes
// it read fleets.toml again, the lifecycle verb runs with its steps
// recorded, then the catalogue is refreshed so the fleet enums follow. A
// name still unknown is dashboard.ErrUnknownFleet (nothing done).
func dashboardAction(p *proxy.Proxy, att *attention) dashboard.ActionFunc {
	return func(ctx context.Context, a dashboard.Action) (dashboard.ActionResult, error) {
		// Confirmed: the page's dialog asked, saying how many members a
		// stop or restart ends.
		r, err := p.Do(ctx, proxy.ActArgs{Verb: string(a.Verb), Fleet: a.Fleet, Lead: a.Lead, Confirm: true, Origin: "dashboard"}, nil)
		att.dashboardAction(string(a.Verb), a.Fleet, a.Lead, err)
		var unknown *proxy.UnknownFleetError
		if errors.As(err, &unknown) {
			return dashboard.ActionResult{Steps: []lifecycle.Step{}}, dashboard.UnknownFleet(err)
		}
		res := dashboard.ActionResult{Steps: []lifecycle.Step{}}
		if r != nil {
			res = dashboard.ActionResult{State: r.State, PID: r.PID, Steps: r.Steps}
		}
		return res, err
	}
}

// dashboardStatus is the dashboard's StatusFunc: a Collect of the named
// fleets (all when none) with the catalogue's schema drift, serve's
// config_error and, for all, the other hosts' fleets; a page's samplings
// read resources (status.Request.Resources), the warm-up (warm) does not.
func dashboardStatus(col *status.Collector, p *proxy.Proxy, warm bool) dashboard.StatusFunc {
	return func(ctx context.Context, names []string) (*status.Report, error) {
		rep, err := col.Collect(ctx, status.Request{Fleets: names, Resources: !warm})
		if err == nil {
			proxy.NoteDrift(rep, p.Catalogue())
			p.NoteServe(rep) // config_error: the page's banner
			if len(names) == 0 {
				p.AddRemote(rep, nil) // other hosts' fleets, with [federation]
			}
		}
		return rep, err
	}
}
