package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/mcpwire"
)

// SocketTransport is the MCP transport for one connection c of the unix
// socket mount (newline-delimited JSON-RPC, `fleetmgr mcp`): the go-sdk's
// IOTransport, with the same fast path as HTTPHandler. Once the client set
// the session up (notifications/initialized or server/discover), each line that is a tools/call of a fleet
// tool is answered by fleetmgr itself (raw arguments up, raw result back,
// progress lines before the response) and a notifications/cancelled for
// such a call cancels it; every other line goes to the SDK session in
// order. Responses are written whole under one lock, so fleetmgr's lines
// and the SDK's never interleave. The demultiplexing goroutine ends when c
// can no longer be read (the SDK closes c when the session ends); calls
// still running are then cancelled.
func (p *Proxy) SocketTransport(c io.ReadWriteCloser) mcp.Transport {
	pr, pw := io.Pipe()
	lw := &lineWriter{w: c}
	go p.demuxSocket(c, pw, lw)
	return &mcp.IOTransport{Reader: readCloser{pr, c}, Writer: lw}
}

// readCloser reads from the pipe the demultiplexer feeds; closing it
// closes the connection too, which ends the demultiplexer.
type readCloser struct {
	*io.PipeReader
	c io.Closer
}

// Close closes the pipe and the connection.
func (r readCloser) Close() error { return errors.Join(r.PipeReader.Close(), r.c.Close()) }

// lineWriter writes whole messages (one Write each) under a lock.
type lineWriter struct {
	mu sync.Mutex
	w  io.WriteCloser // written under mu, one whole message at a time
}

// Write writes b (one whole message) under the lock.
func (l *lineWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// Close closes the connection.
func (l *lineWriter) Close() error { return l.w.Close() }

// writeFrame writes f as one line under the lock.
func (l *lineWriter) writeFrame(f *mcpwire.Frame) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_ = mcpwire.WriteLine(l.w, f)
}

// sendProgress writes a progress notification as one line.
func (l *lineWriter) sendProgress(np *mcp.ProgressNotificationParams) {
	if b, err := progressMessage(np); err == nil {
		_, _ = l.Write(append(b, '\n'))
	}
}

// maxSocketLine bounds one inbound line the fast path buffers (the SDK's
// own default is 4 MiB too).
const maxSocketLine = 4 << 20

func (p *Proxy) demuxSocket(c io.Reader, pw *io.PipeWriter, lw *lineWriter) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls fastCalls
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	br := bufio.NewReaderSize(c, 64<<10)
	initialized := false
	for {
		line, err := readLine(br)
		if len(bytes.TrimSpace(line)) > 0 && !p.fastLine(ctx, line, &initialized, &calls, &wg, lw) {
			if _, werr := pw.Write(append(line, '\n')); werr != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = nil
			}
			pw.CloseWithError(err)
			return
		}
	}
}

// fastLine handles one inbound line if the fast path takes it and reports
// whether it did.
func (p *Proxy) fastLine(ctx context.Context, line []byte, initialized *bool, calls *fastCalls, wg *sync.WaitGroup, lw *lineWriter) bool {
	if !*initialized {
		// The session is set up by initialize + notifications/initialized
		// (protocol ≤ 2025-11-25) or by server/discover (2026-07-28,
		// which the go-sdk client tries first); calls before that are the
		// SDK's to refuse.
		if bytes.Contains(line, []byte(`"notifications/initialized"`)) || bytes.Contains(line, []byte(`"server/discover"`)) {
			var msg struct {
				Method string `json:"method"`
			}
			if decodeMessage(line, &msg) == nil && (msg.Method == "notifications/initialized" || msg.Method == "server/discover") {
				*initialized = true
			}
		}
		return false
	}
	if line[0] != '{' { // a batch, or junk: the SDK's answer
		return false
	}
	var msg fastMessage
	if decodeMessage(line, &msg) != nil || msg.JSONRPC != "2.0" {
		return false
	}
	switch msg.Method {
	case "tools/call":
		params := msg.Params
		if !validID(msg.ID) || p.cat.current().Tools[params.Name] == nil {
			return false
		}
		cctx, cancel := context.WithCancel(ctx)
		key := compactID(msg.ID)
		entry := calls.add(key, cancel)
		wg.Go(func() {
			defer cancel()
			defer calls.remove(key, entry)
			var after []func()
			if resp, ok := p.answerCall(cctx, msg.ID, &params, lw.sendProgress, func(f func()) { after = append(after, f) }); ok {
				lw.writeFrame(&resp)
			}
			for _, f := range after { // once the caller has the answer
				f()
			}
		})
		return true
	case "notifications/cancelled":
		return calls.cancel(compactID(msg.Params.RequestID))
	}
	return false
}

// readLine reads one '\n'-terminated line (without it), however long, up
// to maxSocketLine; a longer line is returned cut (the SDK then refuses it).
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		buf := append([]byte{}, line...)
		for err == bufio.ErrBufferFull && len(buf) < maxSocketLine {
			line, err = br.ReadSlice('\n')
			buf = append(buf, line...)
		}
		line = buf
	} else {
		line = append([]byte{}, line...)
	}
	return bytes.TrimRight(line, "\r\n"), err
}
