package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/journal"
)

// TestEventsOutcomeColumn: one long outcome no longer widens the events
// table's OUTCOME column for every row; its text moves to the detail.
func TestEventsOutcomeColumn(t *testing.T) {
	at := time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	printEvents(&b, []journal.Event{
		{Time: at, Fleet: "kb", Kind: journal.KindControl, Outcome: "ok", Detail: "start", Origin: "cli"},
		{Time: at, Fleet: "kb", Kind: journal.KindControl, Outcome: "error: fleet kb: port 4100 is taken by another process (pid 77)", Detail: "start", Origin: "cli"},
		{Time: at, Fleet: "kb", Kind: journal.KindNotify, Outcome: "averyveryverylongoutcomewithoutlabel", Detail: "x"},
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 lines:\n%s", b.String())
	}
	ok := lines[0]
	i := strings.Index(ok, " ok ")
	if i < 0 || !strings.HasPrefix(strings.TrimLeft(ok[i+4:], " "), "start by cli") || len(ok[i+4:])-len(strings.TrimLeft(ok[i+4:], " ")) > outcomeWidth+1 {
		t.Errorf("the ok row's OUTCOME column is wider than %d:\n%s", outcomeWidth, b.String())
	}
	if !strings.Contains(lines[1], " error ") || !strings.Contains(lines[1], "fleet kb: port 4100 is taken by another process (pid 77); start by cli") {
		t.Errorf("a long error outcome: %q", lines[1])
	}
	if !strings.Contains(lines[2], "averyveryve… ") || !strings.Contains(lines[2], "averyveryverylongoutcomewithoutlabel; x") {
		t.Errorf("a long outcome without a label: %q", lines[2])
	}
}
