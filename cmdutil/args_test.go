package cmdutil

import (
	"slices"
	"testing"

	"github.com/spf13/cobra"
)

// TestSplitAtDash: what comes after "--" is the command, flags in it
// included; without "--" there is none; "--" last is an empty command.
func TestSplitAtDash(t *testing.T) {
	for _, tc := range []struct {
		argv            []string
		before, command []string
	}{
		{[]string{"kb"}, []string{"kb"}, nil},
		{[]string{"kb", "--", "fleetd", "--port", "9"}, []string{"kb"}, []string{"fleetd", "--port", "9"}},
		{[]string{"--", "fleetd"}, []string{}, []string{"fleetd"}},
		{[]string{"kb", "--"}, []string{"kb"}, []string{}},
	} {
		var before, command []string
		cmd := &cobra.Command{Use: "add", RunE: func(c *cobra.Command, args []string) error {
			before, command = SplitAtDash(c, args)
			return nil
		}}
		cmd.Flags().Int("port", 0, "")
		cmd.SetArgs(tc.argv)
		if err := cmd.Execute(); err != nil {
			t.Fatalf("%q: %v", tc.argv, err)
		}
		if !slices.Equal(before, tc.before) || !slices.Equal(command, tc.command) || (command == nil) != (tc.command == nil) {
			t.Errorf("%q: %q and %q, want %q and %q", tc.argv, before, command, tc.before, tc.command)
		}
	}
}
