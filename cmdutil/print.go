package cmdutil

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/termtext"
)

// PrintJSON writes v as indented JSON, with the characters a terminal
// would act on (C1 controls, bidi overrides from fleet or peer text)
// written as \u escapes: the same JSON, inert on a terminal.
func PrintJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(termtext.JSON(b), '\n'))
	return err
}

// PrintResult prints res as JSON (asJSON), or lines; then returns err (a
// result with an error: the edit was made, what followed it failed).
func PrintResult(ios *iostreams.IOStreams, asJSON bool, res any, lines []string, err error) error {
	if asJSON {
		if jerr := PrintJSON(ios.Out, res); jerr != nil {
			return jerr
		}
		return err
	}
	for _, l := range lines {
		fmt.Fprintln(ios.Out, l)
	}
	return err
}
