// Command herdr is TEST EQUIPMENT: a stand-in for the herdr CLI (the terminal agent
// multiplexer, public repository ogulcancelik/herdr), serving the herdr socket API through
// package testbed/herdrd. It answers as herdr 0.8.2 (protocol 20) unless told to answer as
// 0.8.0 (protocol 19) or 0.9.x (protocol 22). It implements only what a supervisor uses
// (herdr's cli-reference and src/cli.rs, src/session.rs):
//
//	herdr [--session NAME] server            run a server in the foreground (SIGINT/SIGTERM/SIGHUP stop it)
//	herdr [--session NAME] server stop       stop the active server
//	herdr session list [--json]              list sessions
//	herdr session stop NAME [--json]         stop a named session
//	herdr --version                          print "herdr VERSION", as herdr does (also -V)
//
// Stand-in settings (test equipment only; removed from the arguments before anything else,
// each also read from the environment when the flag is absent):
//
//	--standin-protocol N   (STANDIN_HERDR_PROTOCOL) the protocol ping reports, default 20
//	--standin-version V    (STANDIN_HERDR_VERSION)  the version ping and --version report,
//	                       default herdrd.VersionFor(N), e.g. "0.8.2-standin"
//
// Read from the environment only (server only):
//
//	STANDIN_HERDR_EVENT_HISTORY=N   events retained for subscribers (herdrd Config.EventHistory;
//	                                default 512): smaller makes a subscriber lag sooner
//	STANDIN_HERDR_WITHOUT_PUSH=1    lack events.subscribe, events.wait,
//	                                pane.report_metadata and notification.show
//	                                (herdrd Config.WithoutPush)
//	STANDIN_HERDR_LOG_CALLS=1       log every API call ("api call", method) at Info, for
//	                                benchmarks counting requests (herdrd Config.LogCalls)
//	STANDIN_HERDR_NOTIFICATIONS=F   append each notification.show request and its answer to
//	                                file F as a JSON line (herdrd Config.NotificationLog)
//
// --session NAME (or --session=NAME) may appear anywhere before "--"; it is removed from the
// arguments and exported as HERDR_SESSION into this process's environment, as herdr does.
// Without it the API socket is HERDR_SOCKET_PATH, else the HERDR_SESSION session's, else the
// default session's. Exit status: 0 success, 1 failure, 2 usage error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/testbed/herdrd"
)

// stopTimeout caps how long a stop command waits for the socket to refuse (herdr src/session.rs
// stop_session_with_timeout), polling every stopPoll.
const (
	stopTimeout = 15 * time.Second
	stopPoll    = 25 * time.Millisecond
)

const usage = `usage:
  herdr --version
  herdr [--session NAME] server
  herdr [--session NAME] server stop
  herdr session list [--json]
  herdr session stop NAME [--json]
(stand-in for herdr: test equipment)
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is a command-line mistake; it exits 2.
type usageError string

func (u usageError) Error() string { return string(u) }

// extractSession removes --session NAME / --session=NAME from args before "--" and returns the
// remaining args and the name ("" when absent).
func extractSession(args []string) (rest []string, session string, err error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return append(rest, args[i:]...), session, nil
		case a == "--session":
			if i+1 >= len(args) {
				return nil, "", usageError("--session needs a value")
			}
			session = args[i+1]
			i++
		case strings.HasPrefix(a, "--session="):
			session = strings.TrimPrefix(a, "--session=")
		default:
			rest = append(rest, a)
		}
	}
	return rest, session, nil
}

// Names of the stand-in's settings in the environment.
const (
	envProtocol = "STANDIN_HERDR_PROTOCOL"
	envVersion  = "STANDIN_HERDR_VERSION"
)

// standin is what the stand-in reports as its release.
type standin struct {
	protocol int
	version  string
}

// extractStandin removes --standin-protocol N and --standin-version V (also with "=") before
// "--" from args; absent flags are read from the environment (getenv), and an empty version
// becomes herdrd.VersionFor(protocol).
func extractStandin(args []string, getenv func(string) string) (rest []string, st standin, err error) {
	proto, version := getenv(envProtocol), getenv(envVersion)
	for i := 0; i < len(args); i++ {
		a := args[i]
		var dst *string
		switch {
		case a == "--":
			rest = append(rest, args[i:]...)
			i = len(args)
			continue
		case a == "--standin-protocol" || a == "--standin-version":
			if i+1 >= len(args) {
				return nil, st, usageError(a + " needs a value")
			}
			dst = &version
			if a == "--standin-protocol" {
				dst = &proto
			}
			*dst = args[i+1]
			i++
		case strings.HasPrefix(a, "--standin-protocol="):
			proto = strings.TrimPrefix(a, "--standin-protocol=")
		case strings.HasPrefix(a, "--standin-version="):
			version = strings.TrimPrefix(a, "--standin-version=")
		default:
			rest = append(rest, a)
		}
	}
	st.protocol = herdrd.DefaultProtocol
	if proto != "" {
		if st.protocol, err = strconv.Atoi(proto); err != nil || st.protocol <= 0 {
			return nil, st, usageError(fmt.Sprintf("stand-in protocol %q is not a positive integer", proto))
		}
	}
	st.version = version
	if st.version == "" {
		st.version = herdrd.VersionFor(st.protocol)
	}
	return rest, st, nil
}

// wantsVersion reports whether --version or -V appears before "--" (herdr src/main.rs checks
// every argument).
func wantsVersion(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if a == "--version" || a == "-V" {
			return true
		}
	}
	return false
}

// run executes the CLI and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	args, st, err := extractStandin(args, os.Getenv)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n%s", err, usage)
		return 2
	}
	if wantsVersion(args) {
		fmt.Fprintf(stdout, "herdr %s\n", st.version)
		return 0
	}
	args, session, err := extractSession(args)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n%s", err, usage)
		return 2
	}
	if session != "" {
		if err := herdr.ValidateSessionName(session); err != nil {
			fmt.Fprintf(stderr, "error: %v\n", err)
			return 2
		}
		os.Setenv("HERDR_SESSION", session)
	}
	configDir := herdr.ConfigDir(os.Getenv)
	switch {
	case len(args) == 1 && args[0] == "server":
		return serve(session, configDir, st, stderr)
	case len(args) == 2 && args[0] == "server" && args[1] == "stop":
		return serverStop(activeSocket(session, configDir), stdout, stderr)
	case len(args) >= 2 && args[0] == "session" && args[1] == "list":
		return sessionList(configDir, args[2:], stdout, stderr)
	case len(args) >= 2 && args[0] == "session" && args[1] == "stop":
		return sessionStop(configDir, args[2:], stdout, stderr)
	case len(args) == 1 && (args[0] == "help" || args[0] == "--help" || args[0] == "-h"):
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "error: unsupported arguments %q\n%s", args, usage)
		return 2
	}
}

// activeSocket applies herdr's API socket precedence (herdr src/session.rs): --session, then
// HERDR_SOCKET_PATH, then HERDR_SESSION (valid, not "default"), then the default session.
func activeSocket(flagSession, configDir string) string {
	if flagSession != "" {
		return herdr.SocketPath(configDir, flagSession)
	}
	if p := os.Getenv("HERDR_SOCKET_PATH"); p != "" {
		return p
	}
	if s := os.Getenv("HERDR_SESSION"); s != "" && s != herdr.DefaultSession && herdr.ValidateSessionName(s) == nil {
		return herdr.SocketPath(configDir, s)
	}
	return herdr.SocketPath(configDir, herdr.DefaultSession)
}

// serve runs a stand-in server in the foreground until a signal or server.stop.
func serve(session, configDir string, st standin, stderr io.Writer) int {
	sock := activeSocket(session, configDir)
	name := session
	if name == "" {
		name = os.Getenv("HERDR_SESSION")
	}
	if name == "" {
		name = herdr.DefaultSession
	}
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("session", name)
	cfg := herdrd.Config{Socket: sock, Logger: log, Protocol: st.protocol, Version: st.version,
		WithoutPush: os.Getenv("STANDIN_HERDR_WITHOUT_PUSH") == "1", LogCalls: os.Getenv("STANDIN_HERDR_LOG_CALLS") == "1"}
	if p := os.Getenv("STANDIN_HERDR_NOTIFICATIONS"); p != "" {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintf(stderr, "herdr: STANDIN_HERDR_NOTIFICATIONS: %v\n", err)
			return 1
		}
		defer f.Close()
		cfg.NotificationLog = f
	}
	if v := os.Getenv("STANDIN_HERDR_EVENT_HISTORY"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			fmt.Fprintf(stderr, "herdr: STANDIN_HERDR_EVENT_HISTORY %q is not a positive integer\n", v)
			return 2
		}
		cfg.EventHistory = n
	}
	srv, err := herdrd.Listen(cfg)
	if err != nil {
		var ar *herdrd.AlreadyRunningError
		if errors.As(err, &ar) {
			fmt.Fprintf(stderr, "herdr server already running for session %s (%s)\n", name, ar.Socket)
			return 1
		}
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "herdr server ready (stand-in %s, protocol %d, session %s, pid %d)\n", srv.Version(), srv.Protocol(), name, os.Getpid())
	fmt.Fprintf(stderr, "api socket: %s\n", srv.Socket())
	fmt.Fprintf(stderr, "client socket: %s (not served by the stand-in)\n",
		filepath.Join(filepath.Dir(srv.Socket()), "herdr-client.sock"))
	fmt.Fprintf(stderr, "log: stderr\n")

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	if err := srv.Serve(ctx); err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	return 0
}

// stopAt sends server.stop to sock and waits until the socket refuses connections.
func stopAt(sock string) error {
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if !herdr.SocketReachable(sock) {
		return errors.New("is not running or cannot be reached")
	}
	if err := herdr.New(sock).ServerStop(ctx); err != nil {
		return fmt.Errorf("is not running or cannot be reached: %w", err)
	}
	t := time.NewTicker(stopPoll)
	defer t.Stop()
	for herdr.SocketReachable(sock) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("is still answering after %v", stopTimeout)
		case <-t.C:
		}
	}
	return nil
}

// serverStop implements `herdr server stop`.
func serverStop(sock string, stdout, stderr io.Writer) int {
	if err := stopAt(sock); err != nil {
		fmt.Fprintf(stderr, "error: server at %s %v\n", sock, err)
		return 1
	}
	fmt.Fprintf(stdout, "stopped server at %s\n", sock)
	return 0
}

// flags splits args into positionals and reports --json; any other flag is a usage error.
func flags(args []string) (pos []string, asJSON bool, err error) {
	for _, a := range args {
		switch {
		case a == "--json":
			asJSON = true
		case strings.HasPrefix(a, "-"):
			return nil, false, usageError("unknown flag " + a)
		default:
			pos = append(pos, a)
		}
	}
	return pos, asJSON, nil
}

// sessionList implements `herdr session list [--json]` (herdr src/cli.rs session_list).
func sessionList(configDir string, args []string, stdout, stderr io.Writer) int {
	pos, asJSON, err := flags(args)
	if err == nil && len(pos) > 0 {
		err = usageError("session list takes no arguments")
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n%s", err, usage)
		return 2
	}
	list, err := herdr.ListSessions(configDir)
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n", err)
		return 1
	}
	if asJSON {
		b, _ := json.Marshal(struct {
			Sessions []herdr.SessionInfo `json:"sessions"`
		}{list})
		fmt.Fprintf(stdout, "%s\n", b)
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATUS\tDIRECTORY\tSOCKET")
	for _, s := range list {
		status := "stopped"
		if s.Running {
			status = "running"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", s.Name, status, s.SessionDir, s.SocketPath)
	}
	_ = tw.Flush()
	return 0
}

// sessionStop implements `herdr session stop NAME [--json]` (herdr src/session.rs).
func sessionStop(configDir string, args []string, stdout, stderr io.Writer) int {
	pos, asJSON, err := flags(args)
	if err == nil && len(pos) != 1 {
		err = usageError("session stop takes exactly one NAME")
	}
	if err != nil {
		fmt.Fprintf(stderr, "error: %v\n%s", err, usage)
		return 2
	}
	name := pos[0]
	fail := func(code, msg string) int {
		if asJSON {
			b, _ := json.Marshal(map[string]herdr.Error{"error": {Code: code, Message: msg}})
			fmt.Fprintf(stderr, "%s\n", b)
		} else {
			fmt.Fprintf(stderr, "error: %s\n", msg)
		}
		return 1
	}
	if err := herdr.ValidateSessionName(name); err != nil {
		return fail("invalid_session_name", err.Error())
	}
	if err := stopAt(herdr.SocketPath(configDir, name)); err != nil {
		return fail("session_stop_failed", fmt.Sprintf("session %s %v", name, err))
	}
	if asJSON {
		b, _ := json.Marshal(struct {
			Stopped bool              `json:"stopped"`
			Session herdr.SessionInfo `json:"session"`
		}{true, herdr.SessionInfoFor(configDir, name)})
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		fmt.Fprintf(stdout, "stopped session %s\n", name)
	}
	return 0
}
