package herdr_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/testbed/herdrd"
)

// standin starts a herdr stand-in (real PTY shells) tuned by tune and returns a client for it.
func standin(t *testing.T, tune func(*herdrd.Config)) *herdr.Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "fmev")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg := herdrd.Config{Socket: filepath.Join(dir, "herdr.sock"), Logger: slog.New(slog.DiscardHandler),
		Env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "LANG=C.UTF-8"}}
	if tune != nil {
		tune(&cfg)
	}
	srv, err := herdrd.Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = srv.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &herdr.Client{Socket: srv.Socket(), Timeout: 5 * time.Second}
}

// next reads events until want holds, within d.
func next(t *testing.T, s *herdr.Stream, d time.Duration, want func(herdr.Event, herdr.EventData) bool) herdr.EventData {
	t.Helper()
	got := make(chan herdr.EventData, 1)
	fail := make(chan error, 1)
	go func() {
		for {
			ev, err := s.Next()
			if err != nil {
				fail <- err
				return
			}
			d, err := ev.Decode()
			if err != nil {
				fail <- err
				return
			}
			if want(ev, d) {
				got <- d
				return
			}
		}
	}()
	select {
	case d := <-got:
		return d
	case err := <-fail:
		t.Fatalf("stream: %v", err)
	case <-time.After(d):
		s.Close()
		t.Fatalf("no matching event within %s", d)
	}
	return herdr.EventData{}
}

// TestClientEvents drives Subscribe, EventsWait, ReportMetadata and NotificationShow against
// the stand-in.
func TestClientEvents(t *testing.T) {
	hc := standin(t, nil)
	ctx := context.Background()
	pong, err := hc.Ping(ctx)
	if err != nil || !herdr.HasPush(pong.Protocol) || herdr.PushLiveOnly(pong.Protocol) {
		t.Fatalf("ping %+v %v", pong, err)
	}
	w, err := hc.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Cwd: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	pane := w.RootPane.PaneID
	life, err := hc.Subscribe(ctx, []herdr.Subscription{{Type: herdr.SubPaneCreated}, {Type: herdr.SubPaneClosed}})
	if err != nil {
		t.Fatal(err)
	}
	defer life.Close()
	st, err := hc.Subscribe(ctx, []herdr.Subscription{{Type: herdr.SubAgentStatus, PaneID: pane}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Protocol 20 replays the retained history: the workspace's pane first.
	if d := next(t, life, 5*time.Second, func(e herdr.Event, _ herdr.EventData) bool { return e.Kind() == herdr.KindPaneCreated }); d.PaneID != pane {
		t.Fatalf("replayed pane_created %+v", d)
	}
	if err := hc.PaneSendInput(ctx, pane, `printf '\033]777;herdr-status;blocked\007'`, []string{"Enter"}); err != nil {
		t.Fatal(err)
	}
	d := next(t, st, 5*time.Second, func(e herdr.Event, _ herdr.EventData) bool { return e.Kind() == herdr.KindAgentStatus })
	if d.PaneID != pane || d.AgentStatus != herdr.StatusBlocked {
		t.Fatalf("status event %+v", d)
	}
	ev, err := hc.EventsWait(ctx, herdr.EventMatch{Event: herdr.KindAgentStatus, PaneID: pane, AgentStatus: herdr.StatusBlocked}, time.Second)
	if err != nil || ev.Kind() != herdr.KindAgentStatus {
		t.Fatalf("events.wait (already blocked) = %+v, %v", ev, err)
	}
	if _, err := hc.EventsWait(ctx, herdr.EventMatch{Event: herdr.KindAgentStatus, PaneID: pane, AgentStatus: herdr.StatusIdle}, 200*time.Millisecond); !herdr.IsCode(err, "timeout") {
		t.Fatalf("events.wait timeout: %v", err)
	}
	if err := hc.ReportMetadata(ctx, herdr.ReportMetadataParams{PaneID: pane, Source: "fleetmgr", StateLabels: map[string]string{"fleetmgr": "STALLED 3m"}, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if p, err := hc.PaneGet(ctx, pane); err != nil || p.StateLabels["fleetmgr"] != "STALLED 3m" {
		t.Fatalf("labels %+v %v", p, err)
	}
	n, err := hc.NotificationShow(ctx, herdr.NotificationParams{Title: "t", Sound: "done"})
	if err != nil || n.Shown || n.Reason != "no_foreground_client" {
		t.Fatalf("notification.show %+v %v", n, err)
	}
	if _, err := hc.Subscribe(ctx, []herdr.Subscription{{Type: herdr.SubAgentStatus, PaneID: "w9:p9"}}); !herdr.IsCode(err, "pane_not_found") {
		t.Fatalf("subscribe to an unknown pane: %v", err)
	}
	// The stream ends when the client closes it; Next then fails.
	st.Close()
	if _, err := st.Next(); err == nil {
		t.Fatal("Next after Close succeeded")
	}
}

// TestClientEventsLost: at protocol 22 a subscriber left behind the history reads events_lost
// as *Error, then the end of the stream.
func TestClientEventsLost(t *testing.T) {
	hc := standin(t, func(c *herdrd.Config) { c.Protocol = 22; c.EventHistory = 8 })
	ctx := context.Background()
	w, err := hc.WorkspaceCreate(ctx, herdr.WorkspaceCreateParams{Cwd: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	pane := w.RootPane.PaneID
	s, err := hc.Subscribe(ctx, []herdr.Subscription{{Type: herdr.SubAgentStatus, PaneID: pane}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	burst := strings.Repeat(`\033]777;herdr-status;working\007\033]777;herdr-status;idle\007`, 20)
	if err := hc.PaneSendInput(ctx, pane, "printf '"+burst+"'", []string{"Enter"}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Next(); err != nil {
				errc <- err
				return
			}
		}
	}()
	select {
	case err := <-errc:
		if !herdr.IsCode(err, herdr.CodeEventsLost) {
			t.Fatalf("lagging subscriber: %v, want events_lost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no events_lost within 10 s")
	}
	if _, err := s.Next(); err == nil || herdr.IsCode(err, herdr.CodeEventsLost) {
		t.Fatalf("after events_lost: %v, want the connection closed", err)
	} else if err != io.EOF && !strings.Contains(err.Error(), "EOF") {
		t.Logf("after events_lost: %v", err)
	}
}

// TestClientWithoutPush: a herdr lacking the methods answers them as unknown (IsMethodMissing).
func TestClientWithoutPush(t *testing.T) {
	hc := standin(t, func(c *herdrd.Config) { c.WithoutPush = true })
	_, err := hc.Subscribe(context.Background(), nil)
	if !herdr.IsMethodMissing(err) {
		t.Fatalf("subscribe on a herdr without it: %v", err)
	}
	if herdr.IsMethodMissing(&herdr.Error{Code: "pane_not_found", Message: "unknown variant"}) {
		t.Fatal("IsMethodMissing for another code")
	}
}
