package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fleetmgr/fleetmgr/mcpwire"
)

// Bounds of the log streams.
const (
	maxLogFleets   = 64   // fleets one /api/logs stream may follow
	maxLineBytes   = 2000 // a longer line is cut (between characters) and marked
	maxPendingLogs = 1000 // lines queued per fleet between two writes; older ones are skipped
)

// ansiCSI matches terminal control sequences (colours, cursor moves) that
// fleet logs may carry; they are removed, the rest shown as text.
var ansiCSI = regexp.MustCompile("\x1b\\[[0-9;?]*[ -/]*[@-~]")

// cleanLine makes one log line safe to ship as JSON text: valid UTF-8, no
// terminal control sequences, at most maxLineBytes.
func cleanLine(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if strings.IndexByte(s, 0x1b) >= 0 {
		s = ansiCSI.ReplaceAllString(s, "")
	}
	s = strings.TrimSuffix(s, "\r")
	if len(s) > maxLineBytes {
		cut := maxLineBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + " …[cut]"
	}
	return s
}

// lineQueue is the io.Writer a FollowLog writes one fleet's log into: it
// splits lines and queues them (bounded: a fleet that writes faster than
// the page reads loses its oldest queued lines, counted) for the stream.
type lineQueue struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	skipped int
	notify  chan<- struct{}
}

func (q *lineQueue) Write(p []byte) (int, error) {
	q.mu.Lock()
	q.partial = append(q.partial, p...)
	for {
		i := bytes.IndexByte(q.partial, '\n')
		if i < 0 {
			break
		}
		q.lines = append(q.lines, cleanLine(string(q.partial[:i])))
		q.partial = q.partial[i+1:]
	}
	if len(q.partial) > maxLineBytes { // a line without end: ship what there is
		q.lines = append(q.lines, cleanLine(string(q.partial)))
		q.partial = nil
	}
	if n := len(q.lines) - maxPendingLogs; n > 0 {
		q.skipped += n
		q.lines = slices.Delete(q.lines, 0, n)
	}
	q.partial = slices.Clip(q.partial)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

// take returns and clears the queued lines and the count skipped.
func (q *lineQueue) take() ([]string, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l, n := q.lines, q.skipped
	q.lines, q.skipped = nil, 0
	return l, n
}

// logEvent is the data of a "tail" (replace) or "lines" (append) event.
type logEvent struct {
	Fleet   string   `json:"fleet"`
	Lines   []string `json:"lines"`
	Skipped int      `json:"skipped,omitempty"`
}

// serveLogs streams the logs of the fleets named by ?fleet= (every fleet
// when none is), of ?proc=fleetd (default) or herdr: first a "tail" event
// per fleet with its last LogLines lines, then "lines" events as lines are
// appended (lifecycle's FollowLog, across rotations). A reconnecting page
// gets fresh tails. The stream ends with the request or the Server.
func (s *Server) serveLogs(w http.ResponseWriter, r *http.Request) {
	if s.opt.Logs == nil {
		http.Error(w, "no logs in this dashboard", http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	proc := q.Get("proc")
	if proc == "" {
		proc = "fleetd"
	}
	if proc != "fleetd" && proc != "herdr" {
		http.Error(w, "proc: want fleetd or herdr", http.StatusBadRequest)
		return
	}
	fleets := slices.Compact(slices.Sorted(slices.Values(q["fleet"])))
	if len(fleets) == 0 {
		if s.hub.knownNames() == nil {
			s.refreshRows(r.Context())
		}
		fleets = s.hub.knownNames()
	}
	if len(fleets) > maxLogFleets {
		http.Error(w, "too many fleets in one log stream", http.StatusBadRequest)
		return
	}
	for _, f := range fleets {
		if !s.known(r.Context(), f) {
			http.Error(w, "no fleet "+strings.TrimSpace(f), http.StatusBadRequest)
			return
		}
	}
	if !s.openStream(w, r, &s.logStreams, maxLogStreams) {
		return
	}
	defer s.logStreams.Add(-1)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	// Each write gets its own deadline: a page that stopped reading ends
	// the stream instead of holding a goroutine for ever.
	es := mcpwire.NewEventStream(w, 10*time.Second)
	defer es.Close()
	es.Header().Set("Cache-Control", "no-store")
	es.Header().Set("X-Accel-Buffering", "no")
	send := func(name string, ev logEvent) bool {
		b, err := json.Marshal(ev)
		if err != nil {
			return false
		}
		return es.Event("", name, b) == nil
	}
	if es.Retry(2*time.Second) != nil {
		return
	}
	notify := make(chan struct{}, 1)
	queues := make([]*lineQueue, len(fleets))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i, f := range fleets {
		lines, err := s.opt.Logs.LogTail(f, proc, s.opt.LogLines)
		if err != nil {
			lines = []string{"(cannot read the log: " + err.Error() + ")"}
		}
		for j, l := range lines {
			lines[j] = cleanLine(l)
		}
		if !send("tail", logEvent{Fleet: f, Lines: lines}) {
			return
		}
		queues[i] = &lineQueue{notify: notify}
		wg.Go(func() {
			if err := s.opt.Logs.FollowLog(ctx, f, proc, queues[i]); err != nil && ctx.Err() == nil {
				s.opt.Log.Warn("dashboard: follow log", "fleet", f, "err", err)
			}
		})
	}
	if es.Flush() != nil {
		return
	}
	hb := time.NewTicker(s.opt.Heartbeat)
	defer hb.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-hb.C:
			if es.Comment("keep-alive") != nil {
				return
			}
		case <-notify:
			for i, q := range queues {
				if lines, skipped := q.take(); len(lines) > 0 || skipped > 0 {
					if !send("lines", logEvent{Fleet: fleets[i], Lines: lines, Skipped: skipped}) {
						return
					}
				}
			}
		}
		if es.Flush() != nil {
			return
		}
	}
}
