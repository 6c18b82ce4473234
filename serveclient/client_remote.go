package serveclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/termtext"
)

// A fleet of another host (federation, docs/FEDERATION.md) is named
// NAME@HOST. The CLI never reaches another host itself: every verb on
// NAME@HOST goes to this host's fleetmgr serve (the manager tools), which
// sends a signed request over the broker to HOST's serve and relays the
// reply.

// isRemoteName reports whether name is NAME@HOST.
func isRemoteName(name string) bool {
	_, _, ok := peerview.SplitRemote(name)
	return ok
}

// checkRemoteName is Known's rule for NAME@HOST: it needs [federation]
// in the config (the daemon says whether HOST is a peer).
func (c *Client) checkRemoteName(name string) error {
	if c.cfg.Federation == nil {
		_, host, _ := peerview.SplitRemote(name)
		return &serveapi.UsageError{Err: fmt.Errorf("%s names fleet of host %s, but %s has no [federation] table: this fleetmgr reaches no other host (docs/FEDERATION.md)", name, host, c.cfg.Path)}
	}
	return nil
}

// errNeedsServe is a NAME@HOST verb without a running serve.
func (c *Client) errNeedsServe(name string) error {
	return fmt.Errorf("%s is a fleet of another host, reached through this host's fleetmgr serve, and none runs for %s: start it (fleetmgr serve --detach)", name, c.cfg.Manager.StateDir)
}

// ListRemote is what `fleetmgr list` adds for other hosts: their fleets'
// rows (named NAME@HOST, or as fleets.toml declares them with host =
// HOST; Host and Remote set) and the federation's state, from this
// host's serve (fleetmgr_list). Without [federation]: nothing. No serve
// running, or none answering, is a note (said on stderr), not an error:
// the local rows are still worth printing.
func (c *Client) ListRemote(ctx context.Context) (rows []ListRow, fed *peerview.Federation, note string) {
	if c.cfg.Federation == nil {
		return nil, nil, ""
	}
	_, sock := serveapi.Running(c.cfg)
	if sock == "" {
		return nil, nil, "no fleetmgr serve runs for this state dir: other hosts' fleets are shown through it (fleetmgr serve --detach)"
	}
	lr, err := c.callList(ctx, sock)
	if err != nil {
		return nil, nil, "fleetmgr serve did not list other hosts' fleets: " + err.Error()
	}
	for _, f := range lr.Fleets {
		if f.Host == "" || f.Remote == nil {
			continue // this host's
		}
		rows = append(rows, ListRow{Name: f.Name, Host: f.Host, State: f.Phase, Restarts: f.Restarts, CrashLoop: f.CrashLoop, LastError: f.LastError,
			UptimeS: float64(f.UptimeS), Members: f.Members, Verdicts: f.Verdicts, Remote: f.Remote})
	}
	return rows, lr.Federation, ""
}

// MergeRemote returns local's rows with rows of other hosts' fleets in
// place: a fleet fleets.toml declares on another host is replaced by its
// remote row, the others added; sorted by name.
func MergeRemote(local, remote []ListRow) []ListRow {
	byName := map[string]ListRow{}
	for _, r := range remote {
		byName[r.Name] = r
	}
	out := make([]ListRow, 0, len(local)+len(remote))
	for _, r := range local {
		if rr, ok := byName[r.Name]; ok {
			r = rr
			delete(byName, r.Name)
		}
		out = append(out, r)
	}
	for _, r := range remote {
		if _, ok := byName[r.Name]; ok {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// FailingSinks are the notification sinks ([[notify]]) whose last
// delivery failed, as the running serve knows them (fleetmgr_list's
// notify_failing); ok is false when no serve answers (it alone delivers
// notifications, so nothing is known then).
func (c *Client) FailingSinks(ctx context.Context) (sinks []status.FailingSink, ok bool) {
	_, sock := serveapi.Running(c.cfg)
	if sock == "" {
		return nil, false
	}
	lr, err := c.callList(ctx, sock)
	if err != nil {
		return nil, false
	}
	return lr.NotifyFailing, true
}

// callList calls fleetmgr_list on the daemon.
func (c *Client) callList(ctx context.Context, sock string) (*proxy.ListResult, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cs, err := c.session(cctx, sock, nil)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: proxy.ManagerToolPrefix + "list", Arguments: map[string]any{}})
	if err != nil {
		return nil, err
	}
	if res.IsError {
		return nil, errors.New(resultText(res))
	}
	var lr proxy.ListResult
	if err := decodeStructured(res, &lr); err != nil {
		return nil, fmt.Errorf("fleetmgr_list: unexpected result: %v", err)
	}
	return &lr, nil
}

// renderRemoteRows writes the rows of other hosts' fleets (Remote set) as
// a table of their own under `fleetmgr list`'s.
func renderRemoteRows(out io.Writer, rows []ListRow) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REMOTE FLEET\tHOST\tSTATE\tUPTIME\tRESTARTS\tMEMBERS\tVERDICTS\tLAST BEAT")
	for _, r := range rows {
		rl := r.Remote
		state, up, members, verdicts, beat := string(r.State), "-", "-", "-", "-"
		if rl.HostState != "online" {
			state = fmt.Sprintf("%s (host %s; was %s)", r.State, rl.HostState, orNone(rl.ReportedState))
		}
		if r.UptimeS > 0 {
			up = (time.Duration(r.UptimeS) * time.Second).String()
		}
		if r.Members != nil {
			members = fmt.Sprint(*r.Members)
			verdicts = verdictWords(r.Verdicts)
		}
		if rl.BeatAgeS != nil {
			beat = fmt.Sprintf("%.1fs ago (%s)", *rl.BeatAgeS, rl.LastSeen.Local().Format("15:04:05"))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", termtext.Cell(r.Name), termtext.Cell(r.Host), termtext.Cell(state), up, r.Restarts, members, termtext.Cell(verdicts), beat)
	}
	return tw.Flush()
}

// RenderFederation writes the federation's lines under `fleetmgr list`:
// this host and its connection, then one line per peer. Nothing for nil.
func RenderFederation(out io.Writer, f *peerview.Federation) {
	if f == nil {
		return
	}
	conn := "connected"
	if !f.Connected {
		conn = "not connected (" + termtext.Cell(orNone(f.Error)) + ")"
	}
	fmt.Fprintf(out, "federation: this host is %s, %s\n", f.Host, conn)
	for _, h := range f.Hosts {
		line := fmt.Sprintf("  %s: %s, %d fleet(s)", termtext.Cell(h.Host), termtext.Cell(string(h.State)), h.Fleets)
		if h.BeatAgeS != nil {
			line += fmt.Sprintf(", last beat %.1fs ago (%s)", *h.BeatAgeS, h.LastSeen.Local().Format("15:04:05"))
		}
		fmt.Fprintln(out, line)
	}
}

// verdictWords is "2 WORKING, 1 STALLED" ("none" for no member).
func verdictWords(v map[string]int) string {
	if len(v) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s", v[k], k)
	}
	return strings.Join(parts, ", ")
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// remoteLogs is `fleetmgr logs NAME@HOST`: fleetmgr_logs on this host's
// serve, which asks HOST for the tail.
func (c *Client) remoteLogs(ctx context.Context, fleet string, herdr bool, lines int, follow bool, w io.Writer) error {
	if follow {
		return &serveapi.UsageError{Err: fmt.Errorf("--follow is not available for %s, a fleet of another host: run `fleetmgr logs %s -n N` again, or follow it on its host", fleet, fleet)}
	}
	_, sock := serveapi.Running(c.cfg)
	if sock == "" {
		return c.errNeedsServe(fleet)
	}
	cs, err := c.session(ctx, sock, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	if lines == 0 {
		lines = 1000 // "all": as much as one reply carries
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: proxy.ManagerToolPrefix + "logs",
		Arguments: proxy.LogsArgs{Fleet: fleet, Lines: lines, Herdr: herdr}})
	if err != nil {
		return err
	}
	if res.IsError {
		return errors.New(resultText(res))
	}
	var lr proxy.LogsResult
	if err := decodeStructured(res, &lr); err != nil {
		return fmt.Errorf("fleetmgr_logs: unexpected result: %v", err)
	}
	for _, l := range lr.Lines {
		if _, err := fmt.Fprintln(w, termtext.Line(l)); err != nil {
			return err
		}
	}
	return nil
}
