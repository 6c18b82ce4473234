package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/lifecycle"
)

// logpipeCmd is the internal `fleetmgr logpipe`: with a command after --,
// it starts a copier and execs the command with its stdout/stderr going
// through the copier (lifecycle.ExecLogged); without one it is the copier,
// writing stdin to --file with size rotation (lifecycle.RunLogPipe).
func (a *app) logpipeCmd() *cobra.Command {
	var file string
	var maxMB, backups, readyFD int
	cmd := &cobra.Command{
		Use:    "logpipe --file PATH [--max-mb N] [--backups N] [-- COMMAND ARGS…]",
		Short:  "internal: run COMMAND with its output written to PATH, rotated by size",
		Hidden: true,
		Args:   cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return &exitError{code: 2, err: fmt.Errorf("logpipe: --file is required")}
			}
			if len(args) > 0 {
				self, err := os.Executable()
				if err != nil {
					return err
				}
				return &exitError{code: 127, err: lifecycle.ExecLogged(self, file, maxMB, backups, args)}
			}
			// The copier outlives signals to its process group: it ends when
			// the last writer closes the pipe, after writing everything.
			signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
			if readyFD > 0 { // tell the wrapper it may exec the child now
				if f := os.NewFile(uintptr(readyFD), "ready"); f != nil {
					_, _ = f.Write([]byte{1})
					f.Close()
				}
			}
			return lifecycle.RunLogPipe(os.Stdin, file, maxMB, backups)
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "log file")
	cmd.Flags().IntVar(&maxMB, "max-mb", 10, "rotate at this size in megabytes")
	cmd.Flags().IntVar(&backups, "backups", 5, "rotated files to keep (0: all)")
	cmd.Flags().IntVar(&readyFD, "ready-fd", 0, "internal: write a byte to this fd once signals are ignored")
	return cmd
}
