package serveclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/termtext"
)

// Client is how the CLI reaches fleets: through the running `fleetmgr
// serve` of its state dir when there is one (Running), so the daemon's
// supervisor owns what a verb starts and its guard judges the caller,
// else in this process through the lifecycle.Manager (the next serve
// adopts what it started). Each call to the daemon is one MCP session over
// its unix socket calling one manager tool (fleetmgr_start, …); what the
// CLI gets back is typed: lifecycle.State, lifecycle.Step, status.Report,
// lifecycle.ReloadReport, never text to parse.
type Client struct {
	cfg     *registry.Config
	m       *lifecycle.Manager
	version string
	// handshake bounds the MCP handshake with the daemon (DefaultHandshake).
	handshake time.Duration
}

// DefaultHandshake bounds a client's MCP handshake with the daemon: a
// serve whose socket accepts but does not answer (stopped, hung, or a
// stranger on its socket) fails the verb after it instead of hanging it.
const DefaultHandshake = 10 * time.Second

// cliClientName is the name the CLI gives serve in initialize (and in
// the journal's origins of changes it journals itself).
const cliClientName = "fleetmgr-cli"

// NewClient is the client of cfg's state dir; m acts when no daemon runs
// (NewManager), version names the CLI in its MCP handshakes.
func NewClient(cfg *registry.Config, m *lifecycle.Manager, version string) *Client {
	return &Client{cfg: cfg, m: m, version: version, handshake: DefaultHandshake}
}

// Outcome is one fleet's result of Act, `fleetmgr start|stop|restart
// --json`'s element.
type Outcome struct {
	Fleet string          `json:"fleet"`
	OK    bool            `json:"ok"`
	State lifecycle.Phase `json:"state"`
	PID   int             `json:"pid,omitempty"`
	Port  int             `json:"port"`
	Error string          `json:"error,omitempty"`
	// NeedsConfirm: not done, because the stop or restart would end live
	// members and was not confirmed (Error names them); the same request
	// with Confirm goes on.
	NeedsConfirm bool `json:"needs_confirm,omitempty"`
	// WhatNext says, for a start or restart that did not become healthy,
	// what happens next in one sentence (serve's retries left and when
	// the next is due, or that it gave up; lifecycle.Shown.Next); Error
	// ends with it too.
	WhatNext string `json:"what_next,omitempty"`
	// StartRetriesLeft is, beside WhatNext, how many more times serve
	// retries the start (the pending retry included; 0 once it gave up),
	// as status --json's start_retries_left; absent when start_retries
	// does not apply (no serve, restart = never).
	StartRetriesLeft *int `json:"start_retries_left,omitempty"`
	// Steps are the completed lifecycle steps, in order; never null.
	Steps []lifecycle.Step `json:"steps"`
}

// ActRequest is one Act call.
type ActRequest struct {
	Verb serveapi.Verb
	// Fleets are acted on in order; each must be known to the Manager
	// (configured, or for Stop removed from the file while it runs).
	Fleets []string
	// Lead also launches each fleet's lead (Start, Restart).
	Lead bool
	// Confirm: the operator confirmed (--yes, or answered a prompt) that
	// a Stop or Restart may end the fleets' live members. Without it such
	// a fleet is not acted on: its outcome's error is a *ConfirmError.
	Confirm bool
	// Ask, when set, is called for a fleet refused for want of
	// confirmation (its outcome, whose Error says how many members would
	// end and which); true tries that fleet again, confirmed. `fleetmgr
	// stop` and `restart` ask on a terminal.
	Ask func(Outcome) bool
	// Progress, when set, gets each completed step as it happens, from
	// the daemon (relayed as MCP progress, decoded from the notification's
	// _meta, see proxy.StepMetaKey) or from this process alike.
	Progress func(lifecycle.Step)
	// Done, when set, gets each fleet's outcome once it is known.
	Done func(Outcome)
	// Begin, when set, is told each fleet as its verb begins.
	Begin func(fleet string)
}

// PrintTo sets r's Progress and Done to write to w a line per completed
// step ("kb: fleetd         healthy on 127.0.0.1:8770 (pid 42) (1.2s)")
// and one per fleet that ended well naming its state ("kb: running"),
// fleet text escaped for a terminal (termtext); a fleet that failed is
// left to Act's error.
func (r *ActRequest) PrintTo(w io.Writer) {
	r.Progress = func(s lifecycle.Step) {
		fmt.Fprintf(w, "%s: %-14s %s (%.1fs)\n", termtext.Cell(s.Fleet), termtext.Cell(s.Name), termtext.Text(s.Detail), s.Elapsed.Seconds())
	}
	r.Done = func(o Outcome) {
		if o.OK {
			fmt.Fprintf(w, "%s: %s\n", termtext.Cell(o.Fleet), termtext.Cell(string(o.State)))
		}
	}
}

// Awaited is what a verb on fleet waits for once its step last (""
// before the first) completed, in words for a progress line: "kb:
// fleetd to answer /healthz".
func Awaited(verb serveapi.Verb, fleet, last string) string {
	switch {
	case AwaitsExit(verb, last):
		return fleet + ": fleetd to exit (SIGTERM, then SIGKILL after stop_grace)"
	case verb == serveapi.Stop && last == "fleetd":
		return fleet + ": its herdr session and pane processes to end"
	case last == "" || last == "vhost" || last == "state":
		return fleet + ": its herdr session to answer"
	case last == "herdr session" && verb != serveapi.Stop, last == "config":
		return fleet + ": fleetd to answer /healthz with its name"
	case last == "fleetd" && verb != serveapi.Stop:
		return fleet + ": the lead and the last checks"
	case AwaitsLead(verb, last):
		return fleet + ": its lead's agent to show in herdr (lead_ready_timeout)"
	}
	return fmt.Sprintf("%s: the %s to go on after %s", fleet, verb, last)
}

// AwaitedRemote is Awaited for a fleet of another host (fleet as the
// operator named it, on host): the wait is for host's answer, bounded by
// [federation] control_timeout, and the host's steps come with it.
func AwaitedRemote(verb serveapi.Verb, fleet, host string) string {
	return fmt.Sprintf("%s: host %s's answer (its fleetmgr runs the %s; [federation] control_timeout)", fleet, host, verb)
}

// AwaitsExit reports whether what a verb waits for once step last
// completed is fleetd's exit (Awaited's first case): that wait is bounded
// by stop_grace, every other by start_timeout, and a progress line names
// the bound of the wait it is in.
func AwaitsExit(verb serveapi.Verb, last string) bool {
	return last == "" && (verb == serveapi.Stop || verb == serveapi.Restart)
}

// AwaitsLead reports whether what a start or restart waits for once step
// last completed is the lead's agent (the "lead ready" step, bounded by
// the fleet's lead_ready_timeout, which may outlast start_timeout).
func AwaitsLead(verb serveapi.Verb, last string) bool {
	return verb != serveapi.Stop && (last == "lead" || last == "record")
}

// Fleets resolves the fleets a verb names: names as given, or with all
// every configured fleet of this host (for Stop also every fleet removed
// from the file while it runs; none configured is an empty list, not an
// error); --all never reaches a fleet fleets.toml declares on another
// host, which this host's serve would ask that host to act on. Names
// and all together, or a name the Manager does not know (Known), are a
// *UsageError; neither is an error saying what is configured. A name
// given more than once is acted on once.
func (c *Client) Fleets(verb serveapi.Verb, names []string, all bool) ([]string, error) {
	switch {
	case all && len(names) > 0:
		return nil, &serveapi.UsageError{Err: fmt.Errorf("give fleet names or --all, not both (got %v and --all)", names)}
	case all && verb == serveapi.Stop:
		return c.here(c.m.Names()), nil
	case all:
		return c.here(c.cfg.Names()), nil
	case len(names) == 0:
		return nil, &serveapi.UsageError{Err: fmt.Errorf("name a fleet to %s (or --all); configured: %v", verb, c.cfg.Names())}
	}
	names = onceEach(names)
	return names, c.Known(names...)
}

// onceEach is names without repeats, in the order first named.
func onceEach(names []string) []string {
	seen := make(map[string]bool, len(names))
	out := make([]string, 0, len(names))
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

// here keeps the names whose fleet runs on this host (registry host
// "local", "localhost", "", this machine's host name, or this manager's
// [federation] host).
func (c *Client) here(names []string) []string {
	out := []string{}
	hn, _ := os.Hostname()
	short, _, _ := strings.Cut(hn, ".")
	for _, n := range names {
		f, err := c.m.Fleet(n)
		if err != nil {
			continue
		}
		switch h := f.Host; {
		case h == "" || h == registry.LocalHost || h == "localhost" || h == hn || h == short,
			c.cfg.Federation != nil && h == c.cfg.Federation.Host:
			out = append(out, n)
		}
	}
	return out
}

// Known returns a *UsageError for the first of names that is neither a
// fleet of the config nor one removed from it while it runs (which only
// stop, list, status and logs accept; the Manager says so), nor a
// NAME@HOST of another host when the config has [federation] (this
// host's serve says whether HOST is a peer).
func (c *Client) Known(names ...string) error {
	for _, n := range names {
		if isRemoteName(n) {
			if err := c.checkRemoteName(n); err != nil {
				return err
			}
			continue
		}
		if _, err := c.m.Fleet(n); err != nil {
			return &serveapi.UsageError{Err: err}
		}
	}
	return nil
}

// Act runs req.Verb on each fleet in turn and returns one Outcome per
// fleet, and an error naming the fleets that failed, one line per
// distinct message ("a, b: …"). Not reaching the daemon (or its guard
// refusing this caller: a *Refusal inside) would happen for every fleet,
// so the fleets after the first are not tried and fail with that error.
func (c *Client) Act(ctx context.Context, req ActRequest) ([]Outcome, error) {
	outs := []Outcome{}
	var errs []fleetError
	for i, n := range req.Fleets {
		o := Outcome{Fleet: n, Steps: []lifecycle.Step{}}
		if req.Begin != nil {
			req.Begin(n)
		}
		if f, err := c.m.Fleet(n); err == nil {
			o.Port = f.Port
		}
		progress := func(s lifecycle.Step) {
			o.Steps = append(o.Steps, s)
			if req.Progress != nil {
				req.Progress(s)
			}
		}
		st, err := c.act(ctx, req.Verb, n, req.Lead, req.Confirm, progress)
		if err != nil && !req.Confirm && req.Ask != nil && NeedsConfirm(err) &&
			req.Ask(Outcome{Fleet: n, Port: o.Port, Error: err.Error(), NeedsConfirm: true, Steps: []lifecycle.Step{}}) {
			st, err = c.act(ctx, req.Verb, n, req.Lead, true, progress)
		}
		if st != nil {
			o.State = st.Phase
			if st.Port != 0 {
				o.Port = st.Port
			}
			if st.Fleetd != nil {
				o.PID = st.Fleetd.PID
			}
		}
		if err == nil {
			o.OK = true
		} else {
			o.NeedsConfirm = NeedsConfirm(err)
			if o.State == "" {
				// The daemon's error result carries no state: the fleet's
				// record says what the failure left.
				if ls, serr := c.m.State(n); serr == nil {
					o.State = ls.Shown.Phase
				}
			}
			o.Error = err.Error()
			if req.Verb != serveapi.Stop && !isRemoteName(n) {
				if ls, serr := c.m.State(n); serr == nil {
					o.WhatNext = ls.Shown.Next // as the record says it now
					if ls.Shown.StartRetrying {
						left := ls.Shown.StartRetriesLeft
						o.StartRetriesLeft = &left
					}
				}
			}
			errs = append(errs, fleetError{fleet: n, err: err})
		}
		outs = append(outs, o)
		if req.Done != nil {
			req.Done(o)
		}
		var du *daemonUnusable
		if errors.As(err, &du) {
			for _, rest := range req.Fleets[i+1:] {
				r := Outcome{Fleet: rest, Error: o.Error, Steps: []lifecycle.Step{}}
				if f, ferr := c.m.Fleet(rest); ferr == nil {
					r.Port = f.Port
				}
				outs = append(outs, r)
				errs = append(errs, fleetError{fleet: rest, err: err})
			}
			break
		}
	}
	return outs, joinFleetErrors(errs)
}

// act runs verb on one fleet: through the daemon when one runs, else
// with the Manager.
func (c *Client) act(ctx context.Context, verb serveapi.Verb, fleet string, lead, confirm bool, progress func(lifecycle.Step)) (*lifecycle.State, error) {
	if info, sock := serveapi.Running(c.cfg); sock != "" {
		if verb != serveapi.Stop && !isRemoteName(fleet) && info.Config != "" && !sameFile(info.Config, c.cfg.Path) {
			// It would start its own file's fleet of that name: another
			// project, command or port than this command read. Stop is the
			// same processes whatever the file: it goes through.
			return nil, fmt.Errorf("fleetmgr serve (pid %d) reads %s, not %s (which this command read): a %s through it would use that file's fleet %s; run `fleetmgr --config %s %s %s`, or restart the daemon on this file (kill %d; fleetmgr --config %s serve --detach)",
				info.PID, info.Config, c.cfg.Path, verb, fleet, info.Config, verb, fleet, info.PID, c.cfg.Path)
		}
		st, err := c.actVia(ctx, info.PID, sock, verb, fleet, lead, confirm, progress)
		if err != nil && strings.Contains(err.Error(), fmt.Sprintf("unknown fleet %q", fleet)) {
			err = c.unknownToDaemon(fleet, verb, err)
		}
		return st, err
	}
	if isRemoteName(fleet) {
		return nil, c.errNeedsServe(fleet)
	}
	opt := lifecycle.Options{Lead: lead, Confirm: confirm, Progress: progress, Origin: "cli"}
	switch verb {
	case serveapi.Start:
		st, err := c.m.Start(ctx, fleet, opt)
		return st, c.m.WithNext(fleet, err) // what happens next (serve's path says it itself)
	case serveapi.Stop:
		return c.m.Stop(ctx, fleet, opt)
	case serveapi.Restart:
		st, err := c.m.Restart(ctx, fleet, opt)
		return st, c.m.WithNext(fleet, err)
	}
	return nil, fmt.Errorf("unknown verb %q", verb)
}

// actVia calls fleetmgr_<verb> on the daemon on sock. Each progress
// notification's step (proxy.StepMetaKey) goes to progress as it
// arrives; steps whose notifications lost the race with the reply are
// taken from the result's steps, so progress sees every step once, in
// order. A notification without the key (a serve older than this CLI)
// is a step named by its whole message.
func (c *Client) actVia(ctx context.Context, pid int, sock string, verb serveapi.Verb, fleet string, lead, confirm bool, progress func(lifecycle.Step)) (*lifecycle.State, error) {
	var mu sync.Mutex // serialises progress; done drops notifications that lose the race with the reply
	seen, done := 0, false
	onProgress := func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
		s := stepOf(req.Params, fleet)
		mu.Lock()
		defer mu.Unlock()
		if done {
			return
		}
		seen++
		progress(s)
	}
	cs, err := c.session(ctx, sock, onProgress)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	args := map[string]any{"fleet": fleet}
	if lead {
		args["lead"] = true
	}
	if confirm && verb != serveapi.Start {
		args["confirm"] = true
	}
	params := &mcp.CallToolParams{Name: proxy.ManagerToolPrefix + string(verb), Arguments: args}
	params.SetProgressToken("cli-" + string(verb))
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		return nil, goneDuring(ctx, err, pid, verb, fleet)
	}
	var ar proxy.ActionResult
	_ = decodeStructured(res, &ar)
	mu.Lock()
	done = true
	for i := seen; i < len(ar.Steps); i++ {
		progress(ar.Steps[i])
	}
	mu.Unlock()
	st := &lifecycle.State{Name: fleet, Phase: ar.State, Port: ar.Port}
	if ar.PID != 0 {
		st.Fleetd = &lifecycle.Proc{PID: ar.PID}
	}
	if res.IsError {
		text := resultText(res)
		if strings.Contains(text, lifecycle.ConfirmHint) {
			return nil, &ConfirmError{Msg: text}
		}
		return st, errors.New(text)
	}
	return st, nil
}

// ConfirmError is a stop or restart a serve (or a peer) refused because
// it would end live members and it was not confirmed: the
// lifecycle.MembersLiveError's text as the manager tool answered it.
// Nothing was done; its exit status is 2.
type ConfirmError struct{ Msg string }

func (e *ConfirmError) Error() string { return e.Msg }

// ExitStatus is 2: the command needs --yes (or a terminal to ask on).
func (e *ConfirmError) ExitStatus() int { return 2 }

// NeedsConfirm marks the refusal for callers that ask and try again.
func (e *ConfirmError) NeedsConfirm() bool { return true }

// NeedsConfirm reports whether err (or one it wraps) is a stop or restart
// refused for want of confirmation (lifecycle.MembersLiveError,
// ConfirmError): asked again with Confirm it goes on.
func NeedsConfirm(err error) bool {
	var nc interface{ NeedsConfirm() bool }
	return errors.As(err, &nc) && nc.NeedsConfirm()
}

// stepOf is the lifecycle step a progress notification of a manager tool
// carries under proxy.StepMetaKey.
func stepOf(p *mcp.ProgressNotificationParams, fleet string) lifecycle.Step {
	s := lifecycle.Step{Fleet: fleet, Name: p.Message}
	if v, ok := p.Meta[proxy.StepMetaKey]; ok {
		if b, err := json.Marshal(v); err == nil {
			var got lifecycle.Step
			if json.Unmarshal(b, &got) == nil && got.Name != "" {
				s = got
			}
		}
	}
	return s
}

// unknownToDaemon explains a daemon's "unknown fleet" answer for fleet n,
// which this client's file defines. The daemon re-reads its file before
// it answers so (fleetmgr_start and the other manager tools do), so it
// reads another file, or predates reload: the error says what to run.
func (c *Client) unknownToDaemon(n string, verb serveapi.Verb, err error) error {
	info, cfg := serveapi.ReadInfo(c.cfg), c.cfg
	switch {
	case info.Config != "" && !sameFile(info.Config, cfg.Path):
		return fmt.Errorf("%w\nfleetmgr serve (pid %d) reads %s, not %s (which this command read and which defines %s): run `fleetmgr --config %s %s %s` to use the daemon's file, or restart the daemon on this one (kill %d; fleetmgr --config %s serve --detach)",
			err, info.PID, info.Config, cfg.Path, n, info.Config, verb, n, info.PID, cfg.Path)
	case info.Config == "":
		return fmt.Errorf("%w\nfleetmgr serve (pid %d) is older than config reload and still reads the file as it was when it started: restart it (kill %d; fleetmgr serve --detach), then `fleetmgr %s %s`",
			err, info.PID, info.PID, verb, n)
	}
	return fmt.Errorf("%w\n%s defines %s, but fleetmgr serve (pid %d) did not take it: `fleetmgr reload` says why", err, cfg.Path, n, info.PID)
}

// daemonUnusable is a failure to reach the daemon at all (dial, or an MCP
// handshake its guard refused): every other fleet would meet it too.
type daemonUnusable struct{ err error }

func (e *daemonUnusable) Error() string { return e.err.Error() }
func (e *daemonUnusable) Unwrap() error { return e.err }

// session opens an MCP session to the daemon on sock (onProgress, when
// set, gets its progress notifications). Not reaching the daemon is a
// *daemonUnusable, with a *Refusal inside when its guard refused this
// caller.
func (c *Client) session(ctx context.Context, sock string, onProgress func(context.Context, *mcp.ProgressNotificationClientRequest)) (*mcp.ClientSession, error) {
	conn, err := net.DialTimeout("unix", sock, 2*time.Second)
	if err != nil {
		return nil, &daemonUnusable{fmt.Errorf("fleetmgr serve on %s: %w", sock, err)}
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: cliClientName, Version: c.version}, &mcp.ClientOptions{ProgressNotificationHandler: onProgress})
	// The handshake alone is bounded (a verb itself may rightly take
	// start_timeout and more); a close of conn ends a handshake stuck in
	// a read whatever the SDK does with its context.
	hctx, cancel := context.WithTimeout(ctx, c.handshake)
	defer cancel()
	stop := context.AfterFunc(hctx, func() {
		if hctx.Err() == context.DeadlineExceeded {
			conn.Close()
		}
	})
	cs, err := cl.Connect(hctx, &mcp.IOTransport{Reader: conn, Writer: conn}, nil)
	stop()
	if err != nil && hctx.Err() == context.DeadlineExceeded && ctx.Err() == nil {
		conn.Close()
		info := serveapi.ReadInfo(c.cfg)
		return nil, &daemonUnusable{fmt.Errorf("fleetmgr serve (pid %d) on %s did not answer the MCP handshake within %s: it may be stopped (SIGSTOP) or hung, or another program holds its socket; see %s, and end it (kill %d) if it stays silent",
			info.PID, sock, c.handshake, filepath.Join(c.cfg.Manager.StateDir, "fleetmgr.log"), info.PID)}
	}
	if err != nil {
		conn.Close()
		var we *jsonrpc.Error
		if errors.As(err, &we) && we.Code == serveapi.RefusalCode {
			err = &serveapi.Refusal{Err: err}
		}
		return nil, &daemonUnusable{fmt.Errorf("fleetmgr serve on %s refused or failed: %w", sock, err)}
	}
	return cs, nil
}

// goneDuring words err, the failure of a manager tool call on the daemon
// pid (as serve.json named it before the call: a serve that stopped has
// removed it), when the daemon went away during it (killed or stopped
// mid-start: the connection closed before the answer): what the verb
// left is in the fleet's record, which `fleetmgr list` shows, and running
// the verb again acts in-process or through the next serve. Any other
// error (ctx's among them) is returned as it is.
func goneDuring(ctx context.Context, err error, pid int, verb serveapi.Verb, fleet string) error {
	if ctx.Err() != nil || !(errors.Is(err, mcp.ErrConnectionClosed) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		return err
	}
	return fmt.Errorf("fleetmgr serve (pid %d) went away during the %s of %s (%v); `fleetmgr list` shows what it left, and `fleetmgr %s %s` runs it again (in this process when no serve runs)",
		pid, verb, fleet, err, verb, fleet)
}

// decodeStructured decodes a tool result's structuredContent into v.
func decodeStructured(res *mcp.CallToolResult, v any) error {
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// resultText joins a tool result's text content.
func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// fleetError is one fleet's failure in a verb run on several fleets.
type fleetError struct {
	fleet string
	err   error
}

// fleetErrors is the error of a verb run on several fleets: one line per
// distinct message, naming the fleets that failed with it ("a, b: …"), so
// a cause they share (a daemon refusing this caller, a state dir that
// cannot be written) is said once, not once per fleet.
type fleetErrors struct {
	lines []string
	errs  []error
}

func (e *fleetErrors) Error() string   { return strings.Join(e.lines, "\n") }
func (e *fleetErrors) Unwrap() []error { return e.errs }

// joinFleetErrors joins the failures of a verb run on fleets: nil for
// none, else a *fleetErrors whose lines name the fleets (so the one
// failure of a `stop --all` says whose it is). A message that already
// starts with "fleet NAME" is not prefixed again.
func joinFleetErrors(errs []fleetError) error {
	if len(errs) == 0 {
		return nil
	}
	out := &fleetErrors{}
	var order []string
	fleets := map[string][]string{} // message → fleets
	for _, e := range errs {
		msg := e.err.Error()
		if _, seen := fleets[msg]; !seen {
			order = append(order, msg)
		}
		fleets[msg] = append(fleets[msg], e.fleet)
		out.errs = append(out.errs, e.err)
	}
	for _, msg := range order {
		names := fleets[msg]
		if len(names) == 1 && (strings.HasPrefix(msg, "fleet "+names[0]+" ") || strings.HasPrefix(msg, "fleet "+names[0]+":")) {
			out.lines = append(out.lines, msg)
			continue
		}
		out.lines = append(out.lines, strings.Join(names, ", ")+": "+msg)
	}
	return out
}
