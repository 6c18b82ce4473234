package service

import (
	"fmt"
	"strings"
)

// SystemdUnit renders the systemd user unit for s:
//   - Type=exec, so a start fails when the executable cannot be run;
//   - ExecStart runs `fleetmgr serve --config CONFIG` (Spec.Args), each
//     word quoted for systemd;
//   - EnvironmentFile= names the private secrets file (not optional: a
//     missing file fails the start, saying so in the journal);
//     Environment= carries Spec.Env;
//   - Restart=on-failure with RestartSec=2s; WantedBy=default.target, so
//     it starts when the user's service manager does (at login; at boot
//     with `loginctl enable-linger`);
//   - KillMode=process: stop and restart signal serve alone, never the
//     fleets it started (see the package documentation);
//   - TimeoutStopSec=60s: serve finishes a fleet restart in progress
//     (bounded by [manager] start_timeout) before it exits.
func SystemdUnit(s Spec) ([]byte, error) {
	args := s.Args(Systemd)
	words := make([]string, len(args))
	for i, a := range args {
		words[i] = systemdQuote(a, i > 0)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `# %s: fleetmgr serve, supervised by systemd's user manager.
# Written by `+"`fleetmgr service install`"+`; `+"`fleetmgr service uninstall`"+` removes it.
# Secrets (the broker administrator's credentials) go in the EnvironmentFile,
# mode 0600, never here.
[Unit]
Description=fleetmgr: the MCP front door and supervisor of this host's fleets

[Service]
Type=exec
ExecStart=%s
EnvironmentFile=%s
`, UnitName, strings.Join(words, " "), escapeSpecifiers(s.EnvFile))
	if len(s.Env) > 0 {
		env := make([]string, len(s.Env))
		for i, kv := range s.Env {
			env[i] = systemdQuote(kv, false)
		}
		fmt.Fprintf(&b, "Environment=%s\n", strings.Join(env, " "))
	}
	b.WriteString(`Restart=on-failure
RestartSec=2s
# Fleets outlive the manager: stop and restart signal fleetmgr serve only.
# The fleets it started stay in this unit's control group and keep running;
# the next serve adopts them. systemd logs the processes it leaves behind
# ("Found left-over process … in control group while starting unit").
KillMode=process
TimeoutStopSec=60s

[Install]
WantedBy=default.target
`)
	return []byte(b.String()), nil
}

// systemdQuote quotes s as one word of a systemd setting (systemd.syntax(7)):
// in double quotes, with C escapes for '\', '"' and control characters, and
// '%' doubled (specifiers). In an Exec line's arguments (not its
// executable), '$' is doubled too: systemd expands $VAR there.
func systemdQuote(s string, execArg bool) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '\\' || r == '"':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '%':
			b.WriteString("%%")
		case r == '$' && execArg:
			b.WriteString("$$")
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// escapeSpecifiers doubles '%' (a setting whose value is not split into
// words, like EnvironmentFile=).
func escapeSpecifiers(s string) string { return strings.ReplaceAll(s, "%", "%%") }
