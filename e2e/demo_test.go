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
	cmd.Env = append(os.Environ(), "FLEETMGR_DEMO_DIR="+dir, "FLEETMGR_DEMO_LISTEN=127.0.0.1:"+strconv.Itoa(harness.FreePort(t)))
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
