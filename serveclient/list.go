package serveclient

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/resources"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/termtext"
)

// ListRow is one row of `fleetmgr list` (its --json element).
type ListRow struct {
	Name         string          `json:"name"`
	State        lifecycle.Phase `json:"state"`
	Desired      string          `json:"desired"`
	Port         int             `json:"port"`
	PID          int             `json:"pid,omitempty"`
	HerdrSession string          `json:"herdr_session"`
	// Vhost is the fleet's broker vhost; "" with no [broker] table.
	Vhost string `json:"vhost,omitempty"`
	// Broker is the management URL, or "no broker configured".
	Broker  string `json:"broker"`
	Project string `json:"project"`
	// UptimeS is seconds since fleetd last started, while it runs: a
	// number, as status --json's uptime_s (for a fleet of another host,
	// as its host last reported it); Uptime is it in words for the table
	// only.
	UptimeS   float64 `json:"uptime_s,omitempty"`
	Uptime    string  `json:"-"`
	LastError string  `json:"last_error,omitempty"`
	// Supervision (docs/ARCHITECTURE.md "Supervision"): restarts by the
	// supervisor, why the last one happened, how fleetd last ended, and
	// whether a crash loop stopped it.
	Restarts          int    `json:"restarts"`
	LastRestartReason string `json:"last_restart_reason,omitempty"`
	LastExit          string `json:"last_exit,omitempty"`
	CrashLoop         bool   `json:"crash_loop,omitempty"`
	// WhatNext and StartRetriesLeft are status --json's what_next and
	// start_retries_left (lifecycle.Shown.Next, StartRetriesLeft): for a
	// fleet whose start did not become healthy, what happens next in one
	// sentence, and how many retries serve still makes.
	WhatNext         string `json:"what_next,omitempty"`
	StartRetriesLeft *int   `json:"start_retries_left,omitempty"`
	// NextRestartAt is when the supervisor's pending restart is due
	// (restarting only).
	NextRestartAt time.Time `json:"next_restart_at,omitzero"`
	// MembersLost counts the members every restart of the fleet ended
	// (fleetd reaps the panes a previous fleetd left); LastRestartLost
	// names those its last restart ended, and LostText says it:
	// "restart ended N members (names…)" (lifecycle/members.go).
	MembersLost int `json:"members_lost"`
	// RestartPolicy is the fleet's `restart` key: always, on-failure or
	// never (registry.RestartMode).
	RestartPolicy   string   `json:"restart_policy"`
	LastRestartLost []string `json:"last_restart_lost,omitempty"`
	LostText        string   `json:"lost_text,omitempty"`
	// NotInConfig: the file no longer defines the fleet, removed while it
	// ran; `fleetmgr stop NAME` stops it, nothing restarts it.
	NotInConfig bool `json:"not_in_config,omitempty"`
	// RestartPending lists the fleets.toml keys whose values differ from
	// those the running fleet was started with; its next start applies
	// them.
	RestartPending []string `json:"restart_pending,omitempty"`
	// PendingChanges says each pending change with the value the fleet
	// runs with and the one the file has, where both are known ("port
	// 9224 → 9230"; else the key alone). The row's own values (port,
	// herdr_session, project, vhost) are always those it runs with,
	// never the file's pending ones.
	PendingChanges []string `json:"pending_changes,omitempty"`
	// HerdrGone: running, but its herdr server has exited and no serve
	// supervises the fleet (lifecycle.Shown.HerdrGone); LastError says
	// what to run.
	HerdrGone bool `json:"herdr_gone,omitempty"`
	// HerdrLeft: for a fleet shown failed, the herdr server of the fleet
	// that still runs ("herdr session kb still runs (pid 4242)";
	// lifecycle.Shown.HerdrLeft); LastError says what ends it.
	HerdrLeft string `json:"herdr_left,omitempty"`
	// Host is set for a fleet of another host (federation): its host id.
	// Such a row (named NAME@HOST, or as fleets.toml declares it with
	// host = HOST) comes from that host's presence through this host's
	// serve (ListRemote); its port, pid, session and project are the
	// host's own and left out.
	Host string `json:"host,omitempty"`
	// Remote is where and when its host was seen (host_state, last_seen,
	// beat_age_s, reported_state, verdicts_age_s, catalogue): the same
	// object as status --json's "remote"; nil for this host's fleets.
	Remote *peerview.Fleet `json:"remote,omitempty"`
	// Members and Verdicts are, for a fleet of another host, the host's
	// last status report of it (Remote.VerdictsAgeS old when sent);
	// absent when it had none, and for this host's fleets.
	Members  *int           `json:"members,omitempty"`
	Verdicts map[string]int `json:"verdicts,omitempty"`
	// Supervised, ServePID and Supervision are status.Report's: whether
	// a fleetmgr serve supervises this host's fleets (the same in every
	// row of one list).
	Supervised  bool   `json:"supervised"`
	ServePID    int    `json:"serve_pid,omitempty"`
	Supervision string `json:"supervision"`
	// Resources is what the running fleet's fleetd and herdr server
	// process trees (so every pane) use, from one read of /proc: CPU
	// seconds, RSS, processes, fds; no cpu_percent (that needs two reads:
	// status --json has it). Nil when not running or /proc is unreadable.
	Resources *resources.Usage `json:"resources,omitempty"`
}

// Supervision is the pid of the fleetmgr serve of the client's state dir
// when one runs (0: none), and status.SupervisionText of it.
func (c *Client) Supervision() (int, string) {
	pid := serveapi.ServePID(c.cfg.Manager.StateDir)
	return pid, status.SupervisionText(pid)
}

// List is `fleetmgr list`: a row per fleet of the file and per fleet
// removed from it while it runs, sorted by name, from the state every
// fleetmgr process records (the state files and /proc; no daemon and no
// fleetd is asked). A fleet whose record cannot be read is listed with
// state unknown and the reason in LastError, never left out; never nil.
func (c *Client) List() []ListRow {
	rows := []ListRow{}
	var roots [][3]int // row, fleetd pid, herdr pid: what Resources is read from
	pid, sup := c.Supervision()
	for _, n := range c.m.Names() {
		f, err := c.m.Fleet(n)
		if err != nil {
			continue // stopped meanwhile
		}
		st, err := c.m.State(n)
		if err != nil {
			st = &lifecycle.State{Shown: lifecycle.Shown{Phase: lifecycle.PhaseUnknown, LastError: err.Error()}}
		}
		r := ListRow{Name: n, State: st.Shown.Phase, Desired: string(st.Desired), Port: f.Port, HerdrSession: f.HerdrSession, Project: f.Project,
			LastError: st.Shown.LastError, Broker: "no broker configured", Restarts: st.Restarts, LastRestartReason: st.LastRestartReason,
			LastExit: st.LastExit, CrashLoop: st.CrashLoop, NotInConfig: st.Shown.NotInConfig, RestartPending: st.Shown.RestartPending, HerdrGone: st.Shown.HerdrGone, HerdrLeft: st.Shown.HerdrLeft,
			MembersLost: st.MembersLost, LastRestartLost: st.LastLost, LostText: st.LostText(), RestartPolicy: string(f.Restart.Mode),
			Supervised: pid > 0, ServePID: pid, Supervision: sup}
		r.WhatNext = st.Shown.Next
		if st.Shown.StartRetrying {
			left := st.Shown.StartRetriesLeft
			r.StartRetriesLeft = &left
		}
		if st.Shown.Phase == lifecycle.PhaseRestarting {
			r.NextRestartAt = st.Shown.NextRestartAt
		}
		if b := c.m.Config().Broker; b != nil {
			r.Vhost, r.Broker = f.Vhost, b.ManagementURL
		}
		if st.Shown.Phase == lifecycle.PhaseRunning && st.Fleetd != nil {
			r.PID = st.Fleetd.PID
			if st.Port != 0 {
				r.Port = st.Port // where it runs, until a restart applies a changed port
			}
			if l := st.Launch; l != nil {
				// What it runs with, never mixed with the file's pending
				// values (those are the pending line's).
				r.HerdrSession, r.Project = l.HerdrSession, l.Project
				if r.Vhost != "" {
					r.Vhost = l.Vhost
				}
			}
			r.PendingChanges = pendingChanges(st, f, r.RestartPending)
			if !st.StartedAt.IsZero() {
				// A clock set back would make it negative: never below 0.
				up := max(0, time.Since(st.StartedAt).Truncate(time.Second))
				r.Uptime, r.UptimeS = up.String(), up.Seconds()
			}
		}
		rows = append(rows, r)
		if r.PID != 0 && st.Herdr != nil {
			roots = append(roots, [3]int{len(rows) - 1, r.PID, st.Herdr.PID})
		} else if r.PID != 0 {
			roots = append(roots, [3]int{len(rows) - 1, r.PID, 0})
		}
	}
	if len(roots) > 0 {
		var pids []int
		for _, rt := range roots {
			pids = append(pids, rt[1], rt[2])
		}
		if s, err := resources.New(""); err == nil {
			defer s.Close()
			if snap, err := s.Take(pids...); err == nil {
				for _, rt := range roots {
					if pids := snap.Tree(rt[1], rt[2]); len(pids) > 0 {
						u := snap.Usage(pids)
						rows[rt[0]].Resources = &u
					}
				}
			}
		}
	}
	return rows
}

// RenderList writes rows as `fleetmgr list` prints them: a table, then
// (rows with Remote set) a table of other hosts' fleets, then per fleet
// whose start did not become healthy what happens next (WhatNext), and a
// line per fleet not in the config or with a restart pending (saying what to run),
// to out; and per local fleet whose state is unknown, why, to errOut.
// config is the file the rows are of.
func RenderList(out, errOut io.Writer, rows []ListRow, config string) error {
	var remote []ListRow
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tRESTART\tPORT\tPID\tUPTIME\tHERDR SESSION\tVHOST\tPROJECT")
	for _, r := range rows {
		if r.Remote != nil {
			remote = append(remote, r)
			continue
		}
		pid, up, vhost, state := "-", r.Uptime, r.Vhost, string(r.State)
		if r.PID != 0 {
			pid = fmt.Sprint(r.PID)
		}
		if up == "" {
			up = "-"
		}
		if vhost == "" {
			vhost = "(" + r.Broker + ")"
		}
		switch {
		case r.NotInConfig:
			state += " (not in config)"
		case r.HerdrGone:
			state += " (herdr session gone)"
		case len(r.RestartPending) > 0:
			state += " (restart pending)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", termtext.Cell(r.Name), termtext.Cell(state), policyCell(r.RestartPolicy), r.Port, pid, up, termtext.Cell(r.HerdrSession), termtext.Cell(vhost), termtext.Cell(r.Project))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(remote) > 0 {
		fmt.Fprintln(out)
		if err := renderRemoteRows(out, remote); err != nil {
			return err
		}
	}
	for _, r := range rows {
		// A start that did not become healthy: what happens next (the
		// sentence begins with the fleet's name).
		if r.WhatNext != "" && r.Remote == nil {
			fmt.Fprintln(out, termtext.Text(r.WhatNext))
		}
		switch {
		case r.NotInConfig:
			fmt.Fprintf(out, "%s: no longer in %s; `fleetmgr stop %s` stops it (nothing restarts it)\n", r.Name, config, r.Name)
		case r.HerdrGone, r.State == lifecycle.PhaseStale, r.HerdrLeft != "":
			fmt.Fprintf(out, "%s: %s\n", r.Name, termtext.Text(r.LastError))
		case len(r.RestartPending) > 0:
			changes := r.PendingChanges
			if len(changes) == 0 {
				changes = r.RestartPending
			}
			fmt.Fprintf(out, "%s: restart pending: %s (changed in %s); `fleetmgr restart %s` applies it\n", r.Name, termtext.Text(strings.Join(changes, "; ")), config, r.Name)
		}
	}
	for _, r := range rows {
		if r.LostText != "" && r.Remote == nil {
			fmt.Fprintf(out, "%s: %s (%d members lost in all)\n", termtext.Cell(r.Name), termtext.Cell(r.LostText), r.MembersLost)
		}
	}
	for _, r := range rows {
		if r.State == lifecycle.PhaseUnknown && r.Remote == nil {
			fmt.Fprintf(errOut, "fleetmgr: fleet %s: %s\n", termtext.Cell(r.Name), termtext.Text(r.LastError))
		}
	}
	return nil
}

// policyCell is a restart policy in the list's table ("-" for none: a
// remote row).
func policyCell(p string) string {
	if p == "" {
		return "-"
	}
	return p
}

// pendingChanges says each key of a running fleet's pending restart with
// the value it runs with and the one in the file, where the record keeps
// the first (port, herdr_session, project, vhost): "port 9224 → 9230".
// Other keys (their values are kept as digests only) are named alone.
func pendingChanges(st *lifecycle.State, f *registry.Fleet, keys []string) []string {
	var out []string
	for _, k := range keys {
		was, now := "", ""
		switch l := st.Launch; {
		case k == "port" && st.Port != 0:
			was, now = fmt.Sprint(st.Port), fmt.Sprint(f.Port)
		case k == "herdr_session" && l != nil:
			was, now = l.HerdrSession, f.HerdrSession
		case k == "project" && l != nil:
			was, now = l.Project, f.Project
		case k == "vhost" && l != nil:
			was, now = l.Vhost, f.Vhost
		}
		if was != "" && was != now {
			out = append(out, k+" "+was+" → "+now)
		} else {
			out = append(out, k)
		}
	}
	return out
}
