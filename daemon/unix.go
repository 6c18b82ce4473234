package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/guard"
	"github.com/fleetmgr/fleetmgr/proxy"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// listenUnix listens on path (mode 0600), replacing a stale socket file but
// never one a live daemon still answers on.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("another fleetmgr serve already answers on %s", path)
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen on unix socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// serveUnix serves one MCP session (newline-delimited JSON-RPC) per unix
// connection, after the guard has admitted its peer (SO_PEERCRED); a
// refused peer is answered by Refuse. It stops accepting when ctx ends,
// closes the sessions it started when sessions ends (serve lets the
// lifecycle calls they carry be answered in between), and returns once
// every one has ended.
func serveUnix(ctx, sessions context.Context, l net.Listener, g *guard.Guard, p *proxy.Proxy, fast bool, log *slog.Logger) {
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				log.Error("unix accept", "err", err)
			}
			return
		}
		wg.Go(func() {
			d := g.CheckConn(ctx, c)
			if !d.Allowed {
				Refuse(c, d)
				return
			}
			var ss *mcp.ServerSession
			var err error
			sctx := withCaller(sessions, decisionOrigin("unix", d))
			if fast { // [manager] fast_path: forwarded tools/call answered by the proxy itself
				ss, err = p.ConnectSocket(sctx, c)
			} else {
				ss, err = p.Server().Connect(sctx, &mcp.IOTransport{Reader: c, Writer: c}, nil)
			}
			if err != nil {
				log.Warn("unix session", "err", err)
				c.Close()
				return
			}
			done := make(chan struct{})
			go func() {
				select {
				case <-sessions.Done():
					ss.Close()
				case <-done:
				}
			}()
			_ = ss.Wait()
			close(done)
		})
	}
}

// Refuse answers a unix-socket peer the guard refused (d) and closes the
// connection. Each request the peer sends within a second (at most
// refusalAnswers of them) is answered with a JSON-RPC error (RefusalCode,
// the guard's reason), so an MCP client reports "calling initialize:
// <reason>" instead of a bare EOF, also one that first tries
// server/discover and falls back to initialize; a peer that sends no
// request gets one error with a null id.
func Refuse(c net.Conn, d guard.Decision) {
	defer c.Close()
	answer := func(id json.RawMessage) bool {
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
			"error": map[string]any{"code": serveapi.RefusalCode, "message": d.Error()}})
		_ = c.SetWriteDeadline(time.Now().Add(time.Second))
		_, err := c.Write(append(b, '\n'))
		return err == nil
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	// A line is read whole up to the bound (an initialize with a large
	// clientInfo or _meta is still answered with its id).
	br := bufio.NewReaderSize(io.LimitReader(c, refusalReadMax), refusalReadMax)
	answered := 0
	for answered < refusalAnswers {
		line, err := br.ReadSlice('\n')
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		if json.Unmarshal(line, &req) == nil && len(req.ID) > 0 && string(req.ID) != "null" {
			if !answer(req.ID) {
				return
			}
			answered++
		}
		if err != nil {
			break
		}
	}
	if answered == 0 {
		answer(json.RawMessage("null"))
	}
}

// refusalAnswers bounds the requests Refuse answers, and refusalReadMax
// the bytes it reads from a refused peer.
const (
	refusalAnswers = 4
	refusalReadMax = 64 << 10
)
