package lifecycle

import (
	"context"
	"fmt"
	"strings"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
)

// launchLead opens a tab labelled lead_tab in the fleet's herdr session, in
// the project directory, and runs lead_command there, unless such a tab
// exists already. fleetd itself is always told FLEET_LEAD_LAUNCH=0 (#160:
// a manager that starts fleets must own lead launch).
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
	waitShellReady(ctx, hc, paneID)
	line := shellJoin(f.LeadCommand)
	if err := hc.PaneSendInput(ctx, paneID, line, []string{"Enter"}); err != nil {
		return "", fmt.Errorf("fleet %s: lead: %w", f.Name, err)
	}
	return fmt.Sprintf("tab %q pane %s in %s runs %s", f.LeadTab, paneID, f.Project, line), nil
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
