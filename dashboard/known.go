package dashboard

import (
	"time"

	"github.com/fleetmgr/fleetmgr/status"
)

// This file is what the dashboard learns without sampling: every status
// report serve makes for anyone (the CLI's `fleetmgr status`, the
// fleetmgr_status tool, the notifier's samplings, the dashboard's own),
// through Server.Observe, and each verdict change herdr pushes, through
// Server.VerdictChanged. Both cost a map update under the hub's lock and
// read nothing: they are taken whether or not a page is open, so the
// first paint of a page opened later shows the members serve knows
// (issue 24 item 16) and when each took its verdict.

// Observe takes a status report serve made (status.Options.Observe: the
// daemon hands every report its Collector makes). A running fleet's row
// that is newer than the dashboard's own last sampling of the same fleetd
// becomes the fleet's row the next time a page reads /api/snapshot, so a
// page shows at first paint the members and verdicts serve knows instead
// of waiting for its own sampling; each judged member's verdict change is
// noted at once (FleetMeta.VerdictSince). It never blocks on anything but
// the hub's lock and never samples.
func (s *Server) Observe(rep *status.Report) {
	if rep == nil {
		return
	}
	s.hub.observe(rep)
}

// VerdictChanged takes one member's verdict change as herdr's push showed
// it (status.TrackerOptions.OnVerdict): the member's "Last change" is then
// exactly v.At, not the time of the next sampling that sees it.
func (s *Server) VerdictChanged(v status.VerdictChange) {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	fs := s.hub.fleets[v.Fleet]
	if fs == nil || v.Member == "" || v.To == "" {
		return
	}
	cur, ok := fs.meta.VerdictSince[v.Member]
	if ok && cur.Verdict == v.To {
		return
	}
	next := cloneSince(fs.meta.VerdictSince)
	next[v.Member] = VerdictSince{Verdict: v.To, At: v.At.UTC(), AtLeast: v.From == ""}
	fs.meta.VerdictSince = next
}

func cloneSince(m map[string]VerdictSince) map[string]VerdictSince {
	out := make(map[string]VerdictSince, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// judged reports whether r is a fleet row whose members were judged (a
// running fleet whose roster answered): only those say anything about
// its members' verdicts.
func judged(r status.Fleet) bool {
	return r.State == "running" && r.Verdict == "" && r.MemberCount >= 0 && r.Remote == nil
}

// noteVerdictsLocked updates fs.meta.VerdictSince from r, a row of a
// sampling that began at started and was judged at t: a member whose
// verdict differs from the one noted took it at t, unless the one noted
// came after started (herdr pushed it while this sampling ran: the
// sampling's view is the older); a member seen for the first time had it
// at least since t; members no longer listed are forgotten. The map is
// replaced, never changed in place (events already published hold the
// old one).
func noteVerdictsLocked(fs *fleetState, r status.Fleet, started, t time.Time) {
	if !judged(r) {
		return
	}
	t = t.UTC()
	next := make(map[string]VerdictSince, len(r.Members))
	for _, m := range r.Members {
		cur, ok := fs.meta.VerdictSince[m.ID]
		switch {
		case ok && cur.Verdict == m.Verdict:
			next[m.ID] = cur
		case ok && cur.At.After(started):
			next[m.ID] = cur // pushed while this sampling ran: newer than what it saw
		case ok:
			next[m.ID] = VerdictSince{Verdict: m.Verdict, At: t}
		default:
			next[m.ID] = VerdictSince{Verdict: m.Verdict, At: t, AtLeast: true}
		}
	}
	fs.meta.VerdictSince = next
}

// knownRow is a fleet's row from a report serve made, when that sampling
// began and when it was generated.
type knownRow struct {
	row         status.Fleet
	started, at time.Time
}

// reportStart is when the sampling that made rep began (its generation
// time less what it took).
func reportStart(rep *status.Report) time.Time {
	return rep.GeneratedAt.Add(-time.Duration(rep.ElapsedMS) * time.Millisecond)
}

// observe keeps rep's rows as the newest known of each fleet (when newer
// than what is kept) and notes their members' verdict changes.
func (h *hub) observe(rep *status.Report) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.header.IntervalMS == 0 {
		h.header.IntervalMS = rep.IntervalMS // for the page's staleness before a sampling of its own
	}
	for _, r := range rep.Fleets {
		if !judged(r) || !rep.GeneratedAt.After(h.observed[r.Name].at) {
			continue
		}
		if fs := h.fleets[r.Name]; fs != nil {
			if !rep.GeneratedAt.After(fs.meta.SampledAt) {
				continue // the dashboard's own sampling, applied already, or older
			}
			noteVerdictsLocked(fs, r, reportStart(rep), rep.GeneratedAt)
		} else if len(h.names) > 0 {
			continue // not a fleet of the rows (a report from before a reload)
		}
		// Before the first read of the rows, every fleet's is kept: the
		// rows decide (setNamesLocked drops those not configured).
		h.observed[r.Name] = knownRow{r, reportStart(rep), rep.GeneratedAt}
	}
}

// applyKnownLocked makes every fleet's known row (observe) its row when it
// is newer than the fleet's last sampling and was made of the fleetd that
// runs now (same pid as the lifecycle rows say): its members, verdicts,
// probes and resources, with the lifecycle as read since. Each fleet so
// changed gets a "fleet" event, so every open tab shows it too. The
// verdict timelines and sparklines stay the dashboard's own samplings.
func (h *hub) applyKnownLocked() {
	for _, n := range h.names {
		fs := h.fleets[n]
		k, ok := h.observed[n]
		if !ok {
			continue
		}
		delete(h.observed, n)
		if !k.at.After(fs.meta.SampledAt) || fs.row.State != "running" || k.row.PID != fs.row.PID {
			continue // older than the page's own, or of another fleetd (its members are gone)
		}
		r := k.row
		if lr, ok := h.lastRows[n]; ok && h.rowsAt.After(k.at) && lifeKey(lr) != lifeKey(r) {
			r = merge(r, lr)
		}
		if r.SchemaDrift == nil {
			r.SchemaDrift = fs.row.SchemaDrift
		}
		noteVerdictsLocked(fs, r, k.started, k.at)
		fs.row, fs.key = r, lifeKey(r)
		fs.meta.AsOf, fs.meta.SampledAt = k.at, k.at
		h.publishLocked("fleet", struct {
			Row  status.Fleet `json:"row"`
			Meta FleetMeta    `json:"meta"`
		}{fs.row, fs.meta})
	}
}

// Notice is one notification ([[notify]] rules: an episode firing or
// resolved, or a `fleetmgr notify test`) as the page gets it, in a
// "notify" event: the page raises a browser notification for it when the
// operator allowed them (a button asks; never without the operator's
// gesture).
type Notice struct {
	// Kind is the rule's event kind (member.blocked, fleet.failed …).
	Kind string `json:"kind"`
	// Fleet, Member and Host name the subject (Member and Host may be "").
	Fleet  string `json:"fleet"`
	Member string `json:"member,omitempty"`
	Host   string `json:"host,omitempty"`
	// State is firing, resolved or test.
	State string `json:"state"`
	// Text is the one-line message (the notification's body).
	Text string `json:"text"`
	// At is when the notification was made.
	At time.Time `json:"at"`
}

// Notify publishes n to the open pages (an SSE "notify" event, kept in the
// event ring like the others). Without an open page it is only kept in
// the ring: a page opened later does not raise it (its snapshot is newer).
func (s *Server) Notify(n Notice) {
	s.hub.mu.Lock()
	defer s.hub.mu.Unlock()
	s.hub.publishLocked("notify", n)
}
