package service

import (
	"bytes"
	"strings"

	"howett.net/plist"
)

// agent is the launchd job definition (launchd.plist(5)); field order is
// the order the keys are written in.
type agent struct {
	Label             string            `plist:"Label"`
	ProgramArguments  []string          `plist:"ProgramArguments"`
	RunAtLoad         bool              `plist:"RunAtLoad"`
	KeepAlive         keepAlive         `plist:"KeepAlive"`
	AbandonProcessGrp bool              `plist:"AbandonProcessGroup"`
	ExitTimeOut       int               `plist:"ExitTimeOut"`
	EnvVars           map[string]string `plist:"EnvironmentVariables,omitempty"`
	StandardOutPath   string            `plist:"StandardOutPath,omitempty"`
	StandardErrorPath string            `plist:"StandardErrorPath,omitempty"`
}

// keepAlive restarts the job when it exits unsuccessfully (a non-zero
// status or a signal), like systemd's Restart=on-failure.
type keepAlive struct {
	SuccessfulExit bool `plist:"SuccessfulExit"`
}

// LaunchdPlist renders the launchd agent for s, as an XML property list:
//   - ProgramArguments runs `fleetmgr serve --config CONFIG --env-file
//     ENVFILE` (launchd has no EnvironmentFile, so serve reads the private
//     file itself; EnvironmentVariables holds only Spec.Env, no secret);
//   - RunAtLoad starts it when the agent is loaded, i.e. at login;
//   - KeepAlive {SuccessfulExit: false} restarts it after a failure;
//   - AbandonProcessGroup: when serve exits, launchd leaves the rest of
//     its process group alone (fleets lead sessions of their own anyway);
//   - ExitTimeOut 60: seconds between SIGTERM and SIGKILL on stop, as
//     TimeoutStopSec in the systemd unit;
//   - StandardOutPath/StandardErrorPath: Spec.Log.
func LaunchdPlist(s Spec) ([]byte, error) {
	a := agent{
		Label:             Label,
		ProgramArguments:  s.Args(Launchd),
		RunAtLoad:         true,
		KeepAlive:         keepAlive{SuccessfulExit: false},
		AbandonProcessGrp: true,
		ExitTimeOut:       60,
		StandardOutPath:   s.Log,
		StandardErrorPath: s.Log,
	}
	if len(s.Env) > 0 {
		a.EnvVars = map[string]string{}
		for _, kv := range s.Env {
			k, v, _ := strings.Cut(kv, "=")
			a.EnvVars[k] = v
		}
	}
	var b bytes.Buffer
	enc := plist.NewEncoderForFormat(&b, plist.XMLFormat)
	enc.Indent("\t")
	if err := enc.Encode(a); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}
