package dashboard

import (
	"strconv"
	"strings"

	"github.com/fleetmgr/fleetmgr/mcpwire"
)

// event is one Server-Sent Event, encoded once and written to every
// stream as it is.
type event struct {
	seq   uint64
	frame []byte // "id: …\nevent: …\ndata: …\n\n"
}

// eventRing keeps the most recent events for Last-Event-ID resumption,
// bounded by count and by encoded bytes (whichever is reached first).
// Sequence numbers are consecutive: the ring holds seq first..last.
type eventRing struct {
	maxN, maxBytes int
	buf            []*event // oldest first
	bytes          int
	last           uint64 // the newest seq ever published (0: none)
}

// push appends ev (whose seq must be last+1) and drops the oldest events
// beyond the bounds. An event larger than maxBytes alone is kept (the ring
// never drops the newest), so a resume just before it still works.
func (r *eventRing) push(ev *event) {
	r.buf = append(r.buf, ev)
	r.bytes += len(ev.frame)
	r.last = ev.seq
	drop := 0
	for len(r.buf)-drop > 1 && (len(r.buf)-drop > r.maxN || r.bytes > r.maxBytes) {
		r.bytes -= len(r.buf[drop].frame)
		r.buf[drop] = nil
		drop++
	}
	if drop > 0 {
		r.buf = append(r.buf[:0], r.buf[drop:]...)
	}
}

// since returns the events after seq, and false when they are not all
// kept any more (seq older than the ring, or newer than anything
// published: an id from another serve), so the caller sends a snapshot.
func (r *eventRing) since(seq uint64) ([]*event, bool) {
	if seq > r.last {
		return nil, false
	}
	if seq == r.last {
		return nil, true
	}
	if len(r.buf) == 0 || seq+1 < r.buf[0].seq {
		return nil, false
	}
	i := int(seq + 1 - r.buf[0].seq)
	return r.buf[i:], true
}

// eventID formats an event id: the serve's epoch (random per Server, so
// an id from an earlier serve never resumes into this one) and the
// sequence number.
func eventID(epoch string, seq uint64) string { return epoch + "." + strconv.FormatUint(seq, 10) }

// parseEventID splits an id made by eventID; ok is false for anything
// else, or for another epoch.
func parseEventID(epoch, id string) (seq uint64, ok bool) {
	e, n, found := strings.Cut(id, ".")
	if !found || e != epoch {
		return 0, false
	}
	seq, err := strconv.ParseUint(n, 10, 64)
	return seq, err == nil
}

// sseFrame encodes one event (mcpwire.AppendEvent, fleetmgr's one SSE
// encoder). data is JSON without newlines (encoding/json never writes
// one), so one data line holds it.
func sseFrame(id, name string, data []byte) []byte {
	return mcpwire.AppendEvent(make([]byte, 0, len(id)+len(name)+len(data)+24), id, name, data)
}
