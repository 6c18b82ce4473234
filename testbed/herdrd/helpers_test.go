package herdrd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/fleetmgr/fleetmgr/testbed/sharedref"
)

// validators compiles the success_response and error_response sub-schemas of herdr's API
// schema (protocol 20), read from the shared folder beside the clone
// (../shared/ref/herdr-api.schema.json; the repository carries no copy). On a bare clone it
// is nil: the tests still drive the stand-in, and say in one line that its answers were not
// checked against herdr's schema.
type validators struct{ success, failure *jsonschema.Schema }

func loadValidators(t *testing.T) *validators {
	t.Helper()
	path, err := sharedref.Path(".", sharedref.HerdrSchema)
	if err != nil {
		t.Logf("herdr's schema not checked: %v", err)
		return nil
	}
	c := jsonschema.NewCompiler()
	v := &validators{}
	if v.success, err = c.Compile(path + "#/schemas/success_response"); err != nil {
		t.Fatalf("compile success_response: %v", err)
	}
	if v.failure, err = c.Compile(path + "#/schemas/error_response"); err != nil {
		t.Fatalf("compile error_response: %v", err)
	}
	return v
}

// check validates one raw response line against the sub-schema its shape calls for.
// A nil v (no schema beside the clone) checks only that the line is JSON.
func (v *validators) check(t *testing.T, line []byte) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(line))
	if err != nil {
		t.Fatalf("response is not JSON: %v: %q", err, line)
	}
	if v == nil {
		return
	}
	sch := v.success
	if m, ok := inst.(map[string]any); ok {
		if _, isErr := m["error"]; isErr {
			sch = v.failure
		}
	}
	if err := sch.Validate(inst); err != nil {
		t.Fatalf("response violates the herdr schema: %v\nline: %s", err, line)
	}
}

// harness is a live stand-in server plus a schema-checking raw client.
type harness struct {
	t    *testing.T
	srv  *Server
	sock string
	v    *validators
	done chan error
	stop context.CancelFunc
	home string
}

// testWriter sends log lines to t.Log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func startHarness(t *testing.T, v *validators) *harness {
	t.Helper()
	return startHarnessWith(t, v, nil)
}

// startHarnessWith is startHarness with the Config adjusted by tune (may be nil).
func startHarnessWith(t *testing.T, v *validators, tune func(*Config)) *harness {
	t.Helper()
	dir, err := os.MkdirTemp("", "fm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Socket: filepath.Join(dir, "cfg", "sessions", "t", "herdr.sock"),
		Env:    []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LANG=C.UTF-8", "CODEX_THREAD_ID=x"},
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	if tune != nil {
		tune(&cfg)
	}
	srv, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, srv: srv, sock: srv.Socket(), v: v, done: make(chan error, 1), stop: cancel, home: home}
	go func() { h.done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-h.done:
		case <-time.After(20 * time.Second):
			t.Error("server did not stop within 20s")
		}
	})
	return h
}

// wait waits for Serve to return.
func (h *harness) wait() error {
	h.t.Helper()
	select {
	case err := <-h.done:
		h.done <- err
		return err
	case <-time.After(15 * time.Second):
		h.t.Fatal("server did not stop within 15s")
		return nil
	}
}

// raw sends one request line and returns the response line, schema-validated.
func (h *harness) raw(line string) []byte {
	h.t.Helper()
	c, err := net.DialTimeout("unix", h.sock, 2*time.Second)
	if err != nil {
		h.t.Fatalf("dial: %v", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		h.t.Fatalf("write: %v", err)
	}
	resp, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		h.t.Fatalf("read response to %s: %v", line, err)
	}
	resp = bytes.TrimSuffix(resp, []byte("\n"))
	h.v.check(h.t, resp)
	return resp
}

// reply is a decoded response line.
type reply struct {
	ID     *string         `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// call sends method with params (a JSON object text) and decodes the success result into out.
func (h *harness) call(method, params string, out any) {
	h.t.Helper()
	line := h.raw(fmt.Sprintf(`{"id":"t-%s","method":%q,"params":%s}`, method, method, params))
	var r reply
	if err := json.Unmarshal(line, &r); err != nil {
		h.t.Fatal(err)
	}
	if r.Error != nil {
		h.t.Fatalf("%s %s: error %s: %s", method, params, r.Error.Code, r.Error.Message)
	}
	if r.ID == nil || *r.ID != "t-"+method {
		h.t.Fatalf("%s: id not echoed: %s", method, line)
	}
	if out != nil {
		if err := json.Unmarshal(r.Result, out); err != nil {
			h.t.Fatal(err)
		}
	}
}

// callErr sends a request expected to fail and returns the error code and the echoed id.
func (h *harness) callErr(line string) (code, id string) {
	h.t.Helper()
	resp := h.raw(line)
	var r reply
	if err := json.Unmarshal(resp, &r); err != nil {
		h.t.Fatal(err)
	}
	if r.Error == nil {
		h.t.Fatalf("request %s succeeded, want an error: %s", line, resp)
	}
	return r.Error.Code, *r.ID
}

// TestHerdrSchemaIsLive: with herdr's schema beside the clone, the validators the stand-in's
// tests use refuse responses herdr would never send (so an empty or mis-addressed schema
// cannot let every test pass); on a bare clone it skips with one line.
func TestHerdrSchemaIsLive(t *testing.T) {
	sharedref.Require(t, sharedref.HerdrSchema)
	v := loadValidators(t)
	for _, line := range []string{
		`{"result":{"type":"pong","version":"0.8.2","protocol":20}}`,  // no id
		`{"id":"1","result":{"type":"pong","version":20}}`,            // version not a string
		`{"id":"1","result":{"type":"no_such_result_type","x":true}}`, // unknown result
	} {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(line))
		if err != nil {
			t.Fatal(err)
		}
		if err := v.success.Validate(inst); err == nil {
			t.Errorf("herdr's success_response schema accepted %s", line)
		}
	}
}
