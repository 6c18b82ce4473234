package main

import (
	"context"
	"fmt"
	"os/exec"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
)

// checkHerdrVersions reports the version (and protocol) of herdr_bin, from
// `herdr_bin --version`, and of the herdr server of every fleet whose session
// runs, from its ping; a protocol fleetmgr is not tested with
// (herdr.TestedProtocols) is a warning.
func checkHerdrVersions(ctx context.Context, e *checkEnv) []finding {
	var out []finding
	bin := e.cfg.Manager.HerdrBin
	if path, err := exec.LookPath(bin); err == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cmd := exec.CommandContext(cctx, path, "--version")
		cmd.Env = herdr.ScrubEnv(cmd.Environ())
		b, _ := cmd.Output()
		cancel()
		if v := herdr.ParseVersionOutput(b); v == "" {
			out = append(out, finding{Check: "herdr", Severity: sevInfo, Subject: path,
				Message: fmt.Sprintf("`%s --version` did not print herdr's version line (%q)", path, firstLine(b))})
		} else {
			out = append(out, compatFinding(path, "herdr_bin is", herdr.CheckCompat(v, 0)))
		}
	}
	for _, n := range e.cfg.Names() {
		f := e.cfg.Fleets[n]
		sock := e.m.HerdrSocket(f)
		if st, err := e.m.State(n); err == nil && st.HerdrSocket != "" {
			sock = st.HerdrSocket
		}
		if !herdr.SocketReachable(sock) {
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		p, err := herdr.New(sock).Ping(pctx)
		cancel()
		if err != nil {
			out = append(out, finding{Check: "herdr", Severity: sevWarn, Subject: n,
				Message: fmt.Sprintf("herdr session %s accepts connections on %s but does not answer ping: %v", f.HerdrSession, sock, err),
				Fix:     fmt.Sprintf("`fleetmgr stop %s` and start it again", n)})
			continue
		}
		out = append(out, compatFinding(n, fmt.Sprintf("herdr session %s runs", f.HerdrSession), herdr.CheckCompat(p.Version, p.Protocol)))
	}
	return out
}

// compatFinding turns a compatibility verdict into a finding about subject.
func compatFinding(subject, what string, c herdr.Compat) finding {
	v := c.Version
	if v == "" {
		v = "an unknown version"
	}
	fd := finding{Check: "herdr", Severity: sevOK, Subject: subject, Herdr: &c}
	switch {
	case c.Protocol == 0:
		fd.Severity, fd.Message = sevInfo, fmt.Sprintf("%s herdr %s: %s", what, v, c.Note)
	case !c.Tested:
		fd.Severity, fd.Message = sevWarn, fmt.Sprintf("%s herdr %s, protocol %d: %s", what, v, c.Protocol, c.Note)
		fd.Fix = "use a herdr release fleetmgr is tested with, or expect breakage (docs/ARCHITECTURE.md \"herdr versions\")"
	default:
		fd.Message = fmt.Sprintf("%s herdr %s, protocol %d (tested)", what, v, c.Protocol)
		if c.Note != "" {
			fd.Message += ": " + c.Note
		}
	}
	return fd
}
