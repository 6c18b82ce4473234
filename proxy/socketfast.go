package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/mcpwire"
)

// ConnectSocket serves one connection c of the unix socket mount
// (newline-delimited JSON-RPC, `fleetmgr mcp`) as a session of p.Server()
// over the go-sdk's IOTransport, with the same fast path as HTTPHandler,
// and returns that session (connected with ctx, as Server.Connect). Once
// the SDK session took the client's initialize (the gate the SDK itself
// applies to calls, sessionReady), each line that is a tools/call of a
// fleet tool is answered by fleetmgr itself (raw arguments up, raw result
// back, progress lines before the response) and a notifications/cancelled
// for such a call cancels it; every other line goes to the SDK session in
// order. Responses are written whole under one lock, so fleetmgr's lines
// and the SDK's never interleave. The demultiplexing goroutine ends when c
// can no longer be read (the SDK closes c when the session ends); calls
// still running are then cancelled.
func (p *Proxy) ConnectSocket(ctx context.Context, c io.ReadWriteCloser) (*mcp.ServerSession, error) {
	pr, pw := io.Pipe()
	lw := &lineWriter{w: c}
	var sess atomic.Pointer[mcp.ServerSession] // set once Connect returns; lines before that are the SDK's
	go p.demuxSocket(c, pw, lw, func() bool {
		ss := sess.Load()
		return ss != nil && sessionReady(ss)
	})
	ss, err := p.server.Connect(ctx, &mcp.IOTransport{Reader: readCloser{pr, c}, Writer: lw}, nil)
	if err != nil {
		pr.Close()
		return nil, err
	}
	sess.Store(ss)
	return ss, nil
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

// demuxSocket reads c's lines, answering those the fast path takes once
// ready reports the SDK session ready, and passes the rest to pw.
func (p *Proxy) demuxSocket(c io.Reader, pw *io.PipeWriter, lw *lineWriter, ready func() bool) {
	ctx, cancel := context.WithCancel(context.Background())
	var calls fastCalls
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	br := bufio.NewReaderSize(c, 64<<10)
	for {
		line, err := readLine(br)
		if len(bytes.TrimSpace(line)) > 0 && !p.fastLine(ctx, line, ready, &calls, &wg, lw) {
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
func (p *Proxy) fastLine(ctx context.Context, line []byte, ready func() bool, calls *fastCalls, wg *sync.WaitGroup, lw *lineWriter) bool {
	if line[0] != '{' || !ready() { // a batch, junk, or a session the SDK does not yet take calls on: the SDK's answer
		return false
	}
	var msg fastMessage
	if decodeMessage(line, &msg) != nil || msg.JSONRPC != "2.0" {
		return false
	}
	switch msg.Method {
	case "tools/call":
		params := msg.Params
		if !validID(msg.ID) || p.cat.current().Tools[params.Name] == nil || !socketMetaOK(params.Meta, p.versions) {
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
