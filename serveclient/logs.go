package serveclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/termtext"
)

// LogsRequest is `fleetmgr logs` with several fleets, --all, --since,
// --timestamps, --json or --serve (LogsMany).
type LogsRequest struct {
	Fleets []string
	All    bool
	// Herdr reads the herdr servers' logs instead of fleetd's.
	Herdr bool
	// Lines is how many lines of each log to print first (0: all within
	// its last 1 MiB).
	Lines  int
	Follow bool
	// Since keeps the lines the log pipe read at most that long ago (0:
	// all); a line without a timestamp is left out then.
	Since time.Duration
	// Timestamps shows each line's time.
	Timestamps bool
	// JSON writes one object per line: {"fleet","proc","time","line"}.
	JSON bool
	// Colour colours the fleet prefixes (a terminal).
	Colour bool
	// Serve reads serve's own log instead (<state_dir>/fleetmgr.log).
	Serve bool
}

// LogRecord is one line of `fleetmgr logs --json`.
type LogRecord struct {
	Fleet string    `json:"fleet,omitempty"`
	Proc  string    `json:"proc"`
	Time  time.Time `json:"time,omitzero"`
	Line  string    `json:"line"`
}

// prefixColours are the fleet prefixes' colours, in turn (as docker
// compose logs colours its services).
var prefixColours = []string{"\x1b[36m", "\x1b[33m", "\x1b[32m", "\x1b[35m", "\x1b[34m", "\x1b[31m"}

// LogsMany writes the logs req names to w: each fleet's last req.Lines
// lines, interleaved by the time the log pipe read them, each prefixed
// with its fleet ("kb   | …", coloured with req.Colour) when there are
// several; then with Follow what is appended to any of them, as it comes,
// until ctx ends. Fleet text is escaped for a terminal (termtext).
func (c *Client) LogsMany(ctx context.Context, req LogsRequest, w io.Writer) error {
	if req.Lines < 0 {
		return &serveapi.UsageError{Err: fmt.Errorf("-n/--lines must be 0 (all) or more, not %d", req.Lines)}
	}
	if req.Since < 0 {
		return &serveapi.UsageError{Err: fmt.Errorf("--since must be positive, e.g. 10m")}
	}
	if req.Serve {
		return c.serveLog(ctx, req, w)
	}
	names := req.Fleets
	switch {
	case req.All && len(names) > 0:
		return &serveapi.UsageError{Err: fmt.Errorf("give fleet names or --all, not both")}
	case req.All:
		names = c.here(c.m.Names())
	case len(names) == 0:
		return &serveapi.UsageError{Err: errors.New("name a fleet (or several, or --all, or --serve)")}
	}
	names = onceEach(names)
	for _, n := range names {
		if isRemoteName(n) {
			return &serveapi.UsageError{Err: fmt.Errorf("%s is a fleet of another host: its log is shown alone (fleetmgr logs %s), without --since, --timestamps or --json", n, n)}
		}
	}
	if err := c.Known(names...); err != nil {
		return err
	}
	proc := "fleetd"
	if req.Herdr {
		proc = "herdr"
	}
	p := &logPrinter{w: w, req: req, proc: proc, prefixed: len(names) > 1 || req.All, width: 0, colour: map[string]string{}}
	for i, n := range names {
		p.width = max(p.width, len(n))
		p.colour[n] = prefixColours[i%len(prefixColours)]
	}
	var since time.Time
	if req.Since > 0 {
		since = time.Now().Add(-req.Since)
	}
	type rec struct {
		fleet string
		l     lifecycle.LogLine
	}
	var all []rec
	for _, n := range names {
		tail, err := c.m.LogTailTimed(n, proc, req.Lines)
		if err != nil {
			return err
		}
		for _, l := range tail {
			if !since.IsZero() && (l.Time.IsZero() || l.Time.Before(since)) {
				continue
			}
			all = append(all, rec{n, l})
		}
	}
	// By time; lines without one (older logs) first, in their order.
	sort.SliceStable(all, func(i, j int) bool {
		a, b := all[i].l.Time, all[j].l.Time
		if a.IsZero() || b.IsZero() {
			return a.IsZero() && !b.IsZero()
		}
		return a.Before(b)
	})
	for _, r := range all {
		if err := p.print(r.fleet, r.l); err != nil {
			return err
		}
	}
	if !req.Follow {
		return nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(names))
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, n := range names {
		wg.Go(func() {
			if err := c.m.FollowLogTimed(fctx, n, proc, func(l lifecycle.LogLine) error { return p.print(n, l) }); err != nil {
				errs <- err
				cancel()
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when none failed
}

// logPrinter writes log lines as LogsMany shows them, one at a time.
type logPrinter struct {
	mu       sync.Mutex
	w        io.Writer
	req      LogsRequest
	proc     string
	prefixed bool
	width    int
	colour   map[string]string
}

func (p *logPrinter) print(fleet string, l lifecycle.LogLine) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.req.JSON {
		b, err := json.Marshal(LogRecord{Fleet: fleet, Proc: p.proc, Time: l.Time, Line: l.Text})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(p.w, "%s\n", b)
		return err
	}
	var b strings.Builder
	if p.prefixed {
		pre := fmt.Sprintf("%-*s |", p.width, termtext.Cell(fleet))
		if p.req.Colour {
			pre = p.colour[fleet] + pre + "\x1b[39m"
		}
		b.WriteString(pre + " ")
	}
	if p.req.Timestamps {
		if l.Time.IsZero() {
			b.WriteString(strings.Repeat("-", 24) + " ")
		} else {
			b.WriteString(l.Time.UTC().Format("2006-01-02T15:04:05.000Z") + " ")
		}
	}
	b.WriteString(termtext.Line(l.Text))
	_, err := fmt.Fprintln(p.w, b.String())
	return err
}

// serveLog is `fleetmgr logs --serve`: the tail of serve's own log
// (<state_dir>/fleetmgr.log, written by a detached serve), then with
// Follow what is appended.
func (c *Client) serveLog(ctx context.Context, req LogsRequest, w io.Writer) error {
	if len(req.Fleets) > 0 || req.All {
		return &serveapi.UsageError{Err: errors.New("--serve shows serve's own log: no fleet names or --all with it")}
	}
	path := filepath.Join(c.cfg.Manager.StateDir, "fleetmgr.log")
	if info := serveapi.ReadInfo(c.cfg); info.Log != "" {
		path = info.Log
	}
	tail, err := lifecycle.TailFile(path, req.Lines)
	if err != nil {
		return err
	}
	if len(tail) == 0 && !req.Follow {
		_, err := fmt.Fprintf(w, "fleetmgr: %s is empty or missing: serve writes it when detached (serve --detach); a serve in a terminal logs to that terminal, one under systemd to the journal (journalctl --user -u fleetmgr)\n", path)
		return err
	}
	p := &logPrinter{w: w, req: req, proc: "serve"}
	for _, l := range tail {
		if err := p.print("", lifecycle.LogLine{Text: l}); err != nil {
			return err
		}
	}
	if !req.Follow {
		return nil
	}
	lw := &lineSink{each: func(l string) error { return p.print("", lifecycle.LogLine{Text: l}) }}
	return c.m.FollowFile(ctx, path, lw)
}

// lineSink hands each complete line written to it to each.
type lineSink struct {
	each    func(string) error
	pending []byte
}

func (l *lineSink) Write(b []byte) (int, error) {
	l.pending = append(l.pending, b...)
	for {
		i := strings.IndexByte(string(l.pending), '\n')
		if i < 0 {
			return len(b), nil
		}
		line := string(l.pending[:i])
		l.pending = l.pending[i+1:]
		if err := l.each(line); err != nil {
			return 0, err
		}
	}
}
