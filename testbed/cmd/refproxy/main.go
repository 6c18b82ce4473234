// Command refproxy is a reference for BenchmarkOverhead, not part of
// fleetmgr: the least a Go front door built on net/http can do for a
// streamable-HTTP MCP call. It forwards each request on
// 127.0.0.1:LISTEN-PORT to an upstream as it is (method, path, headers,
// body) over kept-alive connections of its own, and copies the answer
// back, flushing as it arrives. No guard, no JSON, no metrics. What it adds
// over a call straight to fleetd is the floor under fleetmgr's HTTP mount
// on the same machine.
//
// Usage: refproxy LISTEN-ADDR UPSTREAM-ADDR (both host:port).
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
)

type conn struct {
	c  net.Conn
	br *bufio.Reader
}

type proxy struct {
	upstream string
	mu       sync.Mutex
	idle     []*conn
}

func (p *proxy) get() (*conn, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return nil, err
	}
	return &conn{c: c, br: bufio.NewReader(c)}, nil
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	c, err := p.get()
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", r.Method, r.URL.RequestURI(), p.upstream)
	for k, vs := range r.Header {
		for _, v := range vs {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	if r.Method != http.MethodGet {
		b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	b.WriteString("\r\n")
	b.Write(body)
	if _, err := c.c.Write(b.Bytes()); err != nil {
		c.c.Close()
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	resp, err := http.ReadResponse(c.br, r)
	if err != nil {
		c.c.Close()
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	buf := make([]byte, 32<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				break
			}
			_ = http.NewResponseController(w).Flush()
		}
		if rerr != nil {
			break
		}
	}
	resp.Body.Close()
	if r.Method == http.MethodGet || resp.Close {
		c.c.Close() // a GET stream ends when either side closes it
		return
	}
	p.mu.Lock()
	p.idle = append(p.idle, c)
	p.mu.Unlock()
}

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: refproxy LISTEN-ADDR UPSTREAM-ADDR")
		os.Exit(2)
	}
	if err := http.ListenAndServe(os.Args[1], &proxy{upstream: os.Args[2]}); err != nil {
		fmt.Fprintln(os.Stderr, "refproxy:", err)
		os.Exit(1)
	}
}
