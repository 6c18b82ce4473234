package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
	"github.com/fleetmgr/fleetmgr/testbed/wait"
)

// secretEnv is what fleetmgr's (CLI and daemon) environment holds that no
// fleet process may get: the broker administrator's variables by their
// default names, a federation-style FLEETMGR_* key, and a token nobody
// listed. Each value is unique, so a leak is found by value too.
var secretEnv = []string{
	"FLEETMGR_BROKER_USER=admin-LEAKED-1",
	"FLEETMGR_BROKER_PASSWORD=pw-LEAKED-2",
	"FLEETMGR_FEDERATION_KEY=fed-LEAKED-3",
	"SOME_TOKEN=token-LEAKED-4",
}

// leadExtra launches a lead whose process stays (a shell running sleep), announced as an agent
// with the herdr stand-in's status escape so that the launch's readiness wait ends at once.
const leadExtra = `lead_command = ["sh", "-c", "printf '\\033]777;herdr-status;idle\\007'; echo LEAD-UP; exec sleep 600"]`

// fleetProcs returns every live process of fleet name: the sessions of its
// herdr server and fleetd (each with its log pipe copier) and of every
// pane shell of its herdr session (the lead's included), found by session
// id in /proc.
func fleetProcs(t *testing.T, e *harness.Env, name string) map[int]string {
	t.Helper()
	st := readState(t, e, name)
	if st.Fleetd == nil || st.Herdr == nil {
		t.Fatalf("state of %s lacks fleetd or herdr: %+v", name, st)
	}
	sessions := map[int]string{st.Herdr.PID: "herdr", st.Fleetd.PID: "fleetd"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hc := herdr.New(st.HerdrSocket)
	panes, err := hc.PaneList(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range panes {
		pi, err := hc.PaneProcessInfo(ctx, p.PaneID)
		if err != nil || pi.ShellPID <= 0 {
			t.Fatalf("pane %s: %+v %v", p.PaneID, pi, err)
		}
		sessions[pi.ShellPID] = "pane " + p.PaneID
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		s, err := procfs.ReadStat(pid)
		if err != nil || s.State == 'Z' {
			continue
		}
		if what, ok := sessions[s.Session]; ok {
			cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			out[pid] = what + ": " + strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")
		}
	}
	return out
}

// exited reports whether pid is gone or a zombie within a second (a
// process whose memory is released is on its way there).
func exited(pid int) bool {
	return wait.Until(context.Background(), time.Second, wait.Bool(func() bool {
		s, err := procfs.ReadStat(pid)
		return err != nil || s.State == 'Z' || s.State == 'X' || s.State == 'x'
	})) == nil
}

// checkFleetEnv reads /proc/PID/environ of every process of fleet name:
// none may hold a variable of secretEnv (by name or value) nor one named in
// extraNames; every one gets the pass_env variables, fleetd and the lead
// the fleet's env too.
func checkFleetEnv(t *testing.T, e *harness.Env, name string, extraNames ...string) {
	t.Helper()
	procs := fleetProcs(t, e, name)
	st := readState(t, e, name)
	var lead, fleetd, copiers, panes int
	for pid, what := range procs {
		env, err := procfs.Environ(pid)
		if (err != nil || len(env) == 0) && exited(pid) {
			// It ended between the scan and the read (a login shell's
			// short-lived child such as `id -u`, say): the kernel shows an
			// exiting process's environment empty, or no longer shows the
			// process at all, and it holds nothing.
			continue
		}
		if err != nil {
			t.Errorf("%d (%s): %v", pid, what, err)
			continue
		}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			for _, s := range secretEnv {
				sk, sv, _ := strings.Cut(s, "=")
				if k == sk || strings.Contains(v, sv) {
					t.Errorf("pid %d (%s) holds %s", pid, what, kv)
				}
			}
			if slices.Contains(extraNames, k) {
				t.Errorf("pid %d (%s) holds %s", pid, what, k)
			}
		}
		has := func(kv string) bool { return slices.Contains(env, kv) }
		if !has("MGR_PASSED=mgr-value") || !has("KB_PASSED=kb-value") {
			t.Errorf("pid %d (%s) lacks the pass_env variables", pid, what)
		}
		switch {
		case strings.Contains(what, "logpipe --file"):
			copiers++
		case pid == st.Fleetd.PID:
			fleetd++
			if !has("KB_ENV=from-env") || !has("FLEET_NAME="+name) {
				t.Errorf("fleetd lacks [fleets.%s.env] or the contract: %v", name, env)
			}
		case strings.HasPrefix(what, "pane") && strings.Contains(what, "sleep 600"):
			lead++
			if !has("KB_ENV=from-env") {
				t.Errorf("the lead (pid %d) lacks [fleets.%s.env]", pid, name)
			}
		}
		if strings.HasPrefix(what, "pane") {
			panes++
		}
	}
	t.Logf("fleet %s: %d processes checked, %d in panes, %d log copiers", name, len(procs), panes, copiers)
	if fleetd != 1 || lead != 1 || copiers != 2 || panes < 2 {
		t.Errorf("want fleetd, the lead's sleep, two log copiers and at least two pane processes; got fleetd %d, lead %d, copiers %d, panes %d:\n%v",
			fleetd, lead, copiers, panes, procs)
	}
}

// TestChildrenGetNoSecrets: with the broker administrator's variables, a
// FLEETMGR_* key and an unlisted token in fleetmgr's environment, no process
// of a fleet started with a lead holds any of them, herdr server, fleetd,
// log pipes and every pane included; pass_env and [fleets.NAME.env] arrive.
// Both start paths: the CLI alone, and through the daemon.
func TestChildrenGetNoSecrets(t *testing.T) {
	for _, viaDaemon := range []bool{false, true} {
		t.Run(map[bool]string{false: "cli", true: "daemon"}[viaDaemon], func(t *testing.T) {
			e := harness.NewEnv(t, bins, `pass_env = ["MGR_PASSED"]`, harness.Fleet{Name: "kb",
				Extra: leadExtra + "\npass_env = [\"KB_PASSED\"]\n[fleets.kb.env]\nKB_ENV = \"from-env\"\n"})
			e.Environ = append(e.Environ, secretEnv...)
			e.Environ = append(e.Environ, "MGR_PASSED=mgr-value", "KB_PASSED=kb-value")
			var serve *harness.Serve
			if viaDaemon {
				serve = e.StartServe()
			}
			e.MustRun("start", "kb", "--lead")
			if viaDaemon && !strings.Contains(serve.Log(), "start step") {
				t.Fatalf("the start did not go through the daemon:\n%s", serve.Log())
			}
			newPane(t, e.HerdrSocket("kb"), "member")
			waitLead(t, e.HerdrSocket("kb"))
			checkFleetEnv(t, e, "kb")
		})
	}
}

// TestChildrenGetNoSecretsWithBroker: the same through the daemon with a
// [broker] whose admin variables have names of their own: neither those
// nor the default names reach a fleet process, while fleetd gets its own
// broker URI.
func TestChildrenGetNoSecretsWithBroker(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *brokertest.Broker) {
		tag := brokertest.Unique("fmenv")
		vhost, user := tag+"/kb", tag+"-kb"
		b.Cleanup(t, []string{vhost}, []string{user})
		e := harness.NewEnv(t, bins, `pass_env = ["MGR_PASSED"]`+fmt.Sprintf("\n[broker]\nmanagement_url = %q\namqp_url = %q\nadmin_user_env = \"MQ_ADMIN\"\nadmin_password_env = \"MQ_ADMIN_PW\"\n", b.MgmtURL, b.AMQPURL),
			harness.Fleet{Name: "kb", Extra: leadExtra + fmt.Sprintf("\nvhost = %q\nbroker_user = %q\npass_env = [\"KB_PASSED\"]\n[fleets.kb.env]\nKB_ENV = \"from-env\"\n", vhost, user)})
		e.Environ = append(e.Environ, secretEnv...)
		e.Environ = append(e.Environ, "MGR_PASSED=mgr-value", "KB_PASSED=kb-value", "MQ_ADMIN="+b.User, "MQ_ADMIN_PW="+b.Password)
		e.StartServe()
		e.MustRun("start", "kb", "--lead")
		newPane(t, e.HerdrSocket("kb"), "member")
		waitLead(t, e.HerdrSocket("kb"))
		// The admin's values are the test broker's (guest/guest by default),
		// too common to search by value: by name only.
		checkFleetEnv(t, e, "kb", "MQ_ADMIN", "MQ_ADMIN_PW")
		env, err := procfs.Environ(readState(t, e, "kb").Fleetd.PID)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(env, func(kv string) bool {
			return strings.HasPrefix(kv, "FLEET_BROKER_URI=amqp://"+user+":")
		}) {
			t.Errorf("fleetd lacks its own broker URI: %v", env)
		}
	})
}

// waitLead waits until the lead's sleep runs in the fleet's lead tab.
func waitLead(t *testing.T, sock string) {
	t.Helper()
	hc := herdr.New(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !svWait(20*time.Second, func() bool {
		panes, err := hc.PaneList(ctx, "")
		if err != nil {
			return false
		}
		for _, p := range panes {
			pi, err := hc.PaneProcessInfo(ctx, p.PaneID)
			if err == nil && slices.ContainsFunc(pi.ForegroundProcesses, func(f herdr.ForegroundProcess) bool { return f.Name == "sleep" }) {
				return true
			}
		}
		return false
	}) {
		t.Fatal("the lead's sleep did not start")
	}
}
