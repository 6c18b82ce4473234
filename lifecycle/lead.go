package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
)

// launchLead launches the fleet's lead (startLead) and waits for its agent
// to show (leadWait.wait); the detail says both.
func (m *Manager) launchLead(ctx context.Context, f *registry.Fleet, d registry.TemplateData) (string, error) {
	detail, w, err := m.startLead(ctx, f, d)
	if err != nil || w == nil {
		return detail, err
	}
	return detail + "; " + w.wait(ctx), nil
}

// startLead opens a tab labelled lead_tab in the fleet's herdr session, in
// the project directory, and runs lead_command there, unless such a tab
// exists already (then w is nil). fleetd itself is always told
// FLEET_LEAD_LAUNCH=0 (fleetd issue #160: a manager that starts fleets must
// own lead launch). The returned leadWait follows the lead's pane from
// before the command was typed; the caller calls its wait, or close when it
// gives up.
func (m *Manager) startLead(ctx context.Context, f *registry.Fleet, d registry.TemplateData) (detail string, w *leadWait, err error) {
	hc := herdr.New(d.HerdrSocket)
	tabs, err := hc.TabList(ctx, "")
	if err != nil {
		return "", nil, fmt.Errorf("fleet %s: lead: %w", f.Name, err)
	}
	for _, t := range tabs {
		if t.Label == f.LeadTab {
			return fmt.Sprintf("tab %q exists already (%s); not launching another lead", f.LeadTab, t.TabID), nil, nil
		}
	}
	var paneID string
	if len(tabs) == 0 {
		ws, err := hc.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Cwd: f.Project, Label: f.Name})
		if err != nil {
			return "", nil, fmt.Errorf("fleet %s: lead: %w", f.Name, err)
		}
		t, err := hc.TabCreate(ctx, herdr.TabCreateParams{WorkspaceID: ws.Workspace.WorkspaceID, Cwd: f.Project, Label: f.LeadTab, Env: m.leadEnv(f)})
		if err != nil {
			return "", nil, fmt.Errorf("fleet %s: lead: %w", f.Name, err)
		}
		// The workspace's first tab is an empty shell; the lead gets its own.
		_ = hc.TabClose(ctx, ws.Tab.TabID)
		paneID = t.RootPane.PaneID
	} else {
		t, err := hc.TabCreate(ctx, herdr.TabCreateParams{WorkspaceID: tabs[0].WorkspaceID, Cwd: f.Project, Label: f.LeadTab, Env: m.leadEnv(f)})
		if err != nil {
			return "", nil, fmt.Errorf("fleet %s: lead: %w", f.Name, err)
		}
		paneID = t.RootPane.PaneID
	}
	// The lead's readiness is watched from before its command is typed, so that herdr's
	// events about it cannot pass unseen (herdr-interface §Y: subscribe first).
	watch := hc.WatchAgent(ctx, paneID)
	settled := waitShellReady(ctx, hc, paneID, shellReadyTimeout)
	line := shellJoin(f.LeadCommand)
	if err := hc.PaneSendInput(ctx, paneID, line, []string{"Enter"}); err != nil {
		watch.Close()
		return "", nil, fmt.Errorf("fleet %s: lead: %w", f.Name, err)
	}
	detail = fmt.Sprintf("tab %q pane %s in %s runs %s", f.LeadTab, paneID, f.Project, line)
	if !settled {
		detail += fmt.Sprintf(" (its shell did not settle at a prompt within %s; the command was typed anyway)", shellReadyTimeout)
		m.log.Warn("lead: shell not ready, command typed anyway", "fleet", f.Name, "pane", paneID, "timeout", shellReadyTimeout)
	}
	timeout := f.LeadReadyTimeout.Duration
	if timeout <= 0 {
		timeout = registry.DefaultLeadReady
	}
	return detail, &leadWait{m: m, fleet: f.Name, pane: paneID, watch: watch, timeout: timeout}, nil
}

// leadWait is a launched lead whose agent is awaited: its pane has been
// watched since before lead_command was typed.
type leadWait struct {
	m       *Manager
	fleet   string
	pane    string
	watch   *herdr.AgentWatch
	timeout time.Duration // [fleets.NAME] lead_ready_timeout
}

// wait waits up to the fleet's lead_ready_timeout for herdr to show an
// agent in the lead's pane (pushed by herdr from protocol 20, else read
// with pane.get), logs what it saw and words it for a start step. It never
// fails the launch: a lead that is slow or is no agent herdr detects is
// said, not undone. It closes the watch.
func (w *leadWait) wait(ctx context.Context) string {
	defer w.close()
	r, err := w.watch.Wait(ctx, w.timeout)
	if err != nil {
		w.m.log.Warn("lead: agent not awaited", "fleet", w.fleet, "pane", w.pane, "err", err)
		return fmt.Sprintf("its agent was not awaited (%v)", err)
	}
	if r.Ready {
		w.m.log.Info("lead: agent ready", "fleet", w.fleet, "pane", w.pane, "agent", r.Agent, "status", r.Status, "via", r.Via, "took", r.Took.Round(time.Millisecond), "fallback", r.Fallback)
	} else {
		w.m.log.Warn("lead: no agent seen in its pane", "fleet", w.fleet, "pane", w.pane, "gone", r.Gone, "status", r.Status, "via", r.Via, "timeout", w.timeout, "fallback", r.Fallback)
	}
	return leadReadiness(r, w.timeout)
}

// close ends the watch without waiting (a start that failed after the
// launch). Safe after wait.
func (w *leadWait) close() { w.watch.Close() }

// leadReadiness words what a lead launch saw of its agent (a start step's detail), e.g.
// "agent claude ready (idle) after 2.1s, pushed by herdr".
func leadReadiness(r herdr.AgentReady, timeout time.Duration) string {
	how := "pushed by herdr"
	if r.Via == herdr.ViaPolling {
		how = "read with pane.get"
		if r.Fallback != "" {
			how += " (" + r.Fallback + ")"
		}
	}
	agent := "agent"
	if r.Agent != "" {
		agent += " " + r.Agent
	}
	switch {
	case r.Ready:
		return fmt.Sprintf("%s ready (%s) after %s, %s", agent, r.Status, r.Took.Round(10*time.Millisecond), how)
	case r.Gone:
		return fmt.Sprintf("its pane closed after %s before an agent showed (%s): see the lead's command", r.Took.Round(10*time.Millisecond), how)
	default:
		st := r.Status
		if st == "" {
			st = "not read"
		}
		return fmt.Sprintf("no agent showed in its pane within %s (agent_status %s, %s): the lead may still be starting, or its command is not an agent herdr detects", timeout, st, how)
	}
}

// Readiness of a new pane's shell (waitShellReady).
const (
	shellReadyTimeout = 10 * time.Second       // give up waiting, type anyway
	shellSettle       = 250 * time.Millisecond // prompt drawn and quiet this long
	shellPoll         = 50 * time.Millisecond
)

// waitShellReady waits until the shell of a new pane is ready to read a command line, so that
// input sent next is not lost while it initialises (a login shell's startup files may read or
// flush typeahead), and reports whether it got there within timeout (or before ctx ended).
//
// Ready means, for shellSettle without a break: pane.process_info shows the shell alone in the
// pane's foreground process group (no startup command running in the foreground: a job-control
// shell gives each its own group, an early one runs them in its own, where they are listed),
// and the visible screen is not blank and has not changed (the prompt drawn, nothing printed
// since). herdr's pane.read answers revision 0 always (herdr issue #2804), so the revision
// cannot be waited on. When process_info fails (a herdr without it), the screen alone decides.
func waitShellReady(ctx context.Context, hc *herdr.Client, paneID string, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	var last string
	var since time.Time
	for time.Now().Before(deadline) && ctx.Err() == nil {
		ok := false
		r, err := hc.PaneRead(ctx, herdr.PaneReadParams{PaneID: paneID, Source: herdr.SourceVisible, StripANSI: true})
		if err == nil && strings.TrimSpace(r.Text) != "" {
			ok = shellIdle(ctx, hc, paneID)
			if r.Text != last {
				last, since = r.Text, time.Time{}
			}
		}
		switch {
		case !ok:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= shellSettle:
			return true
		}
		select {
		case <-ctx.Done():
		case <-time.After(shellPoll):
		}
	}
	return false
}

// shellIdle reports whether the pane's shell is alone in its pane's foreground group; true
// also when process_info cannot tell (an error other than pane_not_found).
func shellIdle(ctx context.Context, hc *herdr.Client, paneID string) bool {
	pi, err := hc.PaneProcessInfo(ctx, paneID)
	if err != nil {
		return !herdr.IsCode(err, "pane_not_found")
	}
	return pi.ShellPID > 0 && pi.ForegroundProcessGroupID == pi.ShellPID &&
		len(pi.ForegroundProcesses) == 1 && pi.ForegroundProcesses[0].PID == pi.ShellPID
}

// shellJoin quotes argv for a POSIX shell command line.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:@%+,") == "" {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

func procKey(pid int) (*Proc, error) {
	k, err := procfs.KeyOf(pid)
	if err != nil {
		return nil, err
	}
	return &Proc{PID: k.PID, StartTime: k.StartTime}, nil
}
