// Package sharedref is test equipment: it finds the reference files the
// project keeps outside its repository, in the shared folder laid beside
// the clone (../shared from the repository root, as CI has it): herdr's
// JSON API schema and what is known of herdr and fleetd. The repository
// carries none of those files (they are other projects' work); tests that
// check against them skip, saying why, on a bare clone.
package sharedref

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// HerdrSchema is herdr's socket API JSON Schema (draft 2020-12, protocol 20,
// as `herdr api schema --json` prints it), relative to the shared folder.
const HerdrSchema = "ref/herdr-api.schema.json"

// EnvDir names the shared folder explicitly; unset, it is ../shared beside
// the repository root.
const EnvDir = "FLEETMGR_SHARED_DIR"

// Path returns the absolute path of rel (e.g. HerdrSchema) in the shared
// folder, found from dir (a directory inside the repository: the walk goes
// up to the directory holding go.mod, then to ../shared), or an error
// saying where it looked.
func Path(dir, rel string) (string, error) {
	if d := os.Getenv(EnvDir); d != "" {
		return existing(filepath.Join(d, rel))
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := abs; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return existing(filepath.Join(filepath.Dir(d), "shared", rel))
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s, so no ../shared beside the repository", abs)
		}
	}
}

func existing(p string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("%s does not exist (a bare clone has no ../shared beside it; set %s to the shared folder)", p, EnvDir)
		}
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", p)
	}
	return p, nil
}

// Require returns the path of rel in the shared folder (see Path, from the
// test's working directory, its package's), or skips the test with one
// line saying what is missing.
func Require(t testing.TB, rel string) string {
	t.Helper()
	p, err := Path(".", rel)
	if err != nil {
		t.Skipf("skipped: needs %s from the shared folder: %v", rel, err)
	}
	return p
}
