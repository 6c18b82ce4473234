package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// Bridge is `fleetmgr mcp`: it copies in → conn (the daemon's unix
// socket) and conn → out until either side ends, for MCP clients that
// mount a command (stdio transport). When the daemon's first line is the
// guard's refusal (RefusalCode) it is passed on to the client and Bridge
// returns a *Refusal carrying the reason. Once in ends, the daemon's last
// replies are awaited for up to 2 s.
func Bridge(ctx context.Context, conn *net.UnixConn, in io.Reader, out io.Writer) error {
	defer conn.Close()
	done := make(chan error, 2)
	refused := make(chan string, 1)
	go func() {
		_, err := io.Copy(conn, in)
		_ = conn.CloseWrite()
		done <- err
	}()
	go func() {
		br := bufio.NewReader(conn)
		first, err := br.ReadBytes('\n')
		if len(first) > 0 {
			var msg struct {
				Error *struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(first, &msg) == nil && msg.Error != nil && msg.Error.Code == serveapi.RefusalCode {
				refused <- msg.Error.Message
			}
			if _, werr := out.Write(first); werr != nil {
				done <- werr
				return
			}
		}
		if err != nil {
			done <- nil
			return
		}
		_, err = io.Copy(out, br)
		done <- err
	}()
	var err error
	select {
	case <-ctx.Done():
		return nil
	case err = <-done:
		// Client closed stdin: wait briefly for the daemon's last replies.
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
	}
	select {
	case reason := <-refused:
		return &serveapi.Refusal{Err: errors.New(reason)}
	default:
	}
	return err
}

// Dial connects to the unix socket of cfg's daemon ([manager]
// mcp_socket). When none answers and start is set it starts one first
// (Detach), telling say what it does (a line for people, e.g. on stderr,
// since stdout is the protocol's); else the error says how to start one.
func Dial(ctx context.Context, cfg *registry.Config, start bool, say func(string)) (*net.UnixConn, error) {
	if _, s := serveapi.Running(cfg); s != "" { // serve.json's socket, whatever the file says now
		if conn, err := net.DialTimeout("unix", s, time.Second); err == nil {
			return conn.(*net.UnixConn), nil
		}
	}
	sock := cfg.Manager.MCPSocket
	conn, err := net.DialTimeout("unix", sock, time.Second)
	if err == nil {
		return conn.(*net.UnixConn), nil
	}
	if !start {
		return nil, fmt.Errorf("no fleetmgr serve answers on %s (start one with: fleetmgr serve --detach)", sock)
	}
	say(fmt.Sprintf("fleetmgr mcp: no daemon on %s; starting fleetmgr serve --detach", sock))
	d, err := Detach(ctx, cfg)
	if err != nil {
		return nil, err
	}
	say(fmt.Sprintf("fleetmgr serve running (pid %d): http://%s/mcp and %s; log: %s", d.PID, d.Info.Listen, d.Socket, d.Log))
	if conn, err = net.DialTimeout("unix", sock, 2*time.Second); err != nil {
		return nil, err
	}
	return conn.(*net.UnixConn), nil
}
