// Package e2e holds end-to-end tests: real fleetmgr, herdr and fleetd
// stand-in processes, real PTYs, real sockets, the official Go MCP client.
package e2e

import (
	"fmt"
	"os"
	"testing"

	"github.com/fleetmgr/fleetmgr/dashboard/browsertest"
	"github.com/fleetmgr/fleetmgr/testbed/harness"
)

// bins is built once by TestMain for every test in this package.
var bins *harness.Bins

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fmbin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bins, err = harness.Build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	browsertest.CloseShared() // the dashboard tests' browser, if one started
	os.RemoveAll(dir)
	os.Exit(code)
}
