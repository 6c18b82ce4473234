package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
)

// checkHerdrVersions reports the version (and protocol) of herdr_bin, from
// `herdr_bin --version`, and of the herdr server of every fleet whose session
// runs, from its ping; a protocol fleetmgr is not tested with
// (herdr.TestedProtocols) is a warning.
func checkHerdrVersions(ctx context.Context, e *checkEnv) []Finding {
	var out []Finding
	bin := e.cfg.Manager.HerdrBin
	if path, err := exec.LookPath(bin); err == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cmd := exec.CommandContext(cctx, path, "--version")
		cmd.Env = herdr.ScrubEnv(cmd.Environ())
		b, _ := cmd.Output()
		cancel()
		if v := herdr.ParseVersionOutput(b); v == "" {
			out = append(out, Finding{Check: "herdr", Severity: SevInfo, Subject: path,
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
			out = append(out, Finding{Check: "herdr", Severity: SevWarn, Subject: n,
				Message: fmt.Sprintf("herdr session %s accepts connections on %s but does not answer ping: %v", f.HerdrSession, sock, err),
				Fix:     fmt.Sprintf("`fleetmgr stop %s` and start it again", n)})
			continue
		}
		c := herdr.CheckCompat(p.Version, p.Protocol)
		fd := compatFinding(n, fmt.Sprintf("herdr session %s runs", f.HerdrSession), c)
		if c.Push {
			fd.Message += "; fleetmgr serve follows it from its events (events.subscribe)"
		} else {
			fd.Message += "; it has no event subscription, so status samples it (ping, pane.list, pane.read)"
		}
		out = append(out, fd)
	}
	return out
}

// compatFinding turns a compatibility verdict into a finding about subject.
func compatFinding(subject, what string, c herdr.Compat) Finding {
	v := c.Version
	if v == "" {
		v = "an unknown version"
	}
	fd := Finding{Check: "herdr", Severity: SevOK, Subject: subject, Herdr: &c}
	switch {
	case c.Protocol == 0:
		fd.Severity, fd.Message = SevInfo, fmt.Sprintf("%s herdr %s: %s", what, v, c.Note)
	case !c.Tested:
		fd.Severity, fd.Message = SevWarn, fmt.Sprintf("%s herdr %s, protocol %d: %s", what, v, c.Protocol, c.Note)
		fd.Fix = "use a herdr release fleetmgr is tested with, or expect breakage (docs/ARCHITECTURE.md \"herdr versions\")"
	default:
		fd.Message = fmt.Sprintf("%s herdr %s, protocol %d (tested)", what, v, c.Protocol)
		if c.Note != "" {
			fd.Message += ": " + c.Note
		}
	}
	return fd
}

// checkHerdr checks that herdr_bin resolves and runs `--help`.
func checkHerdr(ctx context.Context, e *checkEnv) []Finding {
	bin := e.cfg.Manager.HerdrBin
	path, err := exec.LookPath(bin)
	if err != nil {
		return []Finding{{Check: "herdr", Severity: SevError, Subject: bin, Message: err.Error(),
			Fix: "install herdr, or set [manager] herdr_bin to its path"}}
	}
	// `session list --json` only reads: real herdr and the stand-in both
	// answer it with {"sessions":[…]}; anything else is not herdr.
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, path, "session", "list", "--json")
	cmd.Env = herdr.ScrubEnv(os.Environ())
	out, err := cmd.Output()
	var list struct {
		Sessions []herdr.SessionInfo `json:"sessions"`
	}
	if err != nil || json.Unmarshal(out, &list) != nil || list.Sessions == nil {
		why := "its output is not herdr's session list"
		if cctx.Err() != nil {
			why = "it did not answer within 5 s"
		} else if err != nil {
			why = err.Error()
		}
		return []Finding{{Check: "herdr", Severity: SevError, Subject: path,
			Message: fmt.Sprintf("`%s session list --json` failed: %s: %s", path, why, firstLine(out)),
			Fix:     "set [manager] herdr_bin to the herdr executable"}}
	}
	running := 0
	for _, s := range list.Sessions {
		if s.Running {
			running++
		}
	}
	return []Finding{{Check: "herdr", Severity: SevOK, Subject: path,
		Message: fmt.Sprintf("answers like herdr (%d session(s), %d running)", len(list.Sessions), running)}}
}
