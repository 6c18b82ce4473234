package fleetd

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/fleetmgr/fleetmgr/herdr"
)

// memberPrefix starts every member tab label: "member-<nonce>-<id>".
const memberPrefix = "member-"

// leadCommand is what an auto-launched lead runs (a stand-in for a Claude
// Code session).
const leadCommand = "echo fleetd-standin-lead; exec sh"

// caller is a resolved caller identity.
type caller struct {
	Role   string
	PID    int
	PaneID string
	TabID  string
}

// resolveCaller maps a peer pid to a role the way fleetd's CallerResolver
// does (docs/fleetd.md "Caller identity"): a pane owns pid only if pid
// is its shell_pid or one of its foreground_processes. Panes are those of the
// herdr session the daemon drives. A pid of 0 (unresolved peer) or a herdr
// failure gives primary (loopback trust), logged.
func (d *Daemon) resolveCaller(ctx context.Context, pid int, peerErr string) caller {
	if pid <= 0 {
		d.log.Printf("caller pid unresolved (%s): primary by loopback trust", peerErr)
		return caller{Role: RolePrimary}
	}
	panes, err := d.herdr.PaneList(ctx, "")
	if err != nil {
		d.log.Printf("caller pid %d: herdr pane.list: %v: primary by loopback trust", pid, err)
		return caller{Role: RolePrimary, PID: pid}
	}
	for _, p := range panes {
		pi, err := d.herdr.PaneProcessInfo(ctx, p.PaneID)
		if err != nil {
			continue // pane closed meanwhile
		}
		if !paneOwnsPid(pi, pid) {
			continue
		}
		c := caller{Role: RoleWorker, PID: pid, PaneID: p.PaneID, TabID: p.TabID}
		tabs, err := d.herdr.TabList(ctx, p.WorkspaceID)
		if err != nil {
			d.log.Printf("caller pid %d in pane %s: herdr tab.list: %v: worker", pid, p.PaneID, err)
			return c
		}
		for _, t := range tabs {
			if t.TabID == p.TabID && t.Label == d.cfg.LeadTab {
				c.Role = RoleLead
			}
		}
		return c
	}
	return caller{Role: RolePrimary, PID: pid}
}

// paneOwnsPid is fleetd's PaneLocator.paneOwnsPid: the shell pid and the
// foreground pids only. Descendants in other process groups do not count.
func paneOwnsPid(pi *herdr.ProcessInfo, pid int) bool {
	if pi.ShellPID == pid {
		return true
	}
	return slices.ContainsFunc(pi.ForegroundProcesses, func(f herdr.ForegroundProcess) bool { return f.PID == pid })
}

// memberLabel is the tab label of member id spawned by this daemon.
func (d *Daemon) memberLabel(id string) string { return memberPrefix + d.nonce + "-" + memberDir(id) }

// parseMemberLabel splits "member-<nonce>-<id>"; ok is false for other
// labels.
func parseMemberLabel(label string) (nonce, id string, ok bool) {
	rest, ok := strings.CutPrefix(label, memberPrefix)
	if !ok {
		return "", "", false
	}
	nonce, id, _ = strings.Cut(rest, "-")
	return nonce, id, true
}

// reapOrphans closes every member tab of the herdr session whose nonce is
// not this daemon's, in any workspace (fleetd's startup orphan reap; it
// cannot tell a prior self's leftovers from a co-tenant's live members). It
// returns the number of tabs closed.
func (d *Daemon) reapOrphans(ctx context.Context) (int, error) {
	d.opMu.Lock()
	defer d.opMu.Unlock()
	tabs, err := d.herdr.TabList(ctx, "")
	if err != nil {
		return 0, err
	}
	panes, err := d.herdr.PaneList(ctx, "")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range tabs {
		nonce, _, ok := parseMemberLabel(t.Label)
		if !ok || nonce == d.nonce {
			continue
		}
		var paneIDs []string
		for _, p := range panes {
			if p.TabID == t.TabID {
				paneIDs = append(paneIDs, p.PaneID)
			}
		}
		if err := d.herdr.TabClose(ctx, t.TabID); err != nil && !herdr.IsCode(err, "tab_not_found") {
			return n, fmt.Errorf("close tab %s: %w", t.TabID, err)
		}
		n++
		d.log.Printf("reaped orphan %s (pane=%s tab=%s) left by a prior daemon", t.Label, strings.Join(paneIDs, ","), t.TabID)
	}
	return n, nil
}

// launchLead starts a lead in a new tab labelled LeadTab unless a tab with
// that label exists anywhere in the session.
func (d *Daemon) launchLead(ctx context.Context) error {
	d.opMu.Lock()
	defer d.opMu.Unlock()
	tabs, err := d.herdr.TabList(ctx, "")
	if err != nil {
		return err
	}
	for _, t := range tabs {
		if t.Label == d.cfg.LeadTab {
			d.log.Printf("lead tab %q exists (tab=%s): no launch", d.cfg.LeadTab, t.TabID)
			return nil
		}
	}
	tc, err := d.createTab(ctx, herdr.TabCreateParams{Cwd: d.cfg.ProjectDir, Label: d.cfg.LeadTab})
	if err != nil {
		return err
	}
	if err := d.herdr.PaneSendInput(ctx, tc.RootPane.PaneID, leadCommand, []string{"Enter"}); err != nil {
		return fmt.Errorf("start lead in pane %s: %w", tc.RootPane.PaneID, err)
	}
	d.log.Printf("launched lead (pane=%s tab=%s) without asking: no tab labelled %q", tc.RootPane.PaneID, tc.Tab.TabID, d.cfg.LeadTab)
	return nil
}

// createTab creates a tab in the fleet's workspace (the workspace labelled
// with the fleet name), creating that workspace first if none exists. A
// freshly created workspace's initial tab is closed once the new tab exists,
// so the workspace holds only fleet tabs. Callers hold opMu.
func (d *Daemon) createTab(ctx context.Context, p herdr.TabCreateParams) (*herdr.TabCreated, error) {
	snap, err := d.herdr.SessionSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	bootstrapTab := ""
	for _, w := range snap.Workspaces {
		if w.Label == d.cfg.Name {
			p.WorkspaceID = w.WorkspaceID
			break
		}
	}
	if p.WorkspaceID == "" {
		wc, err := d.herdr.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Cwd: p.Cwd, Label: d.cfg.Name})
		if err != nil {
			return nil, fmt.Errorf("create workspace %q: %w", d.cfg.Name, err)
		}
		p.WorkspaceID = wc.Workspace.WorkspaceID
		bootstrapTab = wc.Tab.TabID
		d.log.Printf("created workspace %s labelled %q", p.WorkspaceID, d.cfg.Name)
	}
	tc, err := d.herdr.TabCreate(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("create tab %q: %w", p.Label, err)
	}
	if bootstrapTab != "" {
		if err := d.herdr.TabClose(ctx, bootstrapTab); err != nil {
			d.log.Printf("close initial tab %s: %v", bootstrapTab, err)
		}
	}
	return tc, nil
}
