package lifecycle

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
)

// TestShow is the table of what readers are shown of a stored record and
// the facts observed now; facts the derivation does not need are never
// asked for (they cost a flock or a /proc scan).
func TestShow(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	type fact struct{ fleetdAlive, herdrDead, supervised, busy, inConfig bool }
	rows := []struct {
		name      string
		st        State
		f         fact
		spawned   int
		phase     Phase
		cond      Condition
		err       string // a substring of the shown last error; "" for none
		asks      []string
		notInConf bool
		pending   []string
		herdrGone bool
	}{
		{name: "running and alive", st: State{Phase: PhaseRunning}, f: fact{fleetdAlive: true, inConfig: true},
			phase: PhaseRunning},
		{name: "running, its herdr server gone, nobody supervising", st: State{Name: "kb", Phase: PhaseRunning, Herdr: &Proc{PID: 77}}, f: fact{fleetdAlive: true, herdrDead: true, inConfig: true},
			phase: PhaseRunning, herdrGone: true, err: "its herdr server (pid 77) is gone and no fleetmgr serve supervises the fleet; `fleetmgr start kb` starts the session again", asks: []string{"herdr", "supervised"}},
		{name: "running, its herdr server gone, supervised (being restarted)", st: State{Phase: PhaseRunning, Herdr: &Proc{PID: 77}}, f: fact{fleetdAlive: true, herdrDead: true, supervised: true, inConfig: true},
			phase: PhaseRunning, asks: []string{"herdr", "supervised"}},
		{name: "running, its herdr server alive", st: State{Phase: PhaseRunning, Herdr: &Proc{PID: 77}}, f: fact{fleetdAlive: true, inConfig: true},
			phase: PhaseRunning, asks: []string{"herdr"}},
		{name: "running, fleetd gone, wanted stopped", st: State{Phase: PhaseRunning, Desired: DesiredStopped}, f: fact{inConfig: true},
			phase: PhaseStopped, cond: CondExitedStopped},
		{name: "running, fleetd gone, supervised", st: State{Phase: PhaseRunning, Desired: DesiredRunning}, f: fact{supervised: true, inConfig: true},
			phase: PhaseRestarting, cond: CondExitSupervised, asks: []string{"supervised"}},
		{name: "running, fleetd gone, nobody supervising", st: State{Phase: PhaseRunning, Desired: DesiredRunning}, f: fact{inConfig: true},
			phase: PhaseFailed, cond: CondExitUnsupervised, err: "no fleetmgr serve was supervising it", asks: []string{"supervised"}},
		{name: "running, fleetd gone, nobody supervising, an error recorded", st: State{Phase: PhaseRunning, Desired: DesiredRunning, LastError: "boom"}, f: fact{inConfig: true},
			phase: PhaseFailed, cond: CondExitUnsupervised, err: "boom", asks: []string{"supervised"}},
		{name: "restart overdue, nobody supervising", st: State{Phase: PhaseRestarting, Desired: DesiredRunning, Supervision: Supervision{NextRestartAt: now.Add(-time.Minute)}}, f: fact{inConfig: true},
			phase: PhaseFailed, cond: CondRestartOverdue, err: "no fleetmgr serve made it", asks: []string{"supervised"}},
		{name: "restart overdue, supervised", st: State{Phase: PhaseRestarting, Desired: DesiredRunning, Supervision: Supervision{NextRestartAt: now.Add(-time.Minute)}}, f: fact{supervised: true, inConfig: true},
			phase: PhaseRestarting, asks: []string{"supervised"}},
		{name: "restart due soon", st: State{Phase: PhaseRestarting, Desired: DesiredRunning, Supervision: Supervision{NextRestartAt: now.Add(-time.Second)}}, f: fact{inConfig: true},
			phase: PhaseRestarting},
		{name: "starting, in progress", st: State{Phase: PhaseStarting}, f: fact{busy: true, inConfig: true},
			phase: PhaseStarting, asks: []string{"busy"}},
		{name: "starting, interrupted, a spawned fleetd left", st: State{Name: "kb", Phase: PhaseStarting}, f: fact{inConfig: true}, spawned: 4242,
			phase: PhaseFailed, cond: CondInterrupted, err: "a start was interrupted (the fleetmgr running it is gone); fleetd pid 4242 it spawned still runs unrecorded; run `fleetmgr start kb` or `fleetmgr serve` (either adopts a healthy fleetd the start spawned), or `fleetmgr stop kb`",
			asks: []string{"busy", "spawned"}},
		{name: "an operator's restart, in progress", st: State{Phase: PhaseRestarting, Desired: DesiredRunning}, f: fact{busy: true, inConfig: true},
			phase: PhaseRestarting, asks: []string{"busy"}},
		{name: "an operator's restart, lock free, a serve supervising (it makes the restart)", st: State{Phase: PhaseRestarting, Desired: DesiredRunning}, f: fact{supervised: true, inConfig: true},
			phase: PhaseRestarting, asks: []string{"busy", "supervised"}},
		{name: "an operator's restart, interrupted, nobody supervising", st: State{Name: "kb", Phase: PhaseRestarting, Desired: DesiredRunning}, f: fact{inConfig: true},
			phase: PhaseFailed, cond: CondInterrupted, err: "a restart was interrupted (the fleetmgr running it is gone); run `fleetmgr start kb`",
			asks: []string{"busy", "supervised", "spawned"}},
		{name: "stopping, interrupted", st: State{Phase: PhaseStopping}, f: fact{inConfig: true},
			phase: PhaseFailed, cond: CondInterrupted, err: "a stop was interrupted", asks: []string{"busy", "spawned"}},
		// A stop killed before fleetd ended: nothing was spawned to adopt;
		// the advice is to finish the stop, naming what still runs.
		{name: "stopping, interrupted, fleetd still alive", st: State{Name: "kb", Phase: PhaseStopping, Desired: DesiredStopped, Fleetd: &Proc{PID: 4242}}, f: fact{fleetdAlive: true, inConfig: true},
			phase: PhaseFailed, cond: CondInterrupted, err: "a stop was interrupted (the fleetmgr running it is gone); its fleetd pid 4242 still runs; run `fleetmgr stop kb` to finish it",
			asks: []string{"busy", "spawned"}},
		{name: "not in the config, down", st: State{Name: "old", Phase: PhaseFailed, LastError: "boom"}, f: fact{},
			phase: PhaseFailed, err: "fleet old is no longer in /etc/fleets.toml, so nothing restarts it", notInConf: true},
		{name: "not in the config, running", st: State{Phase: PhaseRunning, LastError: "boom"}, f: fact{fleetdAlive: true},
			phase: PhaseRunning, err: "boom", notInConf: true},
		{name: "running with other settings than the file's", st: State{Phase: PhaseRunning, Launch: &Launch{Settings: map[string]string{"port": "a", "env": "b"}}}, f: fact{fleetdAlive: true, inConfig: true},
			phase: PhaseRunning, pending: []string{"port"}, asks: []string{"settings"}},
		{name: "stopped: nothing asked", st: State{Phase: PhaseStopped, Launch: &Launch{Settings: map[string]string{"port": "a"}}}, f: fact{inConfig: true},
			phase: PhaseStopped},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			var asked []string
			ask := func(what string) { asked = append(asked, what) }
			f := facts{
				fleetdAlive:  r.f.fleetdAlive,
				herdrAlive:   func() bool { ask("herdr"); return !r.f.herdrDead },
				supervised:   func() bool { ask("supervised"); return r.f.supervised },
				busy:         func() bool { ask("busy"); return r.f.busy },
				spawnedPID:   func() int { ask("spawned"); return r.spawned },
				overdueAfter: 10 * time.Second,
				inConfig:     r.f.inConfig,
				configPath:   "/etc/fleets.toml",
				settings:     func() map[string]string { ask("settings"); return map[string]string{"port": "c", "env": "b"} },
			}
			stored := r.st
			v := r.st.show(now, f)
			if v.Phase != r.phase || v.Condition != r.cond || v.NotInConfig != r.notInConf || !slices.Equal(v.RestartPending, r.pending) || v.HerdrGone != r.herdrGone {
				t.Errorf("shown %+v; want phase %s, condition %q, not in config %v, restart pending %v, herdr gone %v", v, r.phase, r.cond, r.notInConf, r.pending, r.herdrGone)
			}
			if r.err == "" && v.LastError != "" || !strings.Contains(v.LastError, r.err) {
				t.Errorf("shown last error %q, want %q in it", v.LastError, r.err)
			}
			if !slices.Equal(asked, r.asks) {
				t.Errorf("asked %v, want %v", asked, r.asks)
			}
			if r.st.Phase != stored.Phase || r.st.LastError != stored.LastError {
				t.Errorf("show changed the record: %+v", r.st)
			}
		})
	}
}

// TestWhatNext is the table of the sentence a fleet whose start did not
// become healthy is shown with (issue 24 item 5): as the supervisor
// decides it (decide.go), before and after it recorded its decision.
func TestWhatNext(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	pol := registry.RestartPolicy{Mode: registry.RestartAlways, StartRetries: 3, CrashLoopRestarts: 5,
		CrashLoopWindow: registry.Duration{Duration: time.Minute},
		BackoffInitial:  registry.Duration{Duration: time.Second}, BackoffMax: registry.Duration{Duration: time.Minute}}
	startErr := "fleet kb: fleetd exited during start (exit status 3); last log lines of /s/fleetd.log:\n  crashing"
	failed := func(retries int) State {
		return State{Name: "kb", Desired: DesiredRunning, Phase: PhaseFailed, PhaseAt: now.Add(-200 * time.Millisecond), LastError: startErr,
			Supervision: Supervision{StartRetries: retries, BackoffStep: retries}}
	}
	pending := func(retries int, in time.Duration) State {
		return State{Name: "kb", Desired: DesiredRunning, Phase: PhaseRestarting, LastError: startErr,
			Supervision: Supervision{StartRetries: retries, BackoffStep: retries, NextRestartAt: now.Add(in),
				LastRestartReason: "start failed: fleetd exited during start (exit status 3)"}}
	}
	rows := []struct {
		name       string
		st         State
		supervised bool
		mode       registry.RestartMode
		retries    int // start_retries, when not 3
		want       string
		left       int
		retrying   bool
	}{
		{name: "the operator's start failed, serve has not decided yet", st: failed(0), supervised: true,
			want: "kb did not become healthy: fleetd exited during start (exit status 3); serve retries 3 more times, next in 1 s; `fleetmgr stop kb` to give up", left: 3, retrying: true},
		{name: "the first retry decided, due in 1 s", st: pending(1, 800*time.Millisecond), supervised: true,
			want: "kb did not become healthy: fleetd exited during start (exit status 3); serve retries 3 more times, next in 1 s; `fleetmgr stop kb` to give up", left: 3, retrying: true},
		{name: "the second retry decided, due in 2 s", st: pending(2, 1500*time.Millisecond), supervised: true,
			want: "serve retries 2 more times, next in 2 s", left: 2, retrying: true},
		{name: "the last retry under way", st: pending(3, -time.Second), supervised: true,
			want: "serve is retrying it now (retry 3 of 3); `fleetmgr stop kb` to give up", left: 1, retrying: true},
		{name: "the last retry failed, serve has not recorded it yet", st: failed(3), supervised: true,
			want: "kb failed: did not become healthy after 3 retries, the last: fleetd exited during start (exit status 3); `fleetmgr start kb` to try again", retrying: true},
		{name: "retries exhausted", st: func() State {
			s := failed(3)
			s.StartRetriesExhausted, s.LastError = true, startRetriesError("kb", 3, startErr)
			return s
		}(), supervised: true,
			want: "kb failed: did not become healthy after 3 retries, the last: fleetd exited during start (exit status 3); `fleetmgr start kb` to try again", retrying: true},
		{name: "a retry decided, then serve killed", st: pending(1, 800*time.Millisecond),
			want: "kb did not become healthy: fleetd exited during start (exit status 3); no fleetmgr serve runs, so nothing retries it; `fleetmgr start kb` to try again, or `fleetmgr serve` to retry it", left: 3},
		{name: "no serve runs", st: failed(0),
			want: "kb did not become healthy: fleetd exited during start (exit status 3); no fleetmgr serve runs, so nothing retries it; `fleetmgr start kb` to try again, or `fleetmgr serve` to retry it"},
		{name: "restart = never", st: failed(0), supervised: true, mode: registry.RestartNever,
			want: "restart = never, so serve does not retry it; `fleetmgr start kb` to try again"},
		{name: "start_retries = 0", st: failed(0), supervised: true, retries: -1,
			want: "kb failed: did not become healthy: fleetd exited during start (exit status 3); start_retries = 0 allows no retry; `fleetmgr start kb` to try again", retrying: true},
		{name: "the crash loop comes first", st: func() State {
			s := failed(1)
			for i := range 5 {
				s.RestartTimes = append(s.RestartTimes, now.Add(-time.Duration(i+1)*time.Second))
			}
			return s
		}(), supervised: true,
			want: "kb failed: crash loop: 5 restarts within 1m0s, the last after a failed start, fleetd exited during start (exit status 3); not restarting until `fleetmgr start kb`"},
		{name: "a crash loop of failed starts recorded", st: State{Name: "kb", Desired: DesiredRunning, Phase: PhaseFailed, LastError: "crash loop: 5 restarts within 1m0s, …",
			Supervision: Supervision{CrashLoop: true, LastRestartReason: "start failed: port 4100 taken"}}, supervised: true,
			want: "kb failed: crash loop: 5 restarts within 1m0s, …"},
		{name: "a crash loop of exits recorded: the crash loop's own error says it", st: State{Name: "kb", Desired: DesiredRunning, Phase: PhaseFailed, LastError: "crash loop: 5 restarts within 1m0s, …",
			Supervision: Supervision{CrashLoop: true, LastRestartReason: "fleetd exited: exit status 3"}}, supervised: true},
		{name: "wanted stopped: nothing", st: func() State { s := failed(1); s.Desired = DesiredStopped; return s }(), supervised: true},
		{name: "running: nothing", st: State{Name: "kb", Desired: DesiredRunning, Phase: PhaseRunning, Fleetd: &Proc{PID: 1}}, supervised: true},
		{name: "a restart after a crash (not a failed start): nothing", st: State{Name: "kb", Desired: DesiredRunning, Phase: PhaseRestarting,
			Supervision: Supervision{NextRestartAt: now.Add(time.Second), LastRestartReason: "fleetd exited: signal: killed"}}, supervised: true},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			p := pol
			if r.mode != "" {
				p.Mode = r.mode
			}
			if r.retries < 0 {
				p.StartRetries = 0
			}
			v := Shown{Phase: r.st.Phase}
			r.st.whatNext(&v, now, p, func() bool { return r.supervised })
			if r.want == "" && v.Next != "" || !strings.Contains(v.Next, r.want) {
				t.Errorf("next %q, want %q in it", v.Next, r.want)
			}
			if v.StartRetriesLeft != r.left || v.StartRetrying != r.retrying {
				t.Errorf("retrying %v with %d left, want %v with %d", v.StartRetrying, v.StartRetriesLeft, r.retrying, r.left)
			}
		})
	}
}

// TestRetryPendingShown (issue 24, hostile pass): a start that did not
// become healthy while a serve supervises the fleet is shown restarting,
// due after the backoff, as long as start retries are left; never
// "failed" for the moment before the supervisor records its decision.
// With the retries spent it is shown failed and Undecided (the journal
// waits for the supervisor's record); with no serve, restart = never, or
// the retries given up, it is plainly failed.
func TestRetryPendingShown(t *testing.T) {
	now := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	pol := registry.RestartPolicy{Mode: registry.RestartAlways, StartRetries: 2, CrashLoopRestarts: 5,
		CrashLoopWindow: registry.Duration{Duration: time.Minute},
		BackoffInitial:  registry.Duration{Duration: time.Second}, BackoffMax: registry.Duration{Duration: time.Minute}}
	failed := func(retries int) State {
		return State{Name: "kb", Desired: DesiredRunning, Phase: PhaseFailed, PhaseAt: now.Add(-200 * time.Millisecond),
			LastError: "fleet kb: fleetd exited during start (exit status 3)", Supervision: Supervision{StartRetries: retries, BackoffStep: retries}}
	}
	rows := []struct {
		name       string
		st         State
		supervised bool
		mode       registry.RestartMode
		phase      Phase
		cond       Condition
		due        time.Time
		undecided  bool
	}{
		{name: "first failure, serve supervises", st: failed(0), supervised: true, phase: PhaseRestarting, cond: CondStartRetryPending, due: now.Add(800 * time.Millisecond)},
		{name: "second failure, backoff doubled", st: failed(1), supervised: true, phase: PhaseRestarting, cond: CondStartRetryPending, due: now.Add(1800 * time.Millisecond)},
		{name: "the last retry failed", st: failed(2), supervised: true, phase: PhaseFailed, undecided: true},
		{name: "no serve", st: failed(0), phase: PhaseFailed},
		{name: "restart = never", st: failed(0), supervised: true, mode: registry.RestartNever, phase: PhaseFailed},
		{name: "retries given up", st: func() State { s := failed(2); s.StartRetriesExhausted = true; return s }(), supervised: true, phase: PhaseFailed},
		{name: "wanted stopped", st: func() State { s := failed(0); s.Desired = DesiredStopped; return s }(), supervised: true, phase: PhaseFailed},
		{name: "the crash loop comes first", st: func() State {
			s := failed(1)
			for i := range 5 {
				s.RestartTimes = append(s.RestartTimes, now.Add(-time.Duration(i+1)*time.Second))
			}
			return s
		}(), supervised: true, phase: PhaseFailed, undecided: true},
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			p := pol
			if r.mode != "" {
				p.Mode = r.mode
			}
			v := r.st.show(now, facts{supervised: func() bool { return r.supervised }, busy: func() bool { return false },
				spawnedPID: func() int { return 0 }, inConfig: true, policy: &p})
			if v.Phase != r.phase || v.Condition != r.cond || !v.NextRestartAt.Equal(r.due) || v.Undecided != r.undecided {
				t.Errorf("shown %s (%q), due %v, undecided %v; want %s (%q), due %v, undecided %v", v.Phase, v.Condition, v.NextRestartAt, v.Undecided, r.phase, r.cond, r.due, r.undecided)
			}
			if r.cond == CondStartRetryPending && !strings.Contains(v.Next, "serve retries") {
				t.Errorf("a pending retry's what next: %q", v.Next)
			}
		})
	}
}
