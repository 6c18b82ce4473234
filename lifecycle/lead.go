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

// launchLead opens a tab labelled lead_tab in the fleet's herdr session, in
// the project directory, and runs lead_command there, unless such a tab
// exists already. fleetd itself is always told FLEET_LEAD_LAUNCH=0 (fleetd
// issue #160: a manager that starts fleets must own lead launch).
func (m *Manager) launchLead(ctx context.Context, f *registry.Fleet, d registry.TemplateData) (string, error) {
	hc := herdr.New(d.HerdrSocket)
	tabs, err := hc.TabList(ctx, "")
	if err != nil {
		return "", fmt.Errorf("fleet %s: lead: %w", f.Name, err)
	}
	for _, t := range tabs {
		if t.Label == f.LeadTab {
			return fmt.Sprintf("tab %q exists already (%s); not launching another lead", f.LeadTab, t.TabID), nil
		}
	}
	var paneID string
	if len(tabs) == 0 {
		w, err := hc.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Cwd: f.Project, Label: f.Name})
		if err != nil {
			return "", fmt.Errorf("fleet %s: lead: %w", f.Name, err)
		}
		t, err := hc.TabCreate(ctx, herdr.TabCreateParams{WorkspaceID: w.Workspace.WorkspaceID, Cwd: f.Project, Label: f.LeadTab, Env: m.leadEnv(f)})
		if err != nil {
			return "", fmt.Errorf("fleet %s: lead: %w", f.Name, err)
		}
		// The workspace's first tab is an empty shell; the lead gets its own.
		_ = hc.TabClose(ctx, w.Tab.TabID)
		paneID = t.RootPane.PaneID
	} else {
		t, err := hc.TabCreate(ctx, herdr.TabCreateParams{WorkspaceID: tabs[0].WorkspaceID, Cwd: f.Project, Label: f.LeadTab, Env: m.leadEnv(f)})
		if err != nil {
			return "", fmt.Errorf("fleet %s: lead: %w", f.Name, err)
		}
		paneID = t.RootPane.PaneID
	}
	settled := waitShellReady(ctx, hc, paneID, shellReadyTimeout)
	line := shellJoin(f.LeadCommand)
	if err := hc.PaneSendInput(ctx, paneID, line, []string{"Enter"}); err != nil {
		return "", fmt.Errorf("fleet %s: lead: %w", f.Name, err)
	}
	detail := fmt.Sprintf("tab %q pane %s in %s runs %s", f.LeadTab, paneID, f.Project, line)
	if !settled {
		detail += fmt.Sprintf(" (its shell did not settle at a prompt within %s; the command was typed anyway)", shellReadyTimeout)
		m.log.Warn("lead: shell not ready, command typed anyway", "fleet", f.Name, "pane", paneID, "timeout", shellReadyTimeout)
	}
	return detail, nil
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
