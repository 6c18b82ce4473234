package cmdutil

import (
	"context"
	"io"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/serveclient"
	"github.com/fleetmgr/fleetmgr/status"
)

// Client is the CLI's way to fleets, as the verbs call it: a
// *serveclient.Client in the product (through the running serve, else a
// lifecycle.Manager in this process), a test's fake in the CLI's own
// tests (Factory.NewClient), as gh injects its HTTP client. Each method
// is the serveclient.Client method of the same name, which documents it.
type Client interface {
	Fleets(verb serveapi.Verb, names []string, all bool) ([]string, error)
	Known(names ...string) error
	Act(ctx context.Context, req serveclient.ActRequest) ([]serveclient.Outcome, error)
	List() []serveclient.ListRow
	ListRemote(ctx context.Context) (rows []serveclient.ListRow, fed *peerview.Federation, note string)
	FailingSinks(ctx context.Context) (sinks []status.FailingSink, ok bool)
	Supervision() (pid int, note string)
	Watch(ctx context.Context, req serveclient.StatusRequest, watch bool, each func(rep *status.Report, first bool) error) error
	Reload(ctx context.Context) (*lifecycle.ReloadReport, string, error)
	ReloadEdited(ctx context.Context) (string, error)
	Logs(ctx context.Context, fleet string, herdr bool, lines int, follow bool, w io.Writer) error
	LogsMany(ctx context.Context, req serveclient.LogsRequest, w io.Writer) error
	DeleteVhost(ctx context.Context, fleet string, confirmed bool) (vhost string, existed bool, err error)
	Events(ctx context.Context, args serveapi.EventsArgs) ([]journal.Event, error)
	NotifyTest(ctx context.Context, rule string) ([]serveapi.NotifyAttempt, error)
	Tools(ctx context.Context, fleet string) (*proxy.ToolsReport, error)
	SetTools(ctx context.Context, action, fleet string, tools []string) (*proxy.ToolsReport, error)
}

var _ Client = (*serveclient.Client)(nil)

// client is cfg's Client: f.NewClient's when set (a test's), else a
// serveclient.Client over m (nil: no in-process fallback, for completion).
func (f *Factory) client(cfg *registry.Config, m *lifecycle.Manager) Client {
	if f.NewClient != nil {
		return f.NewClient(cfg, m)
	}
	return serveclient.NewClient(cfg, m, f.AppVersion())
}
