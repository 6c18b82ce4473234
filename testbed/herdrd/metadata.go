package herdrd

import (
	"encoding/json"
	"maps"
	"regexp"
	"slices"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
)

// paneMeta is what one source reported for a pane through pane.report_metadata. Guarded by
// pane.mu.
type paneMeta struct {
	labels       map[string]string
	title        string
	displayAgent string
	tokens       map[string]string
	seq          uint64
	hasSeq       bool
	expires      time.Time // zero: never
}

// tokenName is the schema's pattern for a token name (PaneReportMetadataParams.tokens).
var tokenName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// labels returns the state labels every source reported for p and that have not expired,
// merged in source-name order (a later source wins a shared key); nil when none.
func (p *pane) labels() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	l, _, _, _ := p.metaViewLocked(time.Now())
	return l
}

// metaViewLocked merges the unexpired reports of every source (pane.mu held).
func (p *pane) metaViewLocked(now time.Time) (labels map[string]string, title, displayAgent string, tokens map[string]string) {
	for _, src := range slices.Sorted(maps.Keys(p.meta)) {
		m := p.meta[src]
		if !m.expires.IsZero() && now.After(m.expires) {
			continue
		}
		if len(m.labels) > 0 {
			if labels == nil {
				labels = map[string]string{}
			}
			maps.Copy(labels, m.labels)
		}
		if len(m.tokens) > 0 {
			if tokens == nil {
				tokens = map[string]string{}
			}
			maps.Copy(tokens, m.tokens)
		}
		if m.title != "" {
			title = m.title
		}
		if m.displayAgent != "" {
			displayAgent = m.displayAgent
		}
	}
	return labels, title, displayAgent, tokens
}

// paneReportMetadata answers pane.report_metadata: the source's labels, title, display agent
// and tokens for the pane replace what it reported before (clear_* remove them), a report
// whose seq is not above the source's last one is ignored, ttl_ms makes the report expire. The
// pane then shows them (PaneInfo.state_labels, title, display_agent, tokens) and a pane_updated
// event is published.
func (s *Server) paneReportMetadata(raw json.RawMessage) (any, error) {
	var q struct {
		PaneID            string             `json:"pane_id"`
		Source            string             `json:"source"`
		Agent             *string            `json:"agent"`
		Title             *string            `json:"title"`
		DisplayAgent      *string            `json:"display_agent"`
		StateLabels       map[string]string  `json:"state_labels"`
		Tokens            map[string]*string `json:"tokens"`
		ClearTitle        bool               `json:"clear_title"`
		ClearDisplayAgent bool               `json:"clear_display_agent"`
		ClearStateLabels  bool               `json:"clear_state_labels"`
		Seq               *uint64            `json:"seq"`
		TTLMS             *uint64            `json:"ttl_ms"`
	}
	if err := decodeParams(raw, &q, "pane_id", "source"); err != nil {
		return nil, err
	}
	if q.Source == "" {
		return nil, apiErr("invalid_params", "source must not be empty")
	}
	if len(q.Tokens) > 16 {
		return nil, apiErr("invalid_params", "at most 16 tokens, got %d", len(q.Tokens))
	}
	for k := range q.Tokens {
		if !tokenName.MatchString(k) {
			return nil, apiErr("invalid_params", "token name %q must match [A-Za-z0-9_-]{1,32}", k)
		}
	}
	if q.TTLMS != nil && (*q.TTLMS < 1 || *q.TTLMS > 86_400_000) {
		return nil, apiErr("invalid_params", "ttl_ms must be 1..86400000")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.paneByID[q.PaneID]
	if p == nil {
		return nil, apiErr("pane_not_found", "pane %s not found", q.PaneID)
	}
	p.mu.Lock()
	if p.meta == nil {
		p.meta = map[string]*paneMeta{}
	}
	m := p.meta[q.Source]
	if m == nil {
		m = &paneMeta{}
		p.meta[q.Source] = m
	}
	if q.Seq != nil && m.hasSeq && *q.Seq <= m.seq {
		p.mu.Unlock()
		return okResult(), nil // stale: an older report of this source
	}
	if q.Seq != nil {
		m.seq, m.hasSeq = *q.Seq, true
	}
	if q.ClearStateLabels {
		m.labels = nil
	}
	if q.StateLabels != nil {
		m.labels = maps.Clone(q.StateLabels)
	}
	if q.ClearTitle {
		m.title = ""
	}
	if q.Title != nil {
		m.title = *q.Title
	}
	if q.ClearDisplayAgent {
		m.displayAgent = ""
	}
	if q.DisplayAgent != nil {
		m.displayAgent = *q.DisplayAgent
	}
	for k, v := range q.Tokens {
		if v == nil {
			delete(m.tokens, k)
			continue
		}
		if m.tokens == nil {
			m.tokens = map[string]string{}
		}
		m.tokens[k] = *v
	}
	m.expires = time.Time{}
	if q.TTLMS != nil {
		m.expires = time.Now().Add(time.Duration(*q.TTLMS) * time.Millisecond)
	}
	p.revision++
	p.mu.Unlock()
	s.emit(herdr.KindPaneUpdated, p.id, struct {
		Type string   `json:"type"`
		Pane paneJSON `json:"pane"`
	}{herdr.KindPaneUpdated, s.paneView(p)})
	return okResult(), nil
}

// Notification is one notification.show request the stand-in received.
type Notification struct {
	// Title, Body and Sound are as requested ("" when absent).
	Title, Body, Sound string
	// At is when it arrived.
	At time.Time
}

// notificationShow answers notification.show. The stand-in has no TUI client, so, as a headless
// herdr server, it shows nothing: shown false, reason no_foreground_client. Each request is
// recorded (Server.Notifications).
func (s *Server) notificationShow(raw json.RawMessage) (any, error) {
	var q struct {
		Title string  `json:"title"`
		Body  *string `json:"body"`
		Sound *string `json:"sound"`
	}
	if err := decodeParams(raw, &q, "title"); err != nil {
		return nil, err
	}
	n := Notification{Title: q.Title, At: time.Now()}
	if q.Body != nil {
		n.Body = *q.Body
	}
	if q.Sound != nil {
		switch *q.Sound {
		case "none", "done", "request":
		default:
			return nil, badRequest("unknown variant `" + *q.Sound + "` for field `sound`")
		}
		n.Sound = *q.Sound
	}
	s.mu.Lock()
	s.notes = append(s.notes, n)
	s.mu.Unlock()
	return struct {
		Type   string `json:"type"`
		Shown  bool   `json:"shown"`
		Reason string `json:"reason"`
	}{"notification_show", false, "no_foreground_client"}, nil
}

// Notifications returns the notification.show requests received so far, oldest first.
func (s *Server) Notifications() []Notification {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.notes)
}

// PaneLabels returns the state labels reported for a live pane (the stand-in's record of it,
// as PaneInfo.state_labels shows them); false for an unknown pane.
func (s *Server) PaneLabels(paneID string) (map[string]string, bool) {
	s.mu.Lock()
	p := s.paneByID[paneID]
	s.mu.Unlock()
	if p == nil {
		return nil, false
	}
	return p.labels(), true
}
