package wire

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Sequenced message ids (docs/FEDERATION.md "Replay windows").
//
// A sequenced id is 16 hex digits naming a sender's *stream* (random, new
// for every stream of every process) followed by "0000" and 12 hex digits
// of a sequence number that starts at 1 and grows by one per message of
// that stream. A stream is what one receiver's seen-set sees of a sender:
// its presence (every roster queue), its requests to one host (that
// host's control queue), its answers to one process of one host (that
// process's reply queue). Since each stream's numbers reach one receiver
// densely and mostly in order, the receiver keeps a sliding window per
// (host, stream) — the highest number seen and a bitmap of the
// WindowSize below it, as IPsec and DTLS do — instead of every id: O(1)
// per message whatever the rate. The id is signed like any id, so the
// canonical form is unchanged; ids that are not sequenced (random, from
// older managers or tools) go to the per-id set as before.

// WindowSize is the number of sequence numbers a replay window tracks
// below the highest seen: a message that many behind the newest of its
// stream is still judged by the bitmap. Older ones are judged by the
// window's gaps (the numbers that slid out without being seen).
const WindowSize = 1024

// DefaultWindowsPerHost bounds the streams (windows) one sending host may
// have live in a seen-set: each process's run holds a few (presence,
// requests, answers), a command-line client one; past the bound that
// host's new streams are refused (seen-set-failed), nobody else's.
const DefaultWindowsPerHost = 4096

// MaxGaps bounds the gap ranges one window keeps. Past it the oldest is
// forgotten and its numbers are refused from then on (fail closed).
const MaxGaps = 1024

// maxSeq is the largest sequence number a sequenced id carries (12 hex
// digits).
const maxSeq = 1<<48 - 1

const winWords = WindowSize / 64

// SplitSeqID returns the stream and sequence number of a sequenced id;
// ok is false for any other id (which the per-id set judges).
func SplitSeqID(id string) (stream string, seq uint64, ok bool) {
	if !ValidID(id) || id[16:20] != "0000" {
		return "", 0, false
	}
	n, err := strconv.ParseUint(id[20:], 16, 64)
	if err != nil || n == 0 {
		return "", 0, false
	}
	return id[:16], n, true
}

// Sequencer makes sequenced ids: one stream per name (a receiver's
// queue), each with a random stream id and numbers from 1. Safe for
// concurrent use; the zero value is ready.
type Sequencer struct {
	mu      sync.Mutex
	streams map[string]*seqStream
}

type seqStream struct {
	id   string
	next uint64
	used time.Time
}

// maxStreams bounds a Sequencer's memory: past it, streams unused for
// MaxLifetime are dropped (a dropped stream's name gets a new stream id).
const maxStreams = 4096

// Next returns the next id of the named stream. Names are the sender's
// choice; what matters is that one name's messages reach one seen-set.
func (q *Sequencer) Next(name string) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.streams == nil {
		q.streams = map[string]*seqStream{}
	}
	now := time.Now()
	st := q.streams[name]
	if st == nil || st.next > maxSeq {
		if len(q.streams) >= maxStreams {
			for k, v := range q.streams {
				if now.Sub(v.used) > MaxLifetime {
					delete(q.streams, k)
				}
			}
		}
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			panic("crypto/rand failed: " + err.Error())
		}
		st = &seqStream{id: fmt.Sprintf("%016x", binary.BigEndian.Uint64(b[:])), next: 1}
		q.streams[name] = st
	}
	st.used = now
	n := st.next
	st.next++
	return fmt.Sprintf("%s%016x", st.id, n)
}

// span is a range of sequence numbers, lo ≤ hi.
type span struct{ lo, hi uint64 }

// window is one (host, stream)'s replay state. bits has bit i set when
// number top-i was accepted (0 ≤ i < WindowSize); gaps are the numbers
// below top-WindowSize+1 never accepted (sorted, disjoint); numbers ≤
// floor are refused (their gaps were forgotten). until is the latest
// expiry of an accepted message: past it the whole window may go, since
// any message it could refuse is refused as expired first.
type window struct {
	top   uint64
	bits  [winWords]uint64
	gaps  []span
	floor uint64
	until time.Time
}

func (w *window) bit(i uint64) bool { return w.bits[i/64]&(1<<(i%64)) != 0 }
func (w *window) set(i uint64)      { w.bits[i/64] |= 1 << (i % 64) }

// check judges seq and, when it is fresh, records it. err is set when the
// window cannot tell (a forgotten gap): refused, fail closed.
func (w *window) check(seq uint64) (fresh bool, err error) {
	if seq <= w.floor {
		return false, fmt.Errorf("%w: sequence number %d is further behind its stream than the gaps kept (%d)", ErrSeenFull, seq, MaxGaps)
	}
	switch {
	case seq > w.top:
		w.slide(seq)
		w.set(0)
		return true, nil
	case w.top-seq < WindowSize:
		i := w.top - seq
		if w.bit(i) {
			return false, nil
		}
		w.set(i)
		return true, nil
	default:
		return w.takeGap(seq), nil
	}
}

// slide moves the window up to top = seq, keeping as gaps the numbers
// that leave it unseen.
func (w *window) slide(seq uint64) {
	d := seq - w.top
	// Numbers leaving the window: old indices i ≥ WindowSize-d, that is
	// top-WindowSize+1 … top-WindowSize+d, in ascending order.
	first := uint64(0)
	if d < WindowSize {
		first = WindowSize - d
	}
	for i := uint64(WindowSize - 1); ; i-- {
		if i < w.top && !w.bit(i) { // number top-i ≥ 1
			w.addGap(w.top-i, w.top-i)
		}
		if i == first {
			break
		}
	}
	if d > WindowSize {
		// Never inside the window: top+1 … seq-WindowSize.
		w.addGap(w.top+1, seq-WindowSize)
	}
	if d >= WindowSize {
		w.bits = [winWords]uint64{}
	} else {
		ws, bs := d/64, d%64
		for j := winWords - 1; j >= 0; j-- {
			var v uint64
			if src := j - int(ws); src >= 0 {
				v = w.bits[src] << bs
				if bs > 0 && src >= 1 {
					v |= w.bits[src-1] >> (64 - bs)
				}
			}
			w.bits[j] = v
		}
	}
	w.top = seq
}

// addGap appends lo…hi (above every gap so far) to the gaps, merging
// with the last, forgetting the oldest past MaxGaps.
func (w *window) addGap(lo, hi uint64) {
	if hi <= w.floor {
		return
	}
	lo = max(lo, w.floor+1)
	if n := len(w.gaps); n > 0 && w.gaps[n-1].hi+1 == lo {
		w.gaps[n-1].hi = hi
		return
	}
	w.gaps = append(w.gaps, span{lo, hi})
	w.trimGaps()
}

func (w *window) trimGaps() {
	for len(w.gaps) > MaxGaps {
		w.floor = w.gaps[0].hi
		w.gaps = w.gaps[1:]
	}
}

// takeGap reports whether seq is in a gap (never accepted) and takes it
// out.
func (w *window) takeGap(seq uint64) bool {
	lo, hi := 0, len(w.gaps)
	for lo < hi {
		m := (lo + hi) / 2
		if w.gaps[m].hi < seq {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(w.gaps) || w.gaps[lo].lo > seq {
		return false
	}
	g := w.gaps[lo]
	switch {
	case g.lo == seq && g.hi == seq:
		w.gaps = append(w.gaps[:lo], w.gaps[lo+1:]...)
	case g.lo == seq:
		w.gaps[lo].lo++
	case g.hi == seq:
		w.gaps[lo].hi--
	default:
		w.gaps = append(w.gaps[:lo+1], w.gaps[lo:]...)
		w.gaps[lo].hi = seq - 1
		w.gaps[lo+1].lo = seq + 1
		w.trimGaps()
	}
	return true
}

// snapshot writes the window as compaction lines:
//
//	w <from> <stream> <top> <until-ms> <floor> <bitmap: WindowSize/4 hex digits>
//	g <from> <stream> <lo> <hi>        (one per gap)
func (w *window) snapshot(b []byte, from, stream string) []byte {
	b = fmt.Appendf(b, "w %s %s %d %d %d ", from, stream, w.top, w.until.UnixMilli(), w.floor)
	for _, x := range w.bits {
		b = fmt.Appendf(b, "%016x", x)
	}
	b = append(b, '\n')
	for _, g := range w.gaps {
		b = fmt.Appendf(b, "g %s %s %d %d\n", from, stream, g.lo, g.hi)
	}
	return b
}

// parseBits reads a snapshot's bitmap.
func parseBits(s string) ([winWords]uint64, bool) {
	var bits [winWords]uint64
	if len(s) != winWords*16 {
		return bits, false
	}
	for i := range bits {
		v, err := strconv.ParseUint(s[i*16:(i+1)*16], 16, 64)
		if err != nil {
			return bits, false
		}
		bits[i] = v
	}
	return bits, true
}
