package herdrd

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/creack/pty"

	"github.com/fleetmgr/fleetmgr/herdr"
)

// ringSize bounds the raw output kept per pane for pane.read (256 KiB).
const ringSize = 256 << 10

// statusHook is the OSC payload prefix of the stand-in's agent-status test hook.
const statusHook = "777;herdr-status;"

// pane is one PTY running a shell. Structural fields (tab) are guarded by Server.mu; output and
// agent state by pane.mu.
type pane struct {
	id         string
	terminalID string
	launchCwd  string
	tab        *tab // nil once detached from the layout

	cmd  *exec.Cmd
	pid  int
	ptmx *os.File

	writeMu sync.Mutex // serialises writes to ptmx

	mu        sync.Mutex
	ring      []byte // raw output; the last ringSize bytes are kept
	dropped   bool   // output older than the ring was discarded
	parser    vtParser
	status    string
	agent     string
	title     string
	revision  uint64
	bracketed bool                 // the application enabled bracketed paste (CSI ?2004h)
	meta      map[string]*paneMeta // pane.report_metadata, per source
	changes   []statusChange       // status changes seen by the current consume, not yet published

	// onStatus publishes the pane's status changes; called by readLoop's goroutine in order,
	// without pane.mu held. Nil: none.
	onStatus func(p *pane, changes []statusChange)

	shutdownOnce sync.Once
	exited       chan struct{} // closed when the shell has been reaped
}

// spawnPane starts shell on a new 120x40 PTY in its own session with env and cwd.
func spawnPane(id, terminalID, shell, cwd string, env []string) (*pane, error) {
	cmd := exec.Command(shell)
	cmd.Args = []string{"-" + filepath.Base(shell)} // a login shell, as portable-pty starts it
	cmd.Dir = cwd
	cmd.Env = env
	ptmx, err := pty.StartWithAttrs(cmd, &pty.Winsize{Rows: renderRows, Cols: renderWidth},
		&syscall.SysProcAttr{Setsid: true, Setctty: true})
	if err != nil {
		return nil, err
	}
	return &pane{
		id: id, terminalID: terminalID, launchCwd: cwd,
		cmd: cmd, pid: cmd.Process.Pid, ptmx: ptmx,
		status: herdr.StatusUnknown, exited: make(chan struct{}),
	}, nil
}

// readLoop copies PTY output into the ring until the PTY is closed or hangs up.
func (p *pane) readLoop() {
	buf := make([]byte, 32<<10)
	for {
		n, err := p.ptmx.Read(buf)
		if n > 0 {
			p.consume(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// statusChange is one agent-status change seen in a pane's output.
type statusChange struct {
	status, agent string
	detected      bool // the agent was first detected by this change
}

// consume appends output to the ring and tracks hook, title and bracketed-paste sequences; the
// status changes it saw are then handed to onStatus.
func (p *pane) consume(b []byte) {
	p.mu.Lock()
	p.ring = append(p.ring, b...)
	if len(p.ring) > 2*ringSize {
		n := copy(p.ring, p.ring[len(p.ring)-ringSize:])
		p.ring = p.ring[:n]
		p.dropped = true
	}
	p.parser.feed(b, paneSink{p})
	changes := p.changes
	p.changes = nil
	cb := p.onStatus
	p.mu.Unlock()
	if len(changes) > 0 && cb != nil {
		cb(p, changes)
	}
}

// paneSink watches the output stream on behalf of a pane (pane.mu held).
type paneSink struct{ p *pane }

func (paneSink) print(byte)   {}
func (paneSink) control(byte) {}

func (s paneSink) csi(params []byte, final byte) {
	if string(params) == "?2004" {
		switch final {
		case 'h':
			s.p.bracketed = true
		case 'l':
			s.p.bracketed = false
		}
	}
}

func (s paneSink) osc(data []byte) {
	d := string(data)
	switch {
	case strings.HasPrefix(d, statusHook):
		st := d[len(statusHook):]
		switch st {
		case herdr.StatusIdle, herdr.StatusWorking, herdr.StatusBlocked, herdr.StatusDone, herdr.StatusUnknown:
			if st != s.p.status || s.p.agent == "" {
				detected := s.p.agent == ""
				s.p.status, s.p.agent = st, "standin"
				s.p.revision++
				s.p.changes = append(s.p.changes, statusChange{status: st, agent: "standin", detected: detected})
			}
		}
	case strings.HasPrefix(d, "0;") || strings.HasPrefix(d, "2;"):
		if t := d[2:]; t != s.p.title {
			s.p.title = t
			s.p.revision++
		}
	}
}

// output returns a copy of the ring's content and whether older output was dropped.
func (p *pane) output() ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.ring
	dropped := p.dropped
	if len(r) > ringSize {
		r, dropped = r[len(r)-ringSize:], true
	}
	return bytes.Clone(r), dropped
}

// agentState returns status, agent, title and revision under the pane lock.
func (p *pane) agentState() (status, agent, title string, rev uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status, p.agent, p.title, p.revision
}

// write sends b to the PTY in full.
func (p *pane) write(b []byte) error {
	p.writeMu.Lock()
	defer p.writeMu.Unlock()
	for len(b) > 0 {
		n, err := p.ptmx.Write(b)
		if err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// pasteBytes encodes text as herdr's paste encoder does: wrapped in bracketed-paste markers when
// the application has enabled bracketed paste, raw otherwise.
func (p *pane) pasteBytes(text string) []byte {
	p.mu.Lock()
	br := p.bracketed
	p.mu.Unlock()
	if !br || text == "" {
		return []byte(text)
	}
	return []byte("\x1b[200~" + text + "\x1b[201~")
}

// encodeKey maps a key name to the bytes a terminal sends for it. Names are case-insensitive:
// Enter, Tab, Escape/Esc, Backspace, Space, Up, Down, Right, Left, Home, End, Delete, and
// C-<letter> (also Ctrl-<letter>, Ctrl+<letter>). ok is false for an unknown name.
func encodeKey(name string) (b []byte, ok bool) {
	switch strings.ToLower(name) {
	case "enter", "return", "cr":
		return []byte("\r"), true
	case "tab":
		return []byte("\t"), true
	case "escape", "esc":
		return []byte("\x1b"), true
	case "backspace", "bspace":
		return []byte("\x7f"), true
	case "space":
		return []byte(" "), true
	case "up":
		return []byte("\x1b[A"), true
	case "down":
		return []byte("\x1b[B"), true
	case "right":
		return []byte("\x1b[C"), true
	case "left":
		return []byte("\x1b[D"), true
	case "home":
		return []byte("\x1b[H"), true
	case "end":
		return []byte("\x1b[F"), true
	case "delete", "del":
		return []byte("\x1b[3~"), true
	}
	l := strings.ToLower(name)
	for _, pre := range []string{"c-", "ctrl-", "ctrl+"} {
		if rest, ok := strings.CutPrefix(l, pre); ok && len(rest) == 1 && rest[0] >= 'a' && rest[0] <= 'z' {
			return []byte{rest[0] - 'a' + 1}, true
		}
	}
	return nil, false
}

// shutdown signals the pane's session HUP, TERM, KILL (see killSession) and then closes the
// PTY, which ends readLoop. It runs once; later calls return at once.
func (p *pane) shutdown() {
	p.shutdownOnce.Do(func() {
		killSession(p.pid)
		_ = p.ptmx.Close()
	})
}
