package lifecycle

import (
	"errors"
	"strings"
	"testing"
)

// TestLogPipeNeedsFile: `fleetmgr logpipe` without --file is a
// *LogPipeError of exit status 2, before it ignores any signal or starts
// anything (the wrapper and copier paths run in every e2e fleet start).
func TestLogPipeNeedsFile(t *testing.T) {
	for _, a := range []LogPipeArgs{{}, {Command: []string{"/bin/true"}}} {
		err := LogPipe(strings.NewReader("x"), a)
		var le *LogPipeError
		if !errors.As(err, &le) || le.ExitStatus() != 2 || !strings.Contains(err.Error(), "--file is required") {
			t.Errorf("LogPipe(%+v) = %v, want a --file error of status 2", a, err)
		}
	}
}
