package serveclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/termtext"
)

// StatusRequest is one Status call.
type StatusRequest struct {
	// Fleets to report; empty: every fleet.
	Fleets []string
	// Interval between a busy member's two samples; 0: [status] interval.
	Interval time.Duration
	// Local samples in this process even when a daemon runs.
	Local bool
	// Fresh makes the daemon sample anew; without it (and without
	// Interval) it answers at once from its last sampling when that is
	// at most CachedMaxAge old.
	Fresh bool
	// ConfigError, when set, is why fleets.toml does not load (the
	// report is of the configuration in force); it goes into the report.
	ConfigError error
	// BeforeLocal, when set, is called before this process samples (no
	// daemon answered, or it refused the caller, or Local): the CLI's
	// refusal inside a herdr pane. Through a daemon its guard judges the
	// caller by the same rules, so the check is not made twice.
	BeforeLocal func() error
	// Fallback, when set, is told why a daemon whose socket accepted the
	// connection gave no status (this process samples instead).
	Fallback func(socket string, err error)
}

// Status is `fleetmgr status`'s report: asked of the daemon (the tool
// fleetmgr_status on [manager] mcp_socket, so file evidence comes from
// its inotify watches) unless req.Local, or collected in this process
// (walking worktrees; schema drift from each fleet's cached catalogue)
// when no daemon answers. A tool error of the daemon (an unknown fleet)
// is returned as is.
func (c *Client) Status(ctx context.Context, req StatusRequest) (*status.Report, error) {
	var remote string
	for _, n := range req.Fleets {
		if isRemoteName(n) {
			remote = n
		}
	}
	if remote != "" && req.Local {
		return nil, &serveapi.UsageError{Err: fmt.Errorf("--local samples this host only; %s is a fleet of another host, asked through this host's fleetmgr serve", remote)}
	}
	if !req.Local {
		rep, dialed, err := c.daemonStatus(ctx, req)
		if err == nil || !dialed && !errors.Is(err, errNoSocket) {
			return rep, err
		}
		if remote != "" {
			if dialed {
				return nil, fmt.Errorf("fleetmgr serve on %s did not answer (%v); %s is a fleet of another host, asked through it", c.socket(), err, remote)
			}
			return nil, c.errNeedsServe(remote)
		}
		if dialed && req.Fallback != nil {
			req.Fallback(c.socket(), err)
		}
	}
	if req.BeforeLocal != nil {
		if err := req.BeforeLocal(); err != nil {
			return nil, err
		}
	}
	col := status.New(status.Options{Manager: c.m, Via: "cli", Version: c.version})
	rep, err := col.Collect(ctx, status.Request{Fleets: req.Fleets, Interval: req.Interval, Resources: true})
	if err != nil {
		return nil, err
	}
	// Schema drift from each fleet's last catalogue, as fleetmgr check
	// reports it (an unreadable cache is check's to report).
	cat, _ := proxy.CachedCatalogue(c.m)
	proxy.NoteDrift(rep, cat)
	return rep, nil
}

// Watch calls Status with req, then each with the report (first: the
// first one), until ctx ends (then nil) or a call fails; with watch it
// asks again at most once per report's interval (even when nothing was
// busy and the status returned at once), without it once. A fleet the
// Manager does not know (Known), or a negative Interval, is a *UsageError
// before anything is asked.
func (c *Client) Watch(ctx context.Context, req StatusRequest, watch bool, each func(rep *status.Report, first bool) error) error {
	if err := c.Known(req.Fleets...); err != nil {
		return err
	}
	if req.Interval < 0 {
		return &serveapi.UsageError{Err: errors.New("--interval must be positive")}
	}
	for first := true; ; first = false {
		t0 := time.Now()
		rep, err := c.Status(ctx, req)
		if err != nil {
			if ctx.Err() != nil && !first {
				return nil
			}
			return err
		}
		rep.ServePID, rep.Supervision = c.Supervision()
		rep.Supervised = rep.ServePID > 0
		if rep.ConfigError == "" && req.ConfigError != nil {
			rep.ConfigError = req.ConfigError.Error()
		}
		if err := each(rep, first); err != nil || !watch {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(t0.Add(time.Duration(rep.IntervalMS) * time.Millisecond))):
		}
	}
}

// socket is the unix socket of the serve of the client's state dir, as its
// serve.json names it (whatever [manager] mcp_socket the file says now: it
// applies at serve's next start); the config's when no serve.json names one.
func (c *Client) socket() string {
	if info := serveapi.ReadInfo(c.cfg); info.Socket != "" {
		return info.Socket
	}
	return c.cfg.Manager.MCPSocket
}

// CachedMaxAge is the oldest sampling of serve's that `fleetmgr status`
// (without --fresh) takes: three intervals, and at least 5 s. serve
// samples back to back while asked, each sampling taking about one
// interval, so its last one is rarely older than two.
func CachedMaxAge(interval time.Duration) time.Duration {
	return max(3*interval, 5*time.Second)
}

// errNoSocket: no daemon socket accepted the connection.
var errNoSocket = errors.New("no daemon socket")

// daemonStatus calls fleetmgr_status on the daemon's socket. dialed
// reports that the socket answered but no status came (fall back, saying
// why); errNoSocket that nothing answered (fall back silently); any other
// error with dialed false is the daemon's answer (a tool error) or ctx's.
func (c *Client) daemonStatus(ctx context.Context, req StatusRequest) (rep *status.Report, dialed bool, err error) {
	sock := c.socket()
	conn, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return nil, false, errNoSocket
	}
	wait := req.Interval
	if wait <= 0 {
		wait = c.cfg.Status.Interval.Duration
	}
	cctx, cancel := context.WithTimeout(ctx, wait+c.cfg.Status.FleetTimeout.Duration+10*time.Second)
	defer cancel()
	cl := mcp.NewClient(&mcp.Implementation{Name: "fleetmgr-status", Version: c.version}, nil)
	cs, err := cl.Connect(cctx, &mcp.IOTransport{Reader: conn, Writer: conn}, nil)
	if err != nil {
		conn.Close()
		return nil, true, err
	}
	defer cs.Close()
	args := proxy.StatusArgs{Fleets: req.Fleets, IntervalMS: int(req.Interval.Milliseconds())}
	if !req.Fresh && req.Interval == 0 {
		args.MaxAgeMS = int(CachedMaxAge(c.cfg.Status.Interval.Duration).Milliseconds())
	}
	res, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: proxy.StatusTool, Arguments: args})
	if err != nil {
		if ctx.Err() != nil {
			return nil, false, ctx.Err()
		}
		return nil, true, err
	}
	if res.IsError {
		return nil, false, fmt.Errorf("fleetmgr_status: %s", resultText(res))
	}
	rep = &status.Report{}
	if err := decodeStructured(res, rep); err != nil {
		return nil, false, fmt.Errorf("fleetmgr_status: unexpected result: %v", err)
	}
	return rep, false, nil
}

// ErrNoDaemon: no `fleetmgr serve` runs for the client's state dir.
var ErrNoDaemon = errors.New("no fleetmgr serve runs for this state dir")

// noDaemon is Reload's ErrNoDaemon, in words naming the state dir and the
// file a serve would read.
type noDaemon struct{ stateDir, config string }

func (e *noDaemon) Error() string {
	return fmt.Sprintf("no fleetmgr serve runs for state dir %s, so there is nothing to reload (a serve reads %s when it starts: fleetmgr serve --detach)", e.stateDir, e.config)
}
func (e *noDaemon) Is(target error) bool { return target == ErrNoDaemon }

// ReloadRejected is the daemon's refusal of a reload: the file cannot be
// applied (Problems lists why, with file:line) and the daemon keeps the
// config in force.
type ReloadRejected struct {
	PID      int
	Config   string // the file the daemon was asked to re-read
	Problems string
}

func (e *ReloadRejected) Error() string {
	return fmt.Sprintf("fleetmgr serve (pid %d) kept its config; %s cannot be applied:\n%s", e.PID, e.Config, e.Problems)
}

// ExitStatus is fleetmgr's exit status on a rejected reload: 2, as on a
// fleets.toml that does not load.
func (e *ReloadRejected) ExitStatus() int { return 2 }

var errReloadTimeout = errors.New("reload timed out")

// ReloadTimeout bounds a reload asked of serve: it re-reads the file and
// lists each running fleet's tools again, at once, each within
// proxy.ListToolsTimeout, before it answers; the rest is room for a
// loaded machine.
const ReloadTimeout = proxy.ListToolsTimeout + 10*time.Second

// ReloadAwaited is what a reload waits for, as progress lines say it
// (cmdutil.Waiter), with ReloadTimeout.
const ReloadAwaited = "fleetmgr serve to re-read fleets.toml and list each running fleet's tools again"

// Reload makes the running daemon re-read its fleets.toml (the tool
// fleetmgr_reload) and returns what changed, and the same in words (one
// line per change, lifecycle.ReloadReport.Lines). It waits at most
// ReloadTimeout. Errors, worded for the operator: ErrNoDaemon
// (errors.Is), a *ReloadRejected, serve not answering in time, or not
// reaching the daemon (a *Refusal inside when its guard refused this
// caller).
func (c *Client) Reload(ctx context.Context) (*lifecycle.ReloadReport, string, error) {
	info, sock := serveapi.Running(c.cfg)
	if sock == "" {
		return nil, "", &noDaemon{stateDir: c.cfg.Manager.StateDir, config: c.cfg.Path}
	}
	ctx, cancel := context.WithTimeoutCause(ctx, ReloadTimeout, errReloadTimeout)
	defer cancel()
	late := func(err error) error {
		if errors.Is(context.Cause(ctx), errReloadTimeout) {
			return fmt.Errorf("fleetmgr serve (pid %d) did not answer the reload within %s; it may still apply the file (`fleetmgr list` shows the config in force, serve's log what it did): %w", info.PID, ReloadTimeout, err)
		}
		return err
	}
	cs, err := c.session(ctx, sock, nil)
	if err != nil {
		return nil, "", late(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: proxy.ReloadTool, Arguments: map[string]any{}})
	if err != nil {
		return nil, "", late(err)
	}
	text := resultText(res)
	if res.IsError {
		return nil, "", &ReloadRejected{PID: info.PID, Config: c.cfg.Path, Problems: text}
	}
	var rep lifecycle.ReloadReport
	if err := decodeStructured(res, &rep); err != nil {
		return nil, text, fmt.Errorf("fleetmgr_reload: unexpected result: %v", err)
	}
	return &rep, text, nil
}

// ReloadEdited is `fleetmgr add` and `remove`'s setup.Reloader, once they
// rewrote the file: it asks the running daemon to re-read it and says in
// one sentence what happened. A daemon that refuses the file is an error
// (the file was written all the same); one that cannot be asked is not:
// the sentence names it and `fleetmgr reload`, which retries.
func (c *Client) ReloadEdited(ctx context.Context) (string, error) {
	const none = "no fleetmgr serve runs for this state dir; the next one reads the file as it is now"
	if info, sock := serveapi.Running(c.cfg); sock != "" && info.Config != "" && !sameFile(info.Config, c.cfg.Path) {
		// Asked, it would re-read its own file and say it did.
		return fmt.Sprintf("fleetmgr serve (pid %d) of this state dir reads %s, not %s: it does not see this change (to serve this file: kill %d; fleetmgr --config %s serve --detach)",
			info.PID, info.Config, c.cfg.Path, info.PID, c.cfg.Path), nil
	}
	rep, _, err := c.Reload(ctx)
	var rej *ReloadRejected
	switch {
	case errors.Is(err, ErrNoDaemon):
		return none, nil
	case errors.As(err, &rej):
		return "", fmt.Errorf("fleetmgr serve (pid %d) did not take the file, and keeps its config in force: %s", rej.PID, rej.Problems)
	case err != nil:
		info := serveapi.ReadInfo(c.cfg)
		return fmt.Sprintf("fleetmgr serve (pid %d) still has the file as it was: run `fleetmgr reload` to make it re-read it (asking it failed: %v)", info.PID, err), nil
	}
	return fmt.Sprintf("fleetmgr serve (pid %d) re-read the file: %s", serveapi.ReadInfo(c.cfg).PID, strings.Join(rep.Lines(), "; ")), nil
}

// Logs writes the last lines of fleet's fleetd log (with herdr, its herdr
// server's) to w, then with follow what is appended, across rotations,
// until ctx ends; lines 0 is the whole file. Logs are read from the state
// dir, by this process, whether a daemon runs or not. A fleet the Manager
// does not know, or lines below 0, is a *UsageError. A NAME@HOST's tail is
// asked of this host's serve (which asks HOST; no --follow).
func (c *Client) Logs(ctx context.Context, fleet string, herdr bool, lines int, follow bool, w io.Writer) error {
	if lines < 0 {
		return &serveapi.UsageError{Err: fmt.Errorf("-n/--lines must be 0 (all) or more, not %d", lines)}
	}
	if err := c.Known(fleet); err != nil {
		return err
	}
	if isRemoteName(fleet) {
		return c.remoteLogs(ctx, fleet, herdr, lines, follow, w)
	}
	proc := "fleetd"
	if herdr {
		proc = "herdr"
	}
	tail, err := c.m.LogTail(fleet, proc, lines)
	if err != nil {
		return err
	}
	// The log holds what fleetd and herdr print, member-chosen text
	// among it: control characters are shown escaped, never sent to the
	// terminal as they are (the file itself is unchanged).
	for _, l := range tail {
		if _, err := fmt.Fprintln(w, termtext.Line(l)); err != nil {
			return err
		}
	}
	if !follow {
		return nil
	}
	tw := &termtext.Writer{W: w}
	err = c.m.FollowLog(ctx, fleet, proc, tw)
	if ferr := tw.Flush(); err == nil {
		err = ferr
	}
	return err
}

// DeleteVhost is `fleetmgr vhost delete`: it deletes fleet's vhost and
// every message queued in it (lifecycle.Manager.DeleteVhost, refused while
// the fleet runs), in this process whether a daemon runs or not. An
// unknown fleet, or confirmed false (no --yes-delete-messages), is a
// *UsageError; without [broker] it says there is no vhost before asking
// for the flag. It returns the vhost's name and whether it existed.
func (c *Client) DeleteVhost(ctx context.Context, fleet string, confirmed bool) (vhost string, existed bool, err error) {
	f, err := c.cfg.Fleet(fleet)
	if err != nil {
		return "", false, &serveapi.UsageError{Err: err}
	}
	if c.cfg.Broker == nil {
		// Nothing to confirm: say so before asking for the flag.
		return f.Vhost, false, fmt.Errorf("fleet %s: %w in %s: there is no vhost to delete", fleet, lifecycle.ErrNoBroker, c.cfg.Path)
	}
	if !confirmed {
		return f.Vhost, false, &serveapi.UsageError{Err: fmt.Errorf("refusing to delete vhost %q of fleet %s: it deletes every message queued in it; pass --yes-delete-messages to confirm", f.Vhost, fleet)}
	}
	existed, err = c.m.DeleteVhost(ctx, fleet)
	return f.Vhost, existed, err
}

// sameFile reports whether paths a and b name one file (os.SameFile, so a
// symbolic link or another spelling of the path is the same file); when
// either cannot be read, whether they are the same string.
func sameFile(a, b string) bool {
	if a == b {
		return true
	}
	fa, err1 := os.Stat(a)
	fb, err2 := os.Stat(b)
	if err1 != nil || err2 != nil {
		return false
	}
	return os.SameFile(fa, fb)
}
