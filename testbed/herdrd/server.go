package herdrd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Limits of one API connection (herdr src/api/server.rs, herdr src/api/server.rs).
const (
	maxRequestLine = 1 << 20         // a request line may be at most 1 MiB
	requestTimeout = 5 * time.Second // and must arrive within 5 s
)

// Releases maps each protocol the stand-in models to the herdr release it answers as, in ping
// and session.snapshot (with a "-standin" suffix): 0.8.0 speaks protocol 19, 0.8.1 and 0.8.2
// speak 20 (herdr's src/protocol/wire.rs PROTOCOL_VERSION), 0.9.0–0.9.3 speak 22 (release
// notes and third-party compatibility reports). The JSON API of the methods the stand-in serves
// did not change between 19 and 20 (the bump was the TUI client protocol); from 22 on the
// stand-in also behaves as the 0.9.x releases are reported to (see Config.Protocol).
var Releases = map[int]string{19: "0.8.0", 20: "0.8.2", 22: "0.9.3"}

// DefaultProtocol is the protocol the stand-in reports unless told otherwise: herdr 0.8.2's,
// whose source (2026-08-22) and JSON schema (../shared/ref/herdr-api.schema.json, protocol 20) it
// follows.
const DefaultProtocol = 20

// VersionFor is the version the stand-in reports for protocol p when Config.Version is empty:
// the modelled release with "-standin" appended, or "0.0.0-standin" for a protocol no release
// is known to speak.
func VersionFor(p int) string {
	if v, ok := Releases[p]; ok {
		return v + "-standin"
	}
	return "0.0.0-standin"
}

// Config configures a stand-in server.
type Config struct {
	// Socket is the API socket path (required). It is made absolute; missing parent dirs are
	// created with mode 0700.
	Socket string
	// Shell is the program every pane runs as a login shell; default /bin/bash when present,
	// else /bin/sh.
	Shell string
	// BinPath is exported to panes as HERDR_BIN_PATH; default os.Executable().
	BinPath string
	// Env is the base environment of panes ("KEY=value"); nil means os.Environ() at spawn
	// time, as herdr's panes inherit the server's whole environment (herdr src/server/headless.rs).
	Env []string
	// DefaultCwd is a new workspace's directory when workspace.create gives none; default $HOME
	// (from Env or the process environment), else "/".
	DefaultCwd string
	// Logger receives the server log; nil means a text handler on os.Stderr.
	Logger *slog.Logger
	// Protocol is the protocol number ping and session.snapshot report; 0 means
	// DefaultProtocol. From 22 on (herdr 0.9.x, from its release notes: herdr issue #4344 and
	// the 0.9.2 notes) an invalid_request error keeps the request's id when it could be read,
	// and panes also get TERM_PROGRAM=herdr. Responses stay valid against the protocol 20
	// schema either way: 0.9.x additions the stand-in does not make (PaneInfo.restore_error,
	// the methods added in 0.9.0) are not in it.
	Protocol int
	// Version is the version ping and session.snapshot report; "" means VersionFor(Protocol).
	Version string
	// EventHistory is how many events the server retains for its subscribers (herdr's ring
	// keeps 512); 0 means DefaultEventHistory. A smaller history makes a subscriber lag
	// sooner, as a busier server would.
	EventHistory int
	// WithoutPush makes the server lack events.subscribe, events.wait, pane.report_metadata
	// and notification.show, answering them as herdr answers any method it does not know
	// (invalid_request, "unknown variant"): a herdr older than these methods. session.snapshot
	// stays (the fleetd stand-in reads it).
	WithoutPush bool
	// LogCalls logs every API call at Info ("api call", method), so a benchmark can count what
	// a client asks; otherwise they are logged at Debug.
	LogCalls bool
	// NotificationLog, when set, receives each notification.show exchange as one JSON line
	// {"request": …, "response": …} (the request and the answer as they went on the socket),
	// so a test in another process can see what was shown and check it against the schema.
	NotificationLog io.Writer
}

// AlreadyRunningError is returned by Listen when another server answers on the socket; herdr
// then prints "already running" and exits 1 (herdr src/server/headless.rs).
type AlreadyRunningError struct {
	// Socket is the live socket's path.
	Socket string
}

// Error implements error.
func (e *AlreadyRunningError) Error() string {
	return "herdr server already running (socket " + e.Socket + ")"
}

// Server is a bound stand-in server. Create it with Listen, run it with Serve.
type Server struct {
	cfg      Config
	log      *slog.Logger
	ln       *net.UnixListener
	stopReq  chan struct{} // closed by server.stop
	stopOnce sync.Once

	conns sync.WaitGroup // accept loop and connection handlers
	bg    sync.WaitGroup // pane readers, waiters and shutdowns

	hub *hub // the event history (events.subscribe, events.wait)
	// waiting counts the events.wait calls that have taken their place in the event history
	// and wait for a live event: a test that must change a pane after that waits on it.
	waiting atomic.Int64
	quit    chan struct{} // closed when shutdown begins: long-lived calls end

	mu          sync.Mutex
	stopping    bool
	notes       []Notification
	workspaces  []*workspace
	focused     *workspace
	paneByID    map[string]*pane
	tabByID     map[string]*tab
	wsCounter   int
	termCounter uint64
}

// Listen prepares the socket path as herdr does (src/ipc.rs prepare_socket_path): it creates
// missing parent dirs, refuses with *AlreadyRunningError when a server answers on the socket,
// removes a stale socket file, binds, and sets mode 0600.
func Listen(cfg Config) (*Server, error) {
	if cfg.Socket == "" {
		return nil, errors.New("herdrd: Config.Socket is required")
	}
	sock, err := filepath.Abs(cfg.Socket)
	if err != nil {
		return nil, fmt.Errorf("herdrd: socket path: %w", err)
	}
	cfg.Socket = sock
	if cfg.Shell == "" {
		cfg.Shell = "/bin/sh"
		if _, err := os.Stat("/bin/bash"); err == nil {
			cfg.Shell = "/bin/bash"
		}
	}
	if cfg.Protocol == 0 {
		cfg.Protocol = DefaultProtocol
	}
	if cfg.Protocol < 0 {
		return nil, fmt.Errorf("herdrd: Config.Protocol %d is not a protocol number", cfg.Protocol)
	}
	if cfg.Version == "" {
		cfg.Version = VersionFor(cfg.Protocol)
	}
	if cfg.EventHistory <= 0 {
		cfg.EventHistory = DefaultEventHistory
	}
	if cfg.BinPath == "" {
		if exe, err := os.Executable(); err == nil {
			cfg.BinPath = exe
		}
	}
	if cfg.DefaultCwd == "" {
		cfg.DefaultCwd = envLookup(cfg.Env, "HOME")
		if cfg.DefaultCwd == "" {
			cfg.DefaultCwd = "/"
		}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}

	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		return nil, fmt.Errorf("herdrd: %w", err)
	}
	if _, err := os.Lstat(sock); err == nil {
		if c, err := net.DialTimeout("unix", sock, time.Second); err == nil {
			_ = c.Close()
			return nil, &AlreadyRunningError{Socket: sock}
		}
		if err := os.Remove(sock); err != nil {
			return nil, fmt.Errorf("herdrd: remove stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("herdrd: %w", err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("herdrd: %w", err)
	}
	return &Server{
		cfg: cfg, log: log, ln: ln, stopReq: make(chan struct{}),
		hub: newHub(cfg.EventHistory), quit: make(chan struct{}),
		paneByID: map[string]*pane{}, tabByID: map[string]*tab{},
	}, nil
}

// Socket returns the absolute path of the API socket.
func (s *Server) Socket() string { return s.cfg.Socket }

// Version and Protocol return what ping reports.
func (s *Server) Version() string { return s.cfg.Version }

// Protocol returns the protocol number ping reports.
func (s *Server) Protocol() int { return s.cfg.Protocol }

// Serve answers API connections until ctx ends or a server.stop request arrives, then shuts
// down: new calls get server_unavailable, every pane's session is signalled HUP/TERM/KILL and
// reaped, and only then is the socket closed and removed, so "socket refuses" implies "pane
// processes gone". Serve returns nil after a clean shutdown; it must be called once.
func (s *Server) Serve(ctx context.Context) error {
	s.log.Info("herdr stand-in serving", "socket", s.cfg.Socket, "pid", os.Getpid(), "version", s.cfg.Version, "protocol", s.cfg.Protocol)
	s.conns.Add(1)
	go s.acceptLoop()
	select {
	case <-ctx.Done():
		s.log.Info("shutdown requested", "cause", context.Cause(ctx))
	case <-s.stopReq:
		s.log.Info("shutdown requested", "cause", "server.stop")
	}

	close(s.quit)
	s.mu.Lock()
	s.stopping = true
	var panes []*pane
	for _, ws := range s.workspaces {
		for _, t := range ws.tabs {
			panes = append(panes, t.panes...)
		}
	}
	for _, p := range panes {
		s.detachPane(p)
	}
	s.mu.Unlock()
	for _, p := range panes {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			p.shutdown()
		}()
	}
	s.bg.Wait()
	err := s.ln.Close() // also unlinks the socket file
	s.conns.Wait()
	s.log.Info("herdr stand-in stopped", "panes_closed", len(panes))
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// requestStop makes Serve begin its shutdown.
func (s *Server) requestStop() { s.stopOnce.Do(func() { close(s.stopReq) }) }

// acceptLoop accepts connections until the listener is closed.
func (s *Server) acceptLoop() {
	defer s.conns.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("accept failed", "err", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		s.conns.Add(1)
		go func() {
			defer s.conns.Done()
			s.handleConn(c)
		}()
	}
}

// handleConn reads one request line, answers one line and closes (herdr src/api/server.rs).
// A long-lived call (events.subscribe, events.wait) keeps the connection: its context ends
// when the server begins to stop or the client goes, and as herdr probes the connection
// (src/ipc.rs probe_stream_closed), any byte the client writes after its request line, or a
// half-close, counts as the client gone.
func (s *Server) handleConn(c *net.UnixConn) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(requestTimeout))
	br := bufio.NewReaderSize(c, 64<<10)
	line, err := readRequestLine(br)
	var resp []byte
	stop := false
	var stream func(context.Context, net.Conn)
	var tooLong lineTooLongError
	switch {
	case errors.As(err, &tooLong):
		resp = invalidRequest("request line exceeds 1 MiB")
	case err != nil:
		if !errors.Is(err, io.EOF) {
			s.log.Debug("connection dropped before a request line", "err", err)
		}
		return
	default:
		ctx, cancel := context.WithCancel(context.WithValue(context.Background(), peerKey{}, peerPID(c)))
		defer cancel()
		_ = c.SetReadDeadline(time.Time{})
		go func() { // the probe: ends when c is closed at the latest
			if br.Buffered() == 0 {
				_, _ = br.ReadByte()
			}
			cancel()
		}()
		go func() {
			select {
			case <-s.quit:
				cancel()
			case <-ctx.Done():
			}
		}()
		resp, stop, stream = s.dispatch(ctx, line)
		if stream != nil {
			_ = c.SetWriteDeadline(time.Now().Add(requestTimeout))
			if _, err := c.Write(append(resp, '\n')); err != nil {
				return
			}
			stream(ctx, c)
			return
		}
	}
	_ = c.SetWriteDeadline(time.Now().Add(requestTimeout))
	if _, err := c.Write(append(resp, '\n')); err != nil {
		s.log.Debug("write response failed", "err", err)
	}
	if stop {
		s.requestStop()
	}
}

// lineTooLongError marks a request line over maxRequestLine.
type lineTooLongError struct{}

func (lineTooLongError) Error() string { return "request line too long" }

// readRequestLine reads up to (not including) the first '\n'. Data ended by EOF counts as a
// line; an empty EOF is io.EOF.
func readRequestLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		buf = append(buf, chunk...)
		if len(buf) > maxRequestLine+1 || (err != nil && len(buf) > maxRequestLine) {
			return nil, lineTooLongError{}
		}
		switch {
		case err == nil:
			return buf[:len(buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF) && len(buf) > 0:
			return buf, nil
		default:
			return nil, err
		}
	}
}

// peerKey is the context key of the calling process's pid (0: unknown).
type peerKey struct{}

// peerPID returns the pid of the process at the other end of c (SO_PEERCRED), 0 when unknown.
func peerPID(c *net.UnixConn) int {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}
