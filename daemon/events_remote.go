package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/federation/wire"
	"github.com/fleetmgr/fleetmgr/journal"
)

// The events of another host's fleet (issue 25: `fleetmgr events
// NAME@HOST`, fleetmgr_events with a NAME@HOST) are read through the
// signed read path that remote status and logs use: a control request
// with verb "events" (wire.VerbEvents, capability read) to the owning
// host, whose serve answers from its own journal (answerEvents). Only
// the fleet named is read; a bounded number of events comes back in one
// reply; following (-f) is refused, since it would poll a peer with
// signed requests.

// RemoteEventsArgs are the arguments of an events request to a peer:
// the filters of fleetmgr_events, times absolute (the caller's clock; a
// peer's may differ by at most the request's clock allowance, 30 s).
type RemoteEventsArgs struct {
	Kinds []string  `json:"kinds,omitempty"`
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Limit keeps the newest Limit events (0: MaxRemoteEvents; at most
	// MaxRemoteEvents).
	Limit int `json:"limit,omitempty"`
}

// RemoteEventsResult is a peer's answer: its events of the fleet, oldest
// first, named as that host names the fleet; Truncated counts the older
// events that matched but were left out so the reply fits
// (remoteEventsBytes).
type RemoteEventsResult struct {
	Events    []journal.Event `json:"events"`
	Truncated int             `json:"truncated,omitempty"`
}

// MaxRemoteEvents bounds the events one events request returns.
const MaxRemoteEvents = 1000

// remoteEventsBytes bounds the events' JSON in one reply, under the
// control reply's 4 MiB (wire.MaxControlReply) with room for the rest.
const remoteEventsBytes = 3 << 20

// answerEvents is the owner's side: the journal's events of fleet (a
// fleet of this host) that args select, newest MaxRemoteEvents at most,
// without any call's arguments (journal_call_arguments is this host's
// choice; they never leave it), the oldest left out when the reply would
// exceed remoteEventsBytes. A fleet this host neither configures nor has
// events of is an error naming it.
func (a *attention) answerEvents(from, fleet string, raw json.RawMessage) (json.RawMessage, error) {
	var args RemoteEventsArgs
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &args); err != nil {
			return nil, fmt.Errorf("arguments of events: %v", err)
		}
	}
	if args.Limit < 0 || args.Limit > MaxRemoteEvents {
		return nil, fmt.Errorf("limit must be 0 (default %d) to %d", MaxRemoteEvents, MaxRemoteEvents)
	}
	if args.Limit == 0 {
		args.Limit = MaxRemoteEvents
	}
	if a.j == nil {
		return nil, errors.New("this host's serve keeps no journal (its log says why)")
	}
	ev, err := a.j.Query(journal.Query{Fleets: []string{fleet}, Kinds: args.Kinds, Since: args.Since, Until: args.Until, Limit: args.Limit})
	if err != nil {
		return nil, err
	}
	if len(ev) == 0 {
		if _, err := a.m.Fleet(fleet); err != nil {
			return nil, fmt.Errorf("this host has no fleet %s and no events of one", fleet)
		}
	}
	res := RemoteEventsResult{Events: make([]journal.Event, 0, len(ev))}
	size := 0
	// Newest first, so what is left out is the oldest.
	for i := len(ev) - 1; i >= 0; i-- {
		e := ev[i]
		if _, ok := e.Data["arguments"]; ok {
			d := make(map[string]any, len(e.Data))
			for k, v := range e.Data {
				if k != "arguments" {
					d[k] = v
				}
			}
			e.Data = d
		}
		b, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		if size+len(b) > remoteEventsBytes {
			res.Truncated = i + 1
			break
		}
		size += len(b) + 1
		res.Events = append(res.Events, e)
	}
	slices.Reverse(res.Events)
	a.log.Info("federation: journal read by a peer", "from", from, "fleet", fleet, "events", len(res.Events), "truncated", res.Truncated)
	return json.Marshal(res)
}

// remoteEvents asks host for its events of fleet (answerEvents) and
// names them as this host shows them: fleet NAME@HOST, Host set.
func (a *attention) remoteEvents(ctx context.Context, fleet, host string, q journal.Query) ([]journal.Event, int, error) {
	args, _ := json.Marshal(RemoteEventsArgs{Kinds: q.Kinds, Since: q.Since, Until: q.Until, Limit: min(q.Limit, MaxRemoteEvents)})
	raw, err := a.remote.Control(ctx, host, wire.VerbEvents, fleet, args)
	if err != nil {
		return nil, 0, err
	}
	var res RemoteEventsResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, 0, fmt.Errorf("events %s: host %s's reply does not decode: %v", peerview.RemoteName(fleet, host), host, err)
	}
	for i := range res.Events {
		res.Events[i].Fleet, res.Events[i].Host = peerview.RemoteName(fleet, host), host
	}
	return res.Events, res.Truncated, nil
}

// splitEventFleets sorts fleetmgr_events' fleets into those of this
// host's journal and the NAME@HOST of peers (this host's own id counts
// as local: NAME). Without a federation every name is local (a
// NAME@HOST then selects this host's own events about that name, e.g.
// the calls it sent there before [federation] was removed).
func (a *attention) splitEventFleets(names []string) (local []string, remote [][2]string) {
	for _, n := range names {
		fl, host, ok := peerview.SplitRemote(n)
		switch {
		case !ok || a.remote == nil:
			local = append(local, n)
		case host == a.remote.Host():
			local = append(local, fl)
		default:
			remote = append(remote, [2]string{fl, host})
			local = append(local, n) // this host's own events about it (the calls it sent)
		}
	}
	return local, remote
}

// ErrFollowRemote is fleetmgr_events asked to follow (after > 0) a
// fleet of another host.
var ErrFollowRemote = errors.New("following is not available for a fleet of another host: each look would be a signed request to that host; run `fleetmgr events NAME@HOST` again (with --since), or follow it on its host")

// queryEvents is fleetmgr_events: this host's journal for its names (all
// of it when none is named), each peer's for its NAME@HOST (asked at
// once), merged oldest first, the newest q.Limit kept.
func (a *attention) queryEvents(ctx context.Context, names []string, q journal.Query) ([]journal.Event, error) {
	local, remote := a.splitEventFleets(names)
	if len(remote) > 0 && q.After > 0 {
		return nil, ErrFollowRemote
	}
	var out []journal.Event
	if len(remote) == 0 || len(local) > 0 {
		if a.j == nil {
			return nil, errors.New("this serve keeps no journal ([manager] journal = false, or see its log for why)")
		}
		lq := q
		lq.Fleets = local
		ev, err := a.j.Query(lq)
		if err != nil {
			return nil, err
		}
		out = ev
	}
	got := make([][]journal.Event, len(remote))
	errs := make([]error, len(remote))
	var wg sync.WaitGroup
	for i, r := range remote {
		wg.Go(func() {
			var trunc int
			got[i], trunc, errs[i] = a.remoteEvents(ctx, r[0], r[1], q)
			if trunc > 0 {
				a.log.Info("events: older events of a peer's fleet left out of its reply", "fleet", peerview.RemoteName(r[0], r[1]), "left_out", trunc)
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, g := range got {
		out = append(out, g...)
	}
	if len(remote) > 0 {
		slices.SortStableFunc(out, func(x, y journal.Event) int { return x.Time.Compare(y.Time) })
		limit := q.Limit
		if limit <= 0 {
			limit = journal.DefaultLimit
		}
		if len(out) > limit {
			out = out[len(out)-limit:]
		}
	}
	return out, nil
}
