// Command fleetd is the fleetd STAND-IN: test equipment that imitates the
// real fleetd daemon (which cannot be installed here) for fleetmgr's tests
// and demo. It is not the product. See package
// github.com/fleetmgr/fleetmgr/testbed/fleetd for what it reproduces.
//
// Configuration (environment wins over --config):
//
//	FLEET_NAME           fleet name (required; /healthz reports it)
//	FLEET_PORT           port on 127.0.0.1 (required)
//	FLEET_HERDR_SOCKET   herdr API socket (required)
//	FLEET_HERDR_SESSION  herdr session name (informational)
//	FLEET_WORKTREE_ROOT  member directories go to $FLEET_WORKTREE_ROOT/<id>
//	FLEET_PROJECT_DIR    the auto-launched lead's directory
//	FLEET_LEAD_LAUNCH    "0" disables lead auto-launch; unset or "1" enables
//	FLEET_LEAD_TAB       lead tab label (default "lead")
//	STANDIN_FLEETD_EVENTS file that receives test-visible events
//	                     ("cancelled fleet_slow")
//
// Flags:
//
//	--config PATH        TOML file: name, port, herdr_socket, herdr_session,
//	                     worktree_root, project_dir, lead_tab, lead_launch
//	--exit-after D       exit on its own after duration D (abruptly, like a
//	                     crash), with --exit-code
//	--exit-code N        exit status for --exit-after; without --exit-after a
//	                     non-zero N makes the daemon exit with N at startup,
//	                     before listening (a daemon that fails to start)
//	--ignore-term        ignore SIGTERM (SIGINT still shuts down gracefully)
//	--fork-children N    start N child processes in the daemon's process
//	                     group that ignore SIGTERM and sleep forever
//	--json-response      answer each MCP POST with one application/json
//	                     message instead of an SSE stream (the go-sdk's
//	                     JSONResponse option; progress then goes out on the
//	                     session's GET stream)
//	--any-member-id      fleet_spawn accepts any member id (markup, quotes,
//	                     slashes: 1-128 bytes of UTF-8 without control
//	                     characters), as a fleetd that does not check ids
//	                     would; for tests of how such values are shown
//
// SIGTERM and SIGINT shut the server down gracefully (exit status 0). Exit
// status 2 means bad flags or configuration.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/fleetd"
)

// childFlag is the hidden flag a --fork-children child is started with.
const childFlag = "standin-sleeper-child"

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

// run is the whole program; it returns the exit status.
func run(args []string, getenv func(string) string, stderr io.Writer) int {
	fs := flag.NewFlagSet("fleetd", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "TOML config file (environment variables win)")
	exitAfter := fs.Duration("exit-after", 0, "exit on its own after this duration (test behaviour)")
	exitCode := fs.Int("exit-code", 0, "exit status for --exit-after; alone and non-zero: exit at startup")
	ignoreTerm := fs.Bool("ignore-term", false, "ignore SIGTERM (test behaviour)")
	forkChildren := fs.Int("fork-children", 0, "start N SIGTERM-ignoring children in the same process group (test behaviour)")
	jsonResponse := fs.Bool("json-response", false, "answer MCP POSTs with application/json instead of SSE (go-sdk JSONResponse)")
	anyMemberID := fs.Bool("any-member-id", false, "fleet_spawn accepts any member id without control characters (test behaviour)")
	child := fs.Bool(childFlag, false, "internal: run as a --fork-children child")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: fleetd [flags]   (fleetd STAND-IN, test equipment; configured by FLEET_* env vars)")
		fs.VisitAll(func(f *flag.Flag) {
			if f.Name != childFlag {
				fmt.Fprintf(stderr, "  --%s\t%s\n", f.Name, f.Usage)
			}
		})
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger := log.New(stderr, "fleetd stand-in: ", 0)
	if *child {
		return sleeper(logger)
	}
	if fs.NArg() > 0 {
		logger.Printf("unexpected arguments %q", fs.Args())
		return 2
	}
	cfg, err := fleetd.LoadConfig(*configPath, getenv)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if *exitCode != 0 && *exitAfter == 0 {
		logger.Printf("fleet=%s exiting at startup with status %d (--exit-code)", cfg.Name, *exitCode)
		return *exitCode
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigc := make(chan os.Signal, 1)
	if *ignoreTerm {
		signal.Ignore(syscall.SIGTERM)
		signal.Notify(sigc, syscall.SIGINT)
		logger.Printf("ignoring SIGTERM (--ignore-term)")
	} else {
		signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	}
	defer signal.Stop(sigc)
	go func() {
		select {
		case s := <-sigc:
			logger.Printf("received %v", s)
			cancel()
		case <-ctx.Done():
		}
	}()

	if *forkChildren > 0 {
		if err := forkSleepers(*forkChildren, stderr, logger); err != nil {
			logger.Print(err)
			return 1
		}
	}
	if *exitAfter > 0 {
		code := *exitCode
		t := time.AfterFunc(*exitAfter, func() {
			logger.Printf("exiting on its own after %v with status %d (--exit-after)", *exitAfter, code)
			os.Exit(code)
		})
		defer t.Stop()
	}

	cfg.JSONResponse = *jsonResponse
	cfg.AnyMemberID = *anyMemberID
	d, err := fleetd.New(cfg, stderr)
	if err != nil {
		logger.Print(err)
		return 2
	}
	if err := d.Run(ctx); err != nil {
		logger.Print(err)
		return 1
	}
	return 0
}

// forkSleepers starts n copies of this executable in sleeper mode. They
// stay in this process's process group and are not waited for beyond
// reaping: a supervisor must kill the group.
func forkSleepers(n int, stderr io.Writer, logger *log.Logger) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("fork children: %w", err)
	}
	for i := 0; i < n; i++ {
		cmd := exec.Command(self, "--"+childFlag)
		cmd.Stderr = stderr
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("fork child %d: %w", i+1, err)
		}
		logger.Printf("forked child pid=%d (ignores SIGTERM, same process group)", cmd.Process.Pid)
		go func() { _ = cmd.Wait() }() // reap it if it dies while we live
	}
	return nil
}

// sleeper is the --fork-children child: it ignores SIGTERM and sleeps until
// killed.
func sleeper(logger *log.Logger) int {
	signal.Ignore(syscall.SIGTERM)
	logger.Printf("child pid=%d pgid=%d sleeping, ignoring SIGTERM", os.Getpid(), syscall.Getpgrp())
	for {
		time.Sleep(time.Hour)
	}
}
