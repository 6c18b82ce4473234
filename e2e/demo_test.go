package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/brokertest"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// TestDemoScript runs the README's demo command (scripts/demo --once): two
// fleets on the stand-ins, a call routed to each, both stopped at the end.
func TestDemoScript(t *testing.T) {
	root, err := harness.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "fmdemo")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "demo"), "--once")
	cmd.Dir = root
	// README: nothing to install but Go. A curl that is not there (here:
	// one that fails) must not matter.
	nocurl := filepath.Join(dir, "nocurl")
	if err := os.MkdirAll(nocurl, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nocurl, "curl"), []byte("#!/bin/sh\necho 'curl: not installed' >&2\nexit 127\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "FLEETMGR_DEMO_DIR="+dir, "FLEETMGR_DEMO_LISTEN=127.0.0.1:"+strconv.Itoa(harness.FreePort(t)),
		"PATH="+nocurl+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/demo --once: %v\n%s", err, out)
	}
	s := string(out)
	for _, want := range []string{`"fleet":"kb","role":"primary"`, `"fleet":"docs","role":"primary"`, "kb: stopped", "docs: stopped"} {
		if !strings.Contains(s, want) {
			t.Errorf("demo output lacks %q:\n%s", want, s)
		}
	}
	// The demo's build says which fleetmgr it is; in a clone (not a git
	// worktree, whose .git is a file) that names HEAD's revision.
	if !regexp.MustCompile(`(?m)^fleetmgr \S+ \(revision `).MatchString(s) {
		t.Errorf("demo output lacks fleetmgr --version's line:\n%s", s)
	}
	if st, err := os.Stat(filepath.Join(root, ".git")); err == nil && st.IsDir() {
		if head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output(); err == nil && !strings.Contains(s, "(revision "+strings.TrimSpace(string(head))) {
			t.Errorf("demo's fleetmgr --version does not name HEAD %s:\n%s", head, s)
		}
	}
}

// TestDemoTwoHosts runs `scripts/demo --two-hosts --once` (README "Across
// hosts") on RabbitMQ: beta in a network namespace behind the relay,
// alpha's status showing beta's fleet with its verdicts, a restart of
// kb@beta from alpha, and nothing left behind (namespace, vhosts, users).
func TestDemoTwoHosts(t *testing.T) {
	brokertest.Each(t, func(t *testing.T, b *brokertest.Broker) {
		if b.Product != "RabbitMQ" {
			t.Skip("the demo runs once, on RabbitMQ")
		}
		if os.Getuid() != 0 {
			if os.Getenv("CI") != "" {
				t.Fatal("CI is set but this is not root: the two-host demo needs a network namespace")
			}
			t.Skip("needs root (ip netns)")
		}
		root, err := harness.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		dir, err := os.MkdirTemp("", "fmdemo2")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "demo"), "--two-hosts", "--once")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "FLEETMGR_DEMO_DIR="+dir, "FLEETMGR_DEMO_BROKER_MGMT="+b.MgmtURL, "FLEETMGR_DEMO_BROKER_AMQP="+b.AMQPURL,
			"FLEETMGR_DEMO_BROKER_USER="+b.User, "FLEETMGR_DEMO_BROKER_PASSWORD="+b.Password, "FLEETMGR_DEMO_LISTEN=127.0.0.1:"+strconv.Itoa(harness.FreePort(t)))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("scripts/demo --two-hosts --once: %v\n%s", err, out)
		}
		s := string(out)
		for _, want := range []string{"beta: online, 1 fleet(s)", "kb@beta: running", "== done"} {
			if !strings.Contains(s, want) {
				t.Errorf("demo output lacks %q:\n%s", want, s)
			}
		}
		if !regexp.MustCompile(`(?m)^kb@beta\s+running\s+1 IDLE\s`).MatchString(s) {
			t.Errorf("alpha's status does not show kb@beta running with its member's verdict:\n%s", s)
		}
		pid := regexp.MustCompile(`fmdemo-beta-(\d+)`).FindStringSubmatch(s)
		if pid == nil {
			t.Fatalf("no namespace named in the output:\n%s", s)
		}
		if nl, _ := exec.Command("ip", "netns", "list").Output(); strings.Contains(string(nl), "fmdemo-beta-"+pid[1]) {
			t.Errorf("namespace fmdemo-beta-%s left behind", pid[1])
		}
		if ok, err := b.Admin(t).VhostExists(ctx, "fmdemo"+pid[1]); ok || err != nil {
			t.Errorf("vhost fmdemo%s left behind (%v)", pid[1], err)
		}
	})
}
