package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/fleetmgr/fleetmgr/envfile"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// MainOptions are `fleetmgr serve`'s flags and what it needs from the CLI.
type MainOptions struct {
	// Detach runs serve as a daemon (Detach) and returns once it serves.
	Detach bool
	// Stage (1 or 2) and ReadyFD are the hidden flags Detach gives its
	// stages (--daemon-stage, --daemon-ready-fd); 0 for a serve started
	// by a person or a service manager.
	Stage, ReadyFD int
	// EnvFile, when set, is a private file of NAME=value lines set in the
	// environment before anything reads it (package envfile): the broker
	// administrator's variables, for a service manager that cannot read
	// such a file itself (the launchd agent of package service).
	EnvFile string
	// Exposure is --allow-remote and --token-file.
	Exposure Exposure
	// TakeOverHost is --take-over-host (Options.TakeOverHost).
	TakeOverHost bool
	// Config loads fleets.toml (after EnvFile was applied).
	Config func() (*registry.Config, error)
	// Log is the daemon's log; Version fleetmgr's version.
	Log     *slog.Logger
	Version string
}

// Main is `fleetmgr serve`: from its first instruction a SIGHUP is a
// reload request, never the end of the process (CatchHangup); then
// EnvFile is applied, the config loaded and Exposure checked (a *UsageError
// when either is refused); then, by Detach and Stage, it detaches (stage
// 0: returns the daemon it started), starts the daemon (stage 1), or
// serves until ctx ends (Serve). A daemon that fails to start says why on
// its readiness pipe, so `serve --detach` reports its error.
func Main(ctx context.Context, o MainOptions) (*Detached, error) {
	hup, stopHup := CatchHangup()
	defer stopHup()
	ready := OpenReadiness(o.Stage, o.ReadyFD)
	d, err := func() (*Detached, error) {
		args := o.Exposure.Args() // what the detach stages are given too
		if o.TakeOverHost {
			args = append(args, "--take-over-host")
		}
		if o.EnvFile != "" {
			if _, err := envfile.Load(o.EnvFile); err != nil {
				return nil, &serveapi.UsageError{Err: fmt.Errorf("--env-file: %w", err)}
			}
			args = append(args, "--env-file", o.EnvFile)
		}
		cfg, err := o.Config()
		if err != nil {
			return nil, err
		}
		pol, err := o.Exposure.Policy(cfg)
		if err != nil {
			return nil, &serveapi.UsageError{Err: err}
		}
		switch {
		case o.Detach && o.Stage == 0:
			return Detach(ctx, cfg, args...)
		case o.Stage == 1:
			return nil, DetachStage1(cfg, ready, args...)
		}
		return nil, Serve(ctx, Options{Config: cfg, Log: o.Log, Version: o.Version, Policy: pol, Hangup: hup, Ready: ready, TakeOverHost: o.TakeOverHost})
	}()
	if err != nil {
		ready.Fail(err) // a detached daemon's caller hears why it did not come up
	}
	return d, err
}
