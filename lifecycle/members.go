package lifecycle

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/registry"
)

// Members lost on a restart (issue 24 item 3). fleetd reaps every member
// pane a previous fleetd left when it starts (docs/fleetd.md "Startup
// orphan reap"), so each restart of fleetd ends its members; a herdr
// session that dies ends every pane. Before a restart (the supervisor's or
// an operator's) the panes of the fleet's herdr session that are not in
// its lead tab are recorded (Supervision.MembersBefore); once the
// restart's start is done they are listed again, and those gone are the
// members the restart ended: counted (MembersLost, for /metrics) and
// named (LastLost) in the record, which status, list and the dashboard
// show as "restart ended N members (names…)".

// PaneMember is one member pane of a fleet's herdr session, as recorded
// before a restart.
type PaneMember struct {
	// Terminal is the pane's herdr terminal id: its fingerprint (pane ids
	// are reused).
	Terminal string `json:"terminal"`
	// Name is its tab's label (fleetd labels a member's tab after it),
	// else (an unlabelled tab: herdr's default label is its number) its
	// pane id.
	Name string `json:"name"`
}

// livePanes lists the member panes of the herdr session on sock: every
// pane whose tab is not labelled leadTab. An error means herdr did not
// answer (a dead session: its members cannot be listed).
func livePanes(ctx context.Context, sock, leadTab string) ([]PaneMember, error) {
	if sock == "" {
		return nil, nil
	}
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	hc := herdr.New(sock)
	tabs, err := hc.TabList(hctx, "")
	if err != nil {
		return nil, err
	}
	panes, err := hc.PaneList(hctx, "")
	if err != nil {
		return nil, err
	}
	label := map[string]string{}
	for _, t := range tabs {
		if t.Label != strconv.Itoa(t.Number) { // herdr's default label, the tab's number, names nothing
			label[t.TabID] = t.Label
		}
	}
	var out []PaneMember
	for _, p := range panes {
		l := label[p.TabID]
		if l == leadTab && l != "" {
			continue
		}
		if l == "" {
			l = p.PaneID
		}
		id := p.TerminalID
		if id == "" {
			id = p.PaneID
		}
		out = append(out, PaneMember{Terminal: id, Name: l})
	}
	return out, nil
}

// LiveMembers lists the member panes of fleet name's herdr session now
// (see livePanes): what a stop or a restart of the fleet would end. A
// fleet with no herdr session recorded has none.
func (m *Manager) LiveMembers(ctx context.Context, name string) ([]PaneMember, error) {
	f, err := m.Fleet(name)
	if err != nil {
		return nil, err
	}
	st, err := readState(m.statePath(name), name)
	if err != nil {
		return nil, err
	}
	if !alive(st.Fleetd) && !alive(st.Herdr) {
		return nil, nil
	}
	return livePanes(ctx, st.HerdrSocket, leadTabOf(f))
}

func leadTabOf(f *registry.Fleet) string {
	if f.LeadTab == "" {
		return registry.DefaultLeadTab
	}
	return f.LeadTab
}

// noteMembersBefore adds to st.MembersBefore the member panes live now
// in the session st records (an unanswering session adds none): what the
// next fleetd start will end. Members noted earlier and not yet settled (a
// restart decided, its start still to come or failed) are kept.
func (m *Manager) noteMembersBefore(ctx context.Context, st *State, f *registry.Fleet) {
	ms, err := livePanes(ctx, st.HerdrSocket, leadTabOf(f))
	if err != nil {
		return
	}
	for _, p := range ms {
		if !slices.ContainsFunc(st.MembersBefore, func(q PaneMember) bool { return q.Terminal == p.Terminal }) {
			st.MembersBefore = append(st.MembersBefore, p)
		}
	}
}

// lostSince returns the names (sorted) of the members in before that are
// not among the member panes live now in the session on sock (all of
// them when it does not answer).
func lostSince(ctx context.Context, before []PaneMember, sock, leadTab string) []string {
	if len(before) == 0 {
		return nil
	}
	now, _ := livePanes(ctx, sock, leadTab)
	var lost []string
	for _, p := range before {
		if !slices.ContainsFunc(now, func(q PaneMember) bool { return q.Terminal == p.Terminal }) {
			lost = append(lost, p.Name)
		}
	}
	slices.Sort(lost)
	return lost
}

// LostText is the sentence saying what the fleet's last restart ended:
// "restart ended N members (a, b)", or "" when it ended none.
func (st *State) LostText() string {
	return LostSentence(st.LastLost)
}

// LostSentence says that a restart ended the members named:
// "restart ended 2 members (a, b)"; "" for none.
func LostSentence(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf("restart ended 1 member (%s)", names[0])
	}
	return fmt.Sprintf("restart ended %d members (%s)", len(names), strings.Join(names, ", "))
}

// MembersLiveError is a stop or restart refused because it would end the
// fleet's live members (member panes of its herdr session, LiveMembers)
// and the caller did not confirm it (Options.Confirm). Nothing was done.
// Its ExitStatus is 2, as for any input that needs changing: `--yes` on
// the CLI, `confirm: true` for the manager tools.
type MembersLiveError struct {
	Fleet string
	// Verb is "stop" or "restart".
	Verb string
	// Members names the members that would end (their tab labels).
	Members []string
}

func (e *MembersLiveError) Error() string {
	n := fmt.Sprintf("%d live members", len(e.Members))
	if len(e.Members) == 1 {
		n = "1 live member"
	}
	return fmt.Sprintf("fleet %s: %s would end %s (%s); not done without confirmation (%s)",
		e.Fleet, e.Verb, n, strings.Join(e.Members, ", "), ConfirmHint)
}

// ConfirmHint ends the text of every MembersLiveError: how to confirm. A
// client that only has the text (a manager tool's error) recognises the
// refusal by it.
const ConfirmHint = "`--yes` on the command line, confirm: true in the tool call"

// ExitStatus is 2: the command needs --yes (or a terminal to ask on).
func (e *MembersLiveError) ExitStatus() int { return 2 }

// NeedsConfirm marks the refusal for callers that ask and try again.
func (e *MembersLiveError) NeedsConfirm() bool { return true }

// refuseUnconfirmed returns a *MembersLiveError when verb on fleet name
// would end live members and opt does not confirm it.
func (m *Manager) refuseUnconfirmed(ctx context.Context, name, verb string, opt Options) error {
	if opt.Confirm {
		return nil
	}
	ms, err := m.LiveMembers(ctx, name)
	if err != nil || len(ms) == 0 {
		return nil // a session that does not answer has no members to lose
	}
	names := make([]string, len(ms))
	for i, p := range ms {
		names[i] = p.Name
	}
	slices.Sort(names)
	return &MembersLiveError{Fleet: name, Verb: verb, Members: names}
}
