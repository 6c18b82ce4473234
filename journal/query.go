package journal

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Query selects events. Zero fields select everything.
type Query struct {
	// Fleets are the fleets (NAME or NAME@HOST) whose events are wanted;
	// empty: every event, serve's own included.
	Fleets []string
	// Kinds are the kinds wanted; a kind "member" also selects every
	// "member.*" kind.
	Kinds []string
	// Since and Until bound Time (Since inclusive, Until exclusive).
	Since, Until time.Time
	// After selects only events with Seq > After (a follower's cursor).
	After uint64
	// Limit keeps the newest Limit events (0: 1000).
	Limit int
}

// DefaultLimit is Query.Limit's default.
const DefaultLimit = 1000

func (q Query) match(e *Event) bool {
	if e.Seq <= q.After && q.After > 0 {
		return false
	}
	if len(q.Kinds) > 0 && !slices.ContainsFunc(q.Kinds, func(k string) bool {
		return k == e.Kind || (len(e.Kind) > len(k) && e.Kind[:len(k)] == k && e.Kind[len(k)] == '.')
	}) {
		return false
	}
	return true
}

// matchAll is match with the fleets and the time bounds (which Query's
// scan applies by key).
func (q Query) matchAll(e *Event) bool {
	if len(q.Fleets) > 0 && !slices.Contains(q.Fleets, e.Fleet) {
		return false
	}
	if !q.Since.IsZero() && e.Time.Before(q.Since) || !q.Until.IsZero() && !e.Time.Before(q.Until) {
		return false
	}
	return q.match(e)
}

// rawKinds returns, for each kind of q, the bytes a record of that kind
// (or, for a prefix kind, of a kind under it) must contain as encoded by
// json.Marshal: `"kind":"K"` or `"kind":"K.`. A record without any of
// them is skipped without being decoded, so a query for the rare kinds
// (fleet.restart) among many calls costs a byte search per record rather
// than a decode. nil (no pre-filter) when q has no kinds, or a kind holds
// a byte json.Marshal would escape.
func (q Query) rawKinds() [][]byte {
	if len(q.Kinds) == 0 {
		return nil
	}
	var out [][]byte
	for _, k := range q.Kinds {
		for _, c := range []byte(k) {
			if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
				return nil
			}
		}
		out = append(out, []byte(`"kind":"`+k+`"`), []byte(`"kind":"`+k+`.`))
	}
	return out
}

// Query returns the newest q.Limit events q selects, oldest first. It
// walks the file from the newest event back (by fleet through the
// fleet's index), so the cost grows with what is returned and skipped,
// not with the file.
func (j *Journal) Query(q Query) ([]Event, error) {
	if q.Limit <= 0 {
		q.Limit = DefaultLimit
	}
	if !j.opt.ReadOnly { // what the log holds, committed first: a reader sees every event written
		j.wmu.Lock()
		_ = j.commitPending()
		j.wmu.Unlock()
	}
	j.mu.RLock()
	defer j.mu.RUnlock()
	if j.db == nil {
		return nil, errors.New("journal closed")
	}
	var out []Event
	err := j.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketEvents)
		if b == nil {
			return nil
		}
		lo, hi := []byte(nil), []byte(nil)
		if !q.Since.IsZero() {
			lo = key(q.Since, 0)
		}
		if !q.Until.IsZero() {
			hi = key(q.Until, 0)
		}
		pre := q.rawKinds()
		scan := func(c *bolt.Cursor, get func(k, v []byte) []byte) error {
			var k, v []byte
			if hi != nil {
				if k, _ = c.Seek(hi); k == nil {
					k, v = c.Last()
				} else {
					k, v = c.Prev()
				}
			} else {
				k, v = c.Last()
			}
			got := 0
			for ; k != nil && got < q.Limit; k, v = c.Prev() {
				if lo != nil && string(k) < string(lo) {
					break
				}
				raw := get(k, v)
				if raw == nil {
					continue
				}
				if pre != nil && !slices.ContainsFunc(pre, func(p []byte) bool { return bytes.Contains(raw, p) }) {
					continue // not of a kind asked for (match decides the rest)
				}
				var e Event
				if err := json.Unmarshal(raw, &e); err != nil {
					continue // one undecodable record does not hide the rest
				}
				if q.match(&e) {
					out = append(out, e)
					got++
				}
			}
			return nil
		}
		if len(q.Fleets) == 0 {
			if err := scan(b.Cursor(), func(_, v []byte) []byte { return v }); err != nil {
				return err
			}
		} else {
			fl := tx.Bucket(bucketFleets)
			for _, f := range q.Fleets {
				fb := fl.Bucket([]byte(f))
				if fb == nil {
					continue
				}
				if err := scan(fb.Cursor(), func(k, _ []byte) []byte { return b.Get(k) }); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(j.extra) > 0 { // a reader: the log's events a killed writer did not commit
		have := make(map[uint64]bool, len(out))
		for _, e := range out {
			have[e.Seq] = true
		}
		for _, e := range j.extra {
			if !have[e.Seq] && q.matchAll(&e) {
				out = append(out, e)
			}
		}
	}
	slices.SortFunc(out, func(a, b Event) int {
		if c := a.Time.Compare(b.Time); c != 0 {
			return c
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	if len(out) > q.Limit {
		out = out[len(out)-q.Limit:]
	}
	return out, nil
}

// Subscribe returns a channel that receives every event written from now
// on (dropped when the reader is slow: it must Query to catch up), and a
// function that ends the subscription.
func (j *Journal) Subscribe() (<-chan Event, func()) {
	ch := make(chan Event, 256)
	j.subMu.Lock()
	j.subs[ch] = struct{}{}
	j.subMu.Unlock()
	return ch, func() {
		j.subMu.Lock()
		delete(j.subs, ch)
		j.subMu.Unlock()
	}
}

func (j *Journal) publish(batch []Event) {
	j.subMu.Lock()
	defer j.subMu.Unlock()
	for ch := range j.subs {
		for _, e := range batch {
			select {
			case ch <- e:
			default:
			}
		}
	}
}
