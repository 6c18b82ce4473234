package federation

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/fleetmgr/fleetmgr/federation/wire"
)

// rosterRoute is what the roster queue takes: presence and offline,
// broadcast, published to fleet.roster under the sender's own key.
func (f *Federation) rosterRoute() wire.Route {
	return wire.Route{Kinds: []wire.Kind{wire.KindPresence, wire.KindOffline}, Self: f.cfg.Host, Broadcast: true,
		Exchange: ExchangeRoster, RoutingKey: func(e *wire.Envelope) string { return RosterKey(e.From) },
		ArrivalBound: PresenceClockBound}
}

// PresenceClockBound is how far a peer's clock may be off for its
// presence to be taken at all (docs/FEDERATION.md "Clock skew"):
// presence is judged on arrival, on this manager's clock, and a peer's
// skew is measured from it; only a clock more than this far off hides a
// host (its presence refused as expired or not-yet-valid, counted).
const PresenceClockBound = wire.MaxLifetime

// presenceLifetime is a presence message's validity: it is worth nothing
// once its sender would be expired anyway.
func (f *Federation) presenceLifetime() time.Duration { return ExpiryBeats * f.cfg.Heartbeat }

// heartbeatLoop publishes presence at once and then every heartbeat until
// the session ends or intake stops.
func (f *Federation) heartbeatLoop(s *session) {
	t := time.NewTicker(f.cfg.Heartbeat)
	defer t.Stop()
	for s.hbCtx.Err() == nil {
		if err := f.publishPresence(s); err != nil && s.hbCtx.Err() == nil {
			f.log.Warn("federation: presence not published", "err", err)
		}
		select {
		case <-s.hbCtx.Done():
			return
		case <-t.C:
		}
	}
}

// presenceBody builds this host's presence from the Source: sorted by
// name, invalid entries left out, cut to wire.MaxFleets.
func (f *Federation) presenceBody(ctx context.Context) ([]byte, error) {
	fctx, cancel := context.WithTimeout(ctx, f.cfg.Heartbeat)
	fleets := f.cfg.Source.LocalFleets(fctx)
	cancel()
	sort.Slice(fleets, func(i, j int) bool { return fleets[i].Name < fleets[j].Name })
	p := wire.Presence{HeartbeatMS: f.cfg.Heartbeat.Milliseconds(), StartedMS: f.started.UnixMilli(), Fleets: make([]wire.FleetSummary, 0, len(fleets))}
	names := map[string]bool{}
	for i := range fleets {
		fs := fleets[i]
		if err := fs.Check(); err != nil || names[fs.Name] {
			if ok, _ := f.warn.allow("source/" + fs.Name); ok {
				f.log.Warn("federation: a local fleet summary is left out of presence", "fleet", fs.Name, "err", err)
			}
			continue
		}
		names[fs.Name] = true
		if len(p.Fleets) == wire.MaxFleets {
			p.Truncated++
			continue
		}
		p.Fleets = append(p.Fleets, fs)
	}
	return json.Marshal(&p)
}

// publishPresence sends one heartbeat (not waiting for the confirm:
// presence is soft state, the next beat repairs a lost one).
func (f *Federation) publishPresence(s *session) error {
	body, err := f.presenceBody(s.hbCtx)
	if err != nil {
		return err
	}
	now := f.cfg.Now()
	env := &wire.Envelope{Kind: wire.KindPresence, ID: f.ids.Next(streamRoster), From: f.cfg.Host, To: wire.Broadcast,
		Issued: now, Expires: now.Add(f.presenceLifetime()), Body: body}
	return f.publish(s.hbCtx, s, ExchangeRoster, RosterKey(f.cfg.Host), env, publishOpts{ttl: f.presenceLifetime()})
}

// publishOffline announces a clean stop and waits for the broker's
// confirm.
func (f *Federation) publishOffline(ctx context.Context, s *session) error {
	body, _ := json.Marshal(&wire.Offline{Reason: "stopping"})
	now := f.cfg.Now()
	env := &wire.Envelope{Kind: wire.KindOffline, ID: f.ids.Next(streamRoster), From: f.cfg.Host, To: wire.Broadcast,
		Issued: now, Expires: now.Add(f.presenceLifetime()), Body: body}
	return f.publish(ctx, s, ExchangeRoster, RosterKey(f.cfg.Host), env, publishOpts{ttl: f.presenceLifetime(), wait: true})
}

// rosterLoop consumes the roster queue into the view.
func (f *Federation) rosterLoop(s *session, ds <-chan amqp.Delivery) {
	for d := range ds {
		f.handlePresence(&d)
		_ = d.Ack(false)
	}
}

// handlePresence verifies one roster message and applies it. Refused
// messages are dropped and counted (presence is soft state: there is
// nobody to dead-letter it for).
func (f *Federation) handlePresence(d *amqp.Delivery) {
	q := RosterQueue(f.cfg.Host)
	v, rej := f.verifier.Verify(delivery(d), f.rosterRoute(), f.rosterSeen)
	if rej == nil && v.From == f.cfg.Host {
		return // our own beat, back through roster.#
	}
	if rej == nil {
		var changed, stale bool
		switch v.Kind {
		case wire.KindPresence:
			var p wire.Presence
			if err := json.Unmarshal(v.Body, &p); err != nil {
				rej = &wire.Rejection{Reason: wire.ReasonMalformed, Detail: "presence body: " + err.Error(), Env: &v.Envelope}
			} else if err := p.Check(); err != nil {
				rej = &wire.Rejection{Reason: wire.ReasonMalformed, Detail: "presence: " + err.Error(), Env: &v.Envelope}
			} else {
				var online bool
				changed, stale, online = f.view.apply(v.From, v.Issued, &p, v.Issued.Sub(f.cfg.Now()))
				if online {
					f.log.Info("federation: host online", "host", v.From, "fleets", len(p.Fleets))
				}
			}
		case wire.KindOffline:
			var o wire.Offline
			if err := json.Unmarshal(v.Body, &o); err != nil || o.Check() != nil {
				rej = &wire.Rejection{Reason: wire.ReasonMalformed, Detail: "offline body does not decode", Env: &v.Envelope}
			} else {
				changed, stale = f.view.markOffline(v.From, v.Issued)
				if changed {
					f.log.Info("federation: host announced offline", "host", v.From)
				}
			}
		}
		if rej == nil && stale {
			f.m.PresenceDropped.WithLabelValues(string(wire.ReasonStale)).Inc()
			return
		}
		if rej == nil {
			f.m.PresenceReceived.WithLabelValues(v.From).Inc()
			f.m.PresenceAge.Observe(max(f.cfg.Now().Sub(v.Issued).Seconds(), 0))
			if changed {
				f.notify()
			}
			return
		}
	}
	f.m.PresenceDropped.WithLabelValues(string(rej.Reason)).Inc()
	f.logRejection(q, rej)
}

// sweep marks hosts expired on this manager's clock, every quarter
// heartbeat (50 ms to 1 s), and keeps the online gauge.
func (f *Federation) sweep(ctx context.Context) {
	every := min(max(f.cfg.Heartbeat/4, 50*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		expired, online := f.view.sweep()
		f.m.HostsOnline.Set(float64(online))
		for _, h := range expired {
			at, _ := f.view.lastSeen(h)
			f.log.Warn("federation: host expired: no presence for 3 heartbeats", "host", h, "last_seen", at.Format(time.RFC3339))
		}
		if len(expired) > 0 {
			f.notify()
		}
	}
}
