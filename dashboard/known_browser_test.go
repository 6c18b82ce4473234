package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/dashboard/browsertest"
	"github.com/fleetmgr/fleetmgr/resources"
	"github.com/fleetmgr/fleetmgr/status"
	poll "github.com/fleetmgr/fleetmgr/testbed/wait"
)

// TestBrowserFirstPaintShowsKnownMembers (issue 24 item 16): a page's
// first paint shows the members serve knows. The dashboard's own
// samplings fail (its warm-up one included), and its event stream never
// answers (the test server holds /events open without a byte), so all
// the page can draw comes from GET /api/snapshot; a status report serve
// made for someone else (the CLI's `fleetmgr status`, handed over by
// Observe) listed 7 members, and the first render shows all 7 with their
// verdicts, not "no members" or "sampling…". A report of an earlier fleetd
// (another pid) is not taken.
func TestBrowserFirstPaintShowsKnownMembers(t *testing.T) {
	w := newWorld(t, "kb", "old")
	w.run("kb")
	w.run("old")
	w.setMembers("kb", members(status.Working, status.Working, status.Stalled, status.Idle, status.Blocked, status.Working, status.Idle)...)
	w.setMembers("old", members(status.Working, status.Working)...)
	rep, err := w.Status(context.Background(), nil) // what `fleetmgr status` got from serve
	if err != nil {
		t.Fatal(err)
	}
	w.run("old") // a new fleetd since that report: its members are not the old one's
	w.mu.Lock()
	w.holdSamples = true // the dashboard's own samplings never succeed
	w.mu.Unlock()

	s, err := New(w.options())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	blocked := make(chan struct{})
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/events" { // the stream is held: no event reaches the page
			select {
			case <-r.Context().Done():
			case <-blocked:
			}
			return
		}
		s.ServeHTTP(rw, r)
	}))
	t.Cleanup(func() { close(blocked); cancel(); <-done; ts.Close() })
	s.Observe(rep)

	p := browsertest.Shared(t).NewPage(t)
	if err := p.Navigate(ts.URL + "/"); err != nil {
		t.Fatal(err)
	}
	wait(t, p, `document.documentElement.dataset.rendered !== undefined`, 10*time.Second)
	if live := js[string](t, p, `document.documentElement.dataset.live`); live != "false" {
		t.Fatalf("the page is live (%s): the test meant the stream to be held", live)
	}
	card := fleetSel("kb")
	got := js[string](t, p, `[...`+card+`.querySelectorAll('tr.member')].map((tr) => tr.dataset.member + '=' + tr.dataset.verdict).join(' ')`)
	want := "m1=WORKING m2=WORKING m3=STALLED m4=IDLE m5=BLOCKED m6=WORKING m7=IDLE"
	if got != want {
		t.Errorf("first paint's members of kb: %q, want %q (note %q)", got, want, js[string](t, p, card+`.querySelector('.members-note').textContent`))
	}
	if txt := js[string](t, p, card+`.querySelector('.f-sampled').textContent`); !strings.HasSuffix(txt, "ago") {
		t.Errorf("kb's sample age at first paint: %q", txt)
	}
	if n := js[int](t, p, fleetSel("old")+`.querySelectorAll('tr.member').length`); n != 0 {
		t.Errorf("old shows %d members of its previous fleetd", n)
	}
	if sum := js[string](t, p, `document.getElementById('summary').textContent`); !strings.Contains(sum, "7 members: 3 working, 1 stalled, 1 blocked") {
		t.Errorf("summary at first paint: %q", sum)
	}
}

// TestBrowserLastChangeIsVerdictChange (issue 24 item 16): a member's
// "Last change" is when it took its verdict, kept across samplings: not
// the sample's age (which restarts at every sampling) nor its last file or
// output activity (last_change_age_s, which the STALLED badge shows). A
// member first seen with its verdict says "≥"; a change herdr pushed
// (VerdictChanged) is placed at the pushed time exactly.
func TestBrowserLastChangeIsVerdictChange(t *testing.T) {
	w := newWorld(t, "kb")
	w.run("kb")
	ms := members(status.Working, status.Stalled, status.Working)
	w.setMembers("kb", ms...)
	s, ts, p := openPage(t, w, w.options())
	row := func(id string) string { return fleetSel("kb") + `.querySelector('[data-member="` + id + `"]')` }
	wait(t, p, row("m3")+` !== null`, 10*time.Second)
	// m2 has been STALLED for 14 minutes of no activity, but this serve
	// saw it first just now: at least since then, not "14m ago".
	wait(t, p, `/^≥ /.test(`+row("m2")+`.querySelector('.m-age').textContent)`, 5*time.Second)
	if txt := js[string](t, p, row("m2")+`.querySelector('.m-age').textContent`); strings.Contains(txt, "14m") {
		t.Errorf("m2's last change %q is its activity age, not its verdict's", txt)
	}

	// m1 goes STALLED (no activity for 10 minutes); m3 goes BLOCKED, as
	// herdr pushed it (at the moment of the push); samplings go on.
	ms[0] = members(status.Stalled)[0]
	ms[0].LastChangeAgeS = ptr(600.0)
	ms[2].Verdict, ms[2].Evidence, ms[2].Reason, ms[2].AgentStatus = status.Blocked, nil, "herdr agent_status blocked: waiting for a human", "blocked"
	pushed := time.Now().UTC().Truncate(time.Millisecond)
	s.VerdictChanged(status.VerdictChange{Fleet: "kb", Member: "m3", PaneID: ms[2].PaneID, From: status.Working, To: status.Blocked, At: pushed})
	changed := time.Now()
	w.setMembers("kb", ms...)
	wait(t, p, row("m1")+`.dataset.verdict === 'STALLED' && `+row("m3")+`.dataset.verdict === 'BLOCKED'`, 10*time.Second)
	at := js[string](t, p, row("m1")+`.querySelector('.m-age').dataset.changedAt`)
	when, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		t.Fatalf("m1's data-changed-at %q: %v", at, err)
	}
	// The first report that showed it was generated after the change
	// (its sampling read the members after setMembers) and before the
	// next sampling began (samplings never overlap).
	var next time.Time
	poll.For(t, 10*time.Second, "two samplings begun after the change", poll.Bool(func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		n := 0
		for _, t0 := range w.sampled {
			if t0.After(changed) {
				if n++; n == 2 {
					next = t0
				}
			}
		}
		return n >= 2
	}))
	if when.Before(changed) || !when.Before(next) {
		t.Errorf("m1 took STALLED at %v by the page; the test changed it at %v, and the second sampling after began at %v", when, changed, next)
	}
	// Samplings go on; the change stays where it was: two seconds on,
	// the card's sample is under two seconds old, its last change over two.
	poll.For(t, 10*time.Second, "3 s after the change", poll.Bool(func() bool { return time.Since(when) > 3*time.Second }))
	wait(t, p, `['0', '1'].includes(`+fleetSel("kb")+`.dataset.sampleAge)`, 5*time.Second)
	got := js[[]string](t, p, `[`+row("m1")+`.querySelector('.m-age').dataset.changedAt, `+fleetSel("kb")+`.dataset.sampleAge, `+row("m1")+`.querySelector('.m-age').textContent]`)
	if got[0] != at || (got[1] != "0" && got[1] != "1") || !regexp.MustCompile(`^([2-9]|\d\d)(\.\d)?s ago$|^\d+m\d+s ago$`).MatchString(got[2]) {
		t.Errorf("after more samplings: m1 changed at %q (was %q), sample age %q s, last change %q", got[0], at, got[1], got[2])
	}
	txt := js[string](t, p, row("m1")+`.querySelector('.m-age').textContent`)
	if strings.HasPrefix(txt, "≥") || strings.Contains(txt, "10m") || !strings.HasSuffix(txt, " ago") {
		t.Errorf("m1's last change text %q", txt)
	}
	if badge := js[string](t, p, row("m1")+`.querySelector('.badge').textContent`); !strings.HasPrefix(badge, "STALLED 10m") {
		t.Errorf("m1's badge %q does not count its activity age", badge)
	}
	if at := js[string](t, p, row("m3")+`.querySelector('.m-age').dataset.changedAt`); at != "" {
		if got, err := time.Parse(time.RFC3339Nano, at); err != nil || !got.Equal(pushed) {
			t.Errorf("m3's last change %q, herdr pushed it at %v", at, pushed)
		}
	} else {
		t.Error("m3 has no last change")
	}
	clean(t, p, ts.URL)
}

// TestBrowserCompactGreysStaleRows (issue 24 item 16 in the compact table,
// item 17): each running fleet's row shows its sample's age; once
// sampling stops and the sample is older than two intervals the row is
// greyed (data-stale) and says stale; a new sample makes it fresh again.
func TestBrowserCompactGreysStaleRows(t *testing.T) {
	w := newWorld(t, "kb", "idle")
	w.intervalMS = 400 // stale past 800 ms
	w.run("kb")
	w.setMembers("kb", members(status.Working, status.Idle)...)
	_, ts := w.serve(w.options())
	p := newPageAt(t, ts.URL+"/?view=compact", 1400, 900)
	tr := `document.querySelector('#compact-rows tr[data-fleet="kb"]')`
	wait(t, p, tr+` !== null && `+tr+`.dataset.stale === 'false' && / ago$/.test(`+tr+`.querySelector('.c-sampled').textContent)`, 10*time.Second)
	if txt := js[string](t, p, `document.querySelector('#compact-rows tr[data-fleet="idle"] .c-sampled').textContent`); txt != "-" {
		t.Errorf("a stopped fleet's sample age: %q", txt)
	}
	w.mu.Lock()
	w.holdSamples = true
	w.mu.Unlock()
	wait(t, p, tr+`.dataset.stale === 'true'`, 5*time.Second)
	if txt := js[string](t, p, tr+`.querySelector('.c-sampled').textContent`); !containsAll(txt, "ago", "(stale)") {
		t.Errorf("a stale row's sample age: %q", txt)
	}
	if op := js[string](t, p, `getComputedStyle(`+tr+`.querySelector('td')).opacity`); op == "1" {
		t.Errorf("a stale row is not greyed (opacity %s)", op)
	}
	w.mu.Lock()
	w.holdSamples = false
	w.mu.Unlock()
	wait(t, p, tr+`.dataset.stale === 'false'`, 5*time.Second)
	clean(t, p, ts.URL)
}

// TestBrowserResources (issue 28 part 1): the card shows the fleet's CPU
// and memory (with procs and fds) and a sparkline of them over the
// samplings, each member row its CPU and MEM, and the compact table the
// fleet's, all measured from /proc by resources.Sampler at each sampling:
// a member whose process spins shows a high CPU %, its sleeping neighbour
// about none, and every MEM a plausible size.
func TestBrowserResources(t *testing.T) {
	w := newWorld(t, "kb")
	w.run("kb")
	busy := startProc(t, "sh", "-c", "while :; do :; done")
	calm := startProc(t, "sleep", "3600")
	meter, err := resources.New("")
	if err != nil {
		t.Skipf("no /proc: %v", err)
	}
	w.mu.Lock()
	w.meter = meter
	w.memberPIDs = map[string]map[string]int{"kb": {"m1": busy, "m2": calm}}
	w.mu.Unlock()
	w.setMembers("kb", members(status.Working, status.Idle)...)
	opt := w.options()
	opt.SampleEvery, opt.SampleIdle = 500*time.Millisecond, 500*time.Millisecond // CPU % over half a second
	_, ts, p := openPage(t, w, opt)
	card := fleetSel("kb")
	cpu := func(id string) string {
		return card + `.querySelector('[data-member="` + id + `"] .m-cpu').textContent`
	}
	wait(t, p, `/%$/.test(`+cpu("m1")+`) && /%$/.test(`+cpu("m2")+`)`, 10*time.Second)
	// Three samplings more: the sparkline has points.
	wait(t, p, card+`.querySelector('.spark-cpu').getAttribute('points').split(' ').length >= 3`, 10*time.Second)
	pct := func(s string) float64 {
		v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
		if err != nil {
			t.Fatalf("CPU cell %q: %v", s, err)
		}
		return v
	}
	// One read of the page: the cells of one sampling.
	got := js[[]string](t, p, `[`+cpu("m1")+`, `+cpu("m2")+`, `+card+`.querySelector('.f-res').textContent, `+
		card+`.querySelector('[data-member="m1"] .m-mem').textContent, `+card+`.querySelector('[data-member="m2"] .m-mem').textContent]`)
	b, c := pct(got[0]), pct(got[1])
	// The machine's cores are shared (a load of 20 on two cores was seen):
	// a spinning shell gets its share, at least a few percent, a sleep
	// none. (e2e TestStatusResources asks for > 50 % through a real serve.)
	if b < 2 || c > 1 || b <= c {
		t.Errorf("CPU: the spinning member %.1f%%, the sleeping one %.1f%%", b, c)
	}
	memRe := regexp.MustCompile(`^\d+(\.\d)?[KMG]$`)
	for i, mem := range got[3:] {
		if !memRe.MatchString(mem) || mem == "0K" {
			t.Errorf("m%d's MEM %q", i+1, mem)
		}
	}
	res := got[2]
	if m := regexp.MustCompile(`^(\d+(\.\d)?)% CPU, \d+(\.\d)?[KMG] RSS, (\d+) procs, \d+ fds$`).FindStringSubmatch(res); m == nil {
		t.Errorf("the fleet's resources fact %q", res)
	} else if f, _ := strconv.ParseFloat(m[1], 64); f < b-0.1 {
		// One snapshot measures both: the fleet's tree holds the member's.
		t.Errorf("the fleet's CPU %s%% is less than its spinning member's %.1f%%", m[1], b)
	} else if n, _ := strconv.Atoi(m[4]); n < 3 {
		t.Errorf("the fleet counts %d processes: fleetd and two members at least", n)
	}
	if cap := js[string](t, p, card+`.querySelector('.cap-res').textContent`); !containsAll(cap, "CPU % per sampling", "RSS") {
		t.Errorf("resource sparkline caption %q", cap)
	}
	// The compact table: the fleet's CPU and MEM.
	js[bool](t, p, `(document.getElementById('view-toggle').click(), true)`)
	tr := `document.querySelector('#compact-rows tr[data-fleet="kb"]')`
	wait(t, p, tr+` !== null`, 5*time.Second)
	cells := js[[]string](t, p, `[...`+tr+`.children].map((c) => c.textContent)`)
	heads := js[[]string](t, p, `[...document.querySelectorAll('#compact thead th')].map((c) => c.textContent)`)
	if len(cells) != len(heads) {
		t.Fatalf("compact row %q under heads %q", cells, heads)
	}
	for i, h := range heads {
		switch h {
		case "CPU":
			if !strings.HasSuffix(cells[i], "%") || pct(cells[i]) <= 0 {
				t.Errorf("compact CPU %q (the spinning member: %.1f%%)", cells[i], b)
			}
		case "MEM":
			if !memRe.MatchString(cells[i]) {
				t.Errorf("compact MEM %q", cells[i])
			}
		}
	}
	clean(t, p, ts.URL)
}

// startProc starts a process in its own session, killed with the test;
// it returns its pid.
func startProc(t *testing.T, name string, args ...string) int {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd.Process.Pid
}
