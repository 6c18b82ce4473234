package herdr

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// lineServer is a real Unix-socket server answering each connection's first line with reply(line).
type lineServer struct {
	path string
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	got  []string
}

func startLineServer(t *testing.T, reply func(req string) string) *lineServer {
	t.Helper()
	dir, err := os.MkdirTemp("", "fm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := &lineServer{path: filepath.Join(dir, "h.sock")}
	s.ln, err = net.Listen("unix", s.path)
	if err != nil {
		t.Fatal(err)
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				line, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					return
				}
				s.mu.Lock()
				s.got = append(s.got, line)
				s.mu.Unlock()
				if r := reply(line); r != "" {
					_, _ = c.Write([]byte(r))
				} else {
					// Say nothing until the client gives up.
					_, _ = c.Read(make([]byte, 1))
				}
			}()
		}
	}()
	t.Cleanup(func() { s.ln.Close(); s.wg.Wait() })
	return s
}

func (s *lineServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func TestCallWireFormat(t *testing.T) {
	s := startLineServer(t, func(req string) string {
		var r struct{ ID string }
		_ = json.Unmarshal([]byte(req), &r)
		return `{"id":"` + r.ID + `","result":{"type":"pong","version":"0.8.0","protocol":20,"capabilities":{"live_handoff":true,"detached_server_daemon":true}}}` + "\n"
	})
	c := New(s.path)
	p, err := c.Ping(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if p.Version != "0.8.0" || p.Protocol != 20 || p.Capabilities == nil || !p.Capabilities.LiveHandoff || !p.Capabilities.DetachedServerDaemon {
		t.Fatalf("pong = %+v", p)
	}
	if err := c.Call(context.Background(), "x.y", struct {
		A int `json:"a"`
	}{7}, nil); err != nil {
		t.Fatal(err)
	}
	got := s.requests()
	if len(got) != 2 {
		t.Fatalf("requests = %q", got)
	}
	idRE := regexp.MustCompile(`^\{"id":"([0-9a-z]+)",`)
	m0, m1 := idRE.FindStringSubmatch(got[0]), idRE.FindStringSubmatch(got[1])
	if m0 == nil || m1 == nil || m0[1] == m1[1] {
		t.Fatalf("ids not distinct strings: %q", got)
	}
	if got[0] != `{"id":"`+m0[1]+`","method":"ping","params":{}}`+"\n" {
		t.Errorf("ping line = %q", got[0])
	}
	if got[1] != `{"id":"`+m1[1]+`","method":"x.y","params":{"a":7}}`+"\n" {
		t.Errorf("call line = %q", got[1])
	}
}

func TestCallErrorAndTypeMismatch(t *testing.T) {
	s := startLineServer(t, func(req string) string {
		if strings.Contains(req, "pane.get") {
			return `{"id":"1","error":{"code":"pane_not_found","message":"pane w9:p9 not found"}}` + "\n"
		}
		return `{"id":"2","result":{"type":"ok"}}` // no newline: accepted at EOF
	})
	c := New(s.path)
	_, err := c.PaneGet(context.Background(), "w9:p9")
	var he *Error
	if !errors.As(err, &he) || he.Code != "pane_not_found" || he.Message != "pane w9:p9 not found" {
		t.Fatalf("err = %v", err)
	}
	if !IsCode(err, "pane_not_found") || IsCode(err, "tab_not_found") {
		t.Fatal("IsCode wrong")
	}
	if err := c.PaneClose(context.Background(), "w1:p1"); err != nil {
		t.Fatalf("ok without newline: %v", err)
	}
	if _, err := c.Ping(context.Background()); err == nil || !strings.Contains(err.Error(), `result type "ok"`) {
		t.Fatalf("type mismatch not reported: %v", err)
	}
}

func TestCallTimeoutAndCancel(t *testing.T) {
	s := startLineServer(t, func(string) string { return "" })
	c := &Client{Socket: s.path, Timeout: 200 * time.Millisecond}
	start := time.Now()
	err := c.Call(context.Background(), "ping", nil, nil)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("timeout took %v", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.Timeout = time.Minute
	time.AfterFunc(100*time.Millisecond, cancel)
	start = time.Now()
	if err := c.Call(ctx, "ping", nil, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("cancel took %v", d)
	}
}

func TestCallNoServer(t *testing.T) {
	c := New(filepath.Join(t.TempDir(), "none.sock"))
	if err := c.Call(context.Background(), "ping", nil, nil); err == nil {
		t.Fatal("want dial error")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := c.WaitReady(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady err = %v", err)
	}
}

func TestDecodeResponse(t *testing.T) {
	var pong Pong
	if err := DecodeResponse([]byte(`{"id":"1","result":{"type":"pong","version":"v","protocol":20}}`), &pong); err != nil || pong.Version != "v" || pong.Capabilities != nil {
		t.Fatalf("pong %+v err %v", pong, err)
	}
	err := DecodeResponse([]byte(`{"id":"","error":{"code":"invalid_request","message":"m"}}`), nil)
	if !IsCode(err, "invalid_request") {
		t.Fatalf("err = %v", err)
	}
	for _, bad := range []string{
		``, `null`, `[]`, `{}`, `{"id":"1"}`, `{"result":{"type":"ok"}}`, `{"id":"1","result":null}`,
		`{"id":"1","result":"ok"}`, `{"id":"1","error":{"message":"no code"}}`, `{"id":1,"result":{}}`,
		`{"id":"1","result":{"type":"pong","protocol":"x"}}`,
	} {
		var p Pong
		err := DecodeResponse([]byte(bad), &p)
		var he *Error
		if err == nil || errors.As(err, &he) {
			t.Errorf("DecodeResponse(%q) = %v, want plain error", bad, err)
		}
	}
}

func TestSessionPaths(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	cases := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, "/x/herdr"},
		{map[string]string{"HOME": "/h"}, "/h/.config/herdr"},
		{map[string]string{"TMPDIR": "/t"}, "/t/herdr"},
		{map[string]string{}, "/tmp/herdr"},
	}
	for _, c := range cases {
		if got := ConfigDir(env(c.env)); got != c.want {
			t.Errorf("ConfigDir(%v) = %q, want %q", c.env, got, c.want)
		}
	}
	if got := SocketPath("/c", "default"); got != "/c/herdr.sock" {
		t.Errorf("default socket = %q", got)
	}
	if got := SocketPath("/c", "fleet-a"); got != "/c/sessions/fleet-a/herdr.sock" {
		t.Errorf("named socket = %q", got)
	}
	for _, ok := range []string{"a", "fleet-a", "A.b_c-9", strings.Repeat("x", 64), "default", "..."} {
		if err := ValidateSessionName(ok); err != nil {
			t.Errorf("ValidateSessionName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".", "..", "a/b", "a b", "é", strings.Repeat("x", 65), "a\x00"} {
		if err := ValidateSessionName(bad); err == nil {
			t.Errorf("ValidateSessionName(%q) accepted", bad)
		}
	}
}

func TestListSessions(t *testing.T) {
	dir, err := os.MkdirTemp("", "fm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	got, err := ListSessions(dir)
	if err != nil || len(got) != 1 || got[0].Name != "default" || !got[0].Default || got[0].Running ||
		got[0].SocketPath != filepath.Join(dir, "herdr.sock") || got[0].SessionDir != dir {
		t.Fatalf("empty config: %+v %v", got, err)
	}
	for _, n := range []string{"zeta", "alpha", "bad name", "default"} {
		if err := os.MkdirAll(filepath.Join(dir, "sessions", n), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	_ = os.WriteFile(filepath.Join(dir, "sessions", "file"), nil, 0o600)
	ln, err := net.Listen("unix", SocketPath(dir, "zeta"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// A stale socket file with no listener is not running.
	stale, err := net.Listen("unix", SocketPath(dir, "alpha"))
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	got, err = ListSessions(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(got)
	want := `[{"name":"default","default":true,"running":false,"socket_path":"` + dir + `/herdr.sock","session_dir":"` + dir + `"},` +
		`{"name":"alpha","default":false,"running":false,"socket_path":"` + dir + `/sessions/alpha/herdr.sock","session_dir":"` + dir + `/sessions/alpha"},` +
		`{"name":"zeta","default":false,"running":true,"socket_path":"` + dir + `/sessions/zeta/herdr.sock","session_dir":"` + dir + `/sessions/zeta"}]`
	if string(b) != want {
		t.Fatalf("ListSessions =\n%s\nwant\n%s", b, want)
	}
}

func TestScrubEnv(t *testing.T) {
	in := []string{"PATH=/bin", "HERDR_SOCKET_PATH=/s", "HERDR_PLUGIN_X=1", "HERDR=keep", "XHERDR_ENV=1", "HERDR_ENV=1"}
	got := ScrubEnv(in)
	if strings.Join(got, " ") != "PATH=/bin HERDR=keep XHERDR_ENV=1" {
		t.Fatalf("ScrubEnv = %q", got)
	}
	if len(in) != 6 || in[1] != "HERDR_SOCKET_PATH=/s" {
		t.Fatal("input modified")
	}
}
