package herdrd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fleetmgr/fleetmgr/herdr"
)

// workspace is a group of tabs. Guarded by Server.mu.
type workspace struct {
	id          string
	label       string
	cwd         string
	tabs        []*tab
	active      *tab
	tabCounter  int
	paneCounter int
}

// tab holds panes (always one here: the stand-in has no splits). Guarded by Server.mu.
type tab struct {
	id    string
	ws    *workspace
	label string // "" means the tab number
	panes []*pane
}

// badRequest is a request that could not be parsed; herdr answers it with invalid_request and
// id "" (herdr src/api/server.rs).
type badRequest string

func (b badRequest) Error() string { return "invalid request: " + string(b) }

// apiErr builds a herdr error object.
func apiErr(code, format string, args ...any) *herdr.Error {
	return &herdr.Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// invalidRequest encodes an invalid_request answer with id "".
func invalidRequest(msg string) []byte {
	return encodeError("", &herdr.Error{Code: "invalid_request", Message: "invalid request: " + msg})
}

func encodeError(id string, e *herdr.Error) []byte {
	b, _ := json.Marshal(struct {
		ID    string       `json:"id"`
		Error *herdr.Error `json:"error"`
	}{id, e})
	return b
}

// handler runs one method on its raw params object.
type handler func(s *Server, params json.RawMessage) (any, error)

// handlers lists the methods the stand-in serves.
func handlers() map[string]handler {
	return map[string]handler{
		"ping":              (*Server).ping,
		"workspace.create":  (*Server).workspaceCreate,
		"tab.create":        (*Server).tabCreate,
		"tab.list":          (*Server).tabList,
		"pane.list":         (*Server).paneList,
		"pane.get":          (*Server).paneGet,
		"pane.process_info": (*Server).paneProcessInfo,
		"pane.send_input":   (*Server).paneSendInput,
		"pane.send_text":    (*Server).paneSendText,
		"pane.read":         (*Server).paneRead,
		"pane.close":        (*Server).paneClose,
		"tab.close":         (*Server).tabClose,
		"session.snapshot":  (*Server).sessionSnapshot,
		"server.stop":       nil, // answered by dispatch itself
		// Push methods (Config.WithoutPush removes them).
		"pane.report_metadata": (*Server).paneReportMetadata,
		"notification.show":    (*Server).notificationShow,
		"events.subscribe":     nil, // answered by dispatch itself: a stream
		"events.wait":          nil, // answered by dispatch itself: needs the call's context
	}
}

// pushMethods are the methods Config.WithoutPush removes.
var pushMethods = map[string]bool{
	"events.subscribe": true, "events.wait": true, "pane.report_metadata": true, "notification.show": true,
}

// dispatch answers one request line; stop reports a server.stop (first or repeated).
//
// server.stop (herdr 0.8.2, src/api/server.rs; the fix of herdr issue #2612) is answered on the
// socket thread: the stopping state is set before the answer goes out, so every later request
// but ping gets server_unavailable, and a repeated server.stop is answered ok as well.
//
// events.subscribe returns a stream: dispatch's resp is then the acknowledgement, and the
// caller runs stream on the connection after writing it. ctx ends when the client goes or the
// server stops; events.wait honours it.
func (s *Server) dispatch(ctx context.Context, line []byte) (resp []byte, stop bool, stream func(context.Context, net.Conn)) {
	resp, stop = s.dispatchLine(ctx, line, &stream)
	if s.cfg.NotificationLog != nil && bytes.Contains(line, []byte(`"notification.show"`)) {
		s.recordNotification(line, resp)
	}
	return resp, stop, stream
}

// recordNotification writes a notification.show exchange to Config.NotificationLog: one JSON
// line {"request": …, "response": …}, each as it went on the socket.
func (s *Server) recordNotification(req, resp []byte) {
	var m struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(req, &m) != nil || m.Method != "notification.show" {
		return
	}
	b, err := json.Marshal(struct {
		Request  json.RawMessage `json:"request"`
		Response json.RawMessage `json:"response"`
	}{bytes.TrimSpace(req), resp})
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = s.cfg.NotificationLog.Write(append(b, '\n'))
}

func (s *Server) dispatchLine(ctx context.Context, line []byte, stream *func(context.Context, net.Conn)) (resp []byte, stop bool) {
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method json.RawMessage `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(line, &req); err != nil {
		return invalidRequest(err.Error()), false
	}
	var id, method string
	if req.ID == nil || json.Unmarshal(req.ID, &id) != nil {
		return invalidRequest("field `id` must be a string"), false
	}
	// From protocol 22 an error keeps an id that could be read (herdr issue #4344); before,
	// any request that fails to parse is answered with id "".
	invalid := func(msg string) []byte {
		if s.cfg.Protocol >= 22 {
			return encodeError(id, &herdr.Error{Code: "invalid_request", Message: "invalid request: " + msg})
		}
		return invalidRequest(msg)
	}
	if req.Method == nil || json.Unmarshal(req.Method, &method) != nil {
		return invalid("missing or non-string field `method`"), false
	}
	h, ok := handlers()[method]
	if s.cfg.WithoutPush && pushMethods[method] {
		ok = false
	}
	if !ok {
		return invalid(fmt.Sprintf("unknown variant `%s`", method)), false
	}
	if p := bytes.TrimSpace(req.Params); len(p) == 0 || p[0] != '{' {
		return invalid("missing field `params`"), false
	}
	if method == "server.stop" {
		if err := decodeParams(req.Params, &struct{}{}); err != nil {
			return invalid(strings.TrimPrefix(err.Error(), "invalid request: ")), false
		}
		s.mu.Lock()
		s.stopping = true
		s.mu.Unlock()
		return encodeOK(id), true
	}
	s.mu.Lock()
	stopping := s.stopping
	s.mu.Unlock()
	if stopping && method != "ping" {
		return encodeError(id, unavailable().(*herdr.Error)), false
	}
	start := time.Now()
	var result any
	var err error
	switch method {
	case "events.subscribe":
		var st func(context.Context, net.Conn)
		resp, st = s.subscribe(id, req.Params)
		*stream = st
		s.logCall(ctx, method, id, 0, nil)
		return resp, false
	case "events.wait":
		result, err = s.eventsWait(ctx, req.Params)
	default:
		result, err = h(s, req.Params)
	}
	s.logCall(ctx, method, id, time.Since(start), err)
	switch e := err.(type) {
	case nil:
		b, err := json.Marshal(struct {
			ID     string `json:"id"`
			Result any    `json:"result"`
		}{id, result})
		if err != nil {
			return encodeError(id, apiErr("internal_error", "encode result: %v", err)), false
		}
		return b, false
	case badRequest:
		return invalid(string(e)), false
	case *herdr.Error:
		return encodeError(id, e), false
	default:
		return encodeError(id, apiErr("internal_error", "%v", err)), false
	}
}

// logCall logs one API call, with the caller's pid (peer_pid, 0 when unknown): at Info with
// Config.LogCalls, else at Debug.
func (s *Server) logCall(ctx context.Context, method, id string, dur time.Duration, err error) {
	lvl := slog.LevelDebug
	if s.cfg.LogCalls {
		lvl = slog.LevelInfo
	}
	pid, _ := ctx.Value(peerKey{}).(int)
	s.log.Log(ctx, lvl, "api call", "method", method, "id", id, "peer_pid", pid, "dur", dur, "err", err)
}

// encodeOK encodes {"type":"ok"} for id.
func encodeOK(id string) []byte {
	b, _ := json.Marshal(struct {
		ID     string `json:"id"`
		Result any    `json:"result"`
	}{id, okResult()})
	return b
}

// decodeParams checks that every required field is present and not null, then decodes raw
// into dst. Failures are badRequest.
func decodeParams(raw json.RawMessage, dst any, required ...string) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return badRequest(err.Error())
	}
	for _, k := range required {
		if v, ok := m[k]; !ok || string(bytes.TrimSpace(v)) == "null" {
			return badRequest("missing field `" + k + "`")
		}
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		return badRequest(err.Error())
	}
	return nil
}

// ok is the result of methods without data.
type ok struct {
	Type string `json:"type"`
}

func okResult() any { return ok{Type: "ok"} }

// paneJSON is the stand-in's PaneInfo: herdr.PaneInfo plus the terminal title.
type paneJSON struct {
	herdr.PaneInfo
	TerminalTitle string            `json:"terminal_title,omitempty"`
	Tokens        map[string]string `json:"tokens,omitempty"`
}

// agentJSON is one schema AgentInfo entry of session.snapshot.
type agentJSON struct {
	PaneID      string `json:"pane_id"`
	TerminalID  string `json:"terminal_id"`
	WorkspaceID string `json:"workspace_id"`
	TabID       string `json:"tab_id"`
	Focused     bool   `json:"focused"`
	Agent       string `json:"agent"`
	AgentStatus string `json:"agent_status"`
	Revision    uint64 `json:"revision"`
}

// ---- views (Server.mu held) ----

func (s *Server) tabFocused(t *tab) bool {
	return t != nil && t.ws == s.focused && t.ws.active == t
}

func (s *Server) paneView(p *pane) paneJSON {
	status, agent, title, rev := p.agentState()
	v := paneJSON{PaneInfo: herdr.PaneInfo{
		PaneID: p.id, TerminalID: p.terminalID, WorkspaceID: p.tab.ws.id, TabID: p.tab.id,
		Focused: s.tabFocused(p.tab), Cwd: p.launchCwd, Agent: agent, AgentStatus: status, Revision: rev,
	}, TerminalTitle: title}
	p.mu.Lock()
	v.StateLabels, v.Title, v.DisplayAgent, v.Tokens = p.metaViewLocked(time.Now())
	p.mu.Unlock()
	if c := procCwd(p.pid); c != "" {
		v.Cwd = c
	}
	if st, err := readStat(p.pid); err == nil && st.tpgid > 0 {
		v.ForegroundCwd = procCwd(st.tpgid)
	}
	return v
}

// statusRank orders agent statuses for aggregation: the most urgent wins.
func statusRank(st string) int {
	return strings.Index("unknown idle done working blocked", st)
}

func aggregate(panes []*pane) string {
	best := herdr.StatusUnknown
	for _, p := range panes {
		if st, _, _, _ := p.agentState(); statusRank(st) > statusRank(best) {
			best = st
		}
	}
	return best
}

func (s *Server) tabView(t *tab) herdr.TabInfo {
	num := 0
	for i, x := range t.ws.tabs {
		if x == t {
			num = i + 1
		}
	}
	label := t.label
	if label == "" {
		label = strconv.Itoa(num)
	}
	return herdr.TabInfo{TabID: t.id, WorkspaceID: t.ws.id, Number: num, Label: label,
		Focused: s.tabFocused(t), PaneCount: len(t.panes), AgentStatus: aggregate(t.panes)}
}

func (s *Server) wsView(ws *workspace) herdr.WorkspaceInfo {
	num := 0
	for i, x := range s.workspaces {
		if x == ws {
			num = i + 1
		}
	}
	var panes []*pane
	for _, t := range ws.tabs {
		panes = append(panes, t.panes...)
	}
	v := herdr.WorkspaceInfo{WorkspaceID: ws.id, Number: num, Label: ws.label, Focused: ws == s.focused,
		PaneCount: len(panes), TabCount: len(ws.tabs), AgentStatus: aggregate(panes)}
	if ws.active != nil {
		v.ActiveTabID = ws.active.id
	}
	return v
}

// ---- structure (Server.mu held) ----

// detachPane removes p from the layout; an emptied tab, and then workspace, goes too.
func (s *Server) detachPane(p *pane) {
	t := p.tab
	if t == nil {
		return
	}
	s.emitPaneClosed(p.id, t.ws.id)
	p.tab = nil
	delete(s.paneByID, p.id)
	t.panes = remove(t.panes, p)
	if len(t.panes) == 0 {
		s.detachTab(t)
	}
}

// detachTab removes t (and its panes) from the layout; an emptied workspace goes too.
func (s *Server) detachTab(t *tab) {
	for _, p := range t.panes {
		s.emitPaneClosed(p.id, t.ws.id)
		p.tab = nil
		delete(s.paneByID, p.id)
	}
	t.panes = nil
	ws := t.ws
	idx := index(ws.tabs, t)
	if idx < 0 {
		return
	}
	s.emit("tab_closed", "", struct {
		Type        string `json:"type"`
		TabID       string `json:"tab_id"`
		WorkspaceID string `json:"workspace_id"`
	}{"tab_closed", t.id, ws.id})
	delete(s.tabByID, t.id)
	ws.tabs = remove(ws.tabs, t)
	if ws.active == t {
		ws.active = nil
		if len(ws.tabs) > 0 {
			ws.active = ws.tabs[max(0, idx-1)]
		}
	}
	if len(ws.tabs) == 0 {
		s.emit("workspace_closed", "", struct {
			Type        string `json:"type"`
			WorkspaceID string `json:"workspace_id"`
		}{"workspace_closed", ws.id})
		s.workspaces = remove(s.workspaces, ws)
		if s.focused == ws {
			s.focused = nil
			if len(s.workspaces) > 0 {
				s.focused = s.workspaces[0]
			}
		}
	}
}

func index[T comparable](xs []T, x T) int {
	for i, y := range xs {
		if y == x {
			return i
		}
	}
	return -1
}

func remove[T comparable](xs []T, x T) []T {
	if i := index(xs, x); i >= 0 {
		return append(xs[:i:i], xs[i+1:]...)
	}
	return xs
}

// newTab creates a tab with one pane in ws and starts the pane's goroutines.
func (s *Server) newTab(ws *workspace, label, cwd string, env map[string]string) (*tab, error) {
	ws.tabCounter++
	ws.paneCounter++
	t := &tab{id: tabID(ws.id, ws.tabCounter), ws: ws, label: label}
	pid := paneID(ws.id, ws.paneCounter)
	s.termCounter++
	term := fmt.Sprintf("term_%x%x", time.Now().UnixMicro(), s.termCounter)
	p, err := spawnPane(pid, term, s.cfg.Shell, cwd, s.paneEnv(env, ws.id, t.id, pid))
	if err != nil {
		return nil, err
	}
	p.tab = t
	p.onStatus = s.publishStatus
	t.panes = []*pane{p}
	ws.tabs = append(ws.tabs, t)
	if ws.active == nil {
		ws.active = t
	}
	s.tabByID[t.id] = t
	s.paneByID[p.id] = p
	s.log.Info("pane started", "pane", p.id, "terminal", p.terminalID, "shell_pid", p.pid, "cwd", cwd)
	s.bg.Add(2)
	go func() {
		defer s.bg.Done()
		p.readLoop()
	}()
	go func() {
		defer s.bg.Done()
		err := p.cmd.Wait()
		close(p.exited)
		s.mu.Lock()
		if p.tab != nil {
			s.emit(herdr.KindPaneExited, p.id, struct {
				Type        string `json:"type"`
				PaneID      string `json:"pane_id"`
				WorkspaceID string `json:"workspace_id"`
			}{herdr.KindPaneExited, p.id, p.tab.ws.id})
		}
		s.detachPane(p)
		s.mu.Unlock()
		s.log.Info("pane shell exited", "pane", p.id, "shell_pid", p.pid, "status", err)
		p.shutdown()
	}()
	return t, nil
}

// paneEnv builds a pane's environment (herdr src/pane.rs): base environment without CODEX_THREAD_ID,
// then the caller's env, then herdr's own variables, which win.
func (s *Server) paneEnv(extra map[string]string, wsID, tabID, paneID string) []string {
	base := s.cfg.Env
	if base == nil {
		base = os.Environ()
	}
	var keys []string
	vals := map[string]string{}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			keys = append(keys, k)
		}
		vals[k] = v
	}
	for _, kv := range base {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			set(k, v)
		}
	}
	delete(vals, "CODEX_THREAD_ID")
	ek := make([]string, 0, len(extra))
	for k := range extra {
		ek = append(ek, k)
	}
	sort.Strings(ek)
	for _, k := range ek {
		set(k, extra[k])
	}
	set("HERDR_ENV", "1")
	set("HERDR_SOCKET_PATH", s.cfg.Socket)
	set("HERDR_BIN_PATH", s.cfg.BinPath)
	set("HERDR_WORKSPACE_ID", wsID)
	set("HERDR_TAB_ID", tabID)
	set("HERDR_PANE_ID", paneID)
	set("TERM", "xterm-256color")
	set("COLORTERM", "truecolor")
	if s.cfg.Protocol >= 22 {
		set("TERM_PROGRAM", "herdr") // herdr 0.9.2's release notes
	}
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		if v, ok := vals[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	return out
}

// validateEnv applies herdr's rule: keys non-empty without '=' or NUL, values without NUL.
func validateEnv(env map[string]string) error {
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
			return apiErr("invalid_env", "invalid environment variable %q", k)
		}
	}
	return nil
}

// resolveCwd returns an absolute existing directory, def when cwd is empty.
func resolveCwd(cwd *string, def, failCode string) (string, error) {
	d := def
	if cwd != nil && *cwd != "" {
		d = *cwd
	}
	abs, err := filepath.Abs(d)
	if err != nil {
		return "", apiErr(failCode, "cwd %q: %v", d, err)
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", apiErr(failCode, "cwd %q is not a directory", d)
	}
	return abs, nil
}

func unavailable() error { return apiErr("server_unavailable", "server is shutting down") }

// ---- methods ----

func (s *Server) ping(json.RawMessage) (any, error) {
	return struct {
		Type string `json:"type"`
		herdr.Pong
	}{"pong", herdr.Pong{Version: s.cfg.Version, Protocol: s.cfg.Protocol, Capabilities: &herdr.Capabilities{
		LiveHandoff:          false,
		DetachedServerDaemon: detached(),
	}}}, nil
}

// detached reports getsid(0)==getpid(), herdr's detached_server_daemon test.
func detached() bool {
	sid, err := unix.Getsid(0)
	return err == nil && sid == os.Getpid()
}

// createParams are workspace.create's and tab.create's params.
type createParams struct {
	WorkspaceID *string           `json:"workspace_id"`
	Cwd         *string           `json:"cwd"`
	Label       *string           `json:"label"`
	Focus       bool              `json:"focus"`
	Env         map[string]string `json:"env"`
}

func (s *Server) workspaceCreate(raw json.RawMessage) (any, error) {
	var p createParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	if err := validateEnv(p.Env); err != nil {
		return nil, err
	}
	cwd, err := resolveCwd(p.Cwd, s.cfg.DefaultCwd, "workspace_create_failed")
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil, unavailable()
	}
	s.wsCounter++
	ws := &workspace{id: workspaceID(s.wsCounter), label: filepath.Base(cwd), cwd: cwd}
	if p.Label != nil && *p.Label != "" {
		ws.label = *p.Label
	}
	t, err := s.newTab(ws, "", cwd, p.Env)
	if err != nil {
		return nil, apiErr("workspace_create_failed", "spawn shell: %v", err)
	}
	s.workspaces = append(s.workspaces, ws)
	if p.Focus || s.focused == nil {
		s.focused = ws
	}
	s.emit("workspace_created", "", struct {
		Type      string              `json:"type"`
		Workspace herdr.WorkspaceInfo `json:"workspace"`
	}{"workspace_created", s.wsView(ws)})
	s.emitCreated(t)
	return struct {
		Type      string              `json:"type"`
		Workspace herdr.WorkspaceInfo `json:"workspace"`
		Tab       herdr.TabInfo       `json:"tab"`
		RootPane  paneJSON            `json:"root_pane"`
	}{"workspace_created", s.wsView(ws), s.tabView(t), s.paneView(t.panes[0])}, nil
}

func (s *Server) tabCreate(raw json.RawMessage) (any, error) {
	var p createParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	if err := validateEnv(p.Env); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return nil, unavailable()
	}
	ws := s.focused
	if p.WorkspaceID != nil && *p.WorkspaceID != "" {
		ws = s.findWorkspace(*p.WorkspaceID)
		if ws == nil {
			return nil, apiErr("workspace_not_found", "workspace %s not found", *p.WorkspaceID)
		}
	}
	if ws == nil {
		return nil, apiErr("workspace_not_found", "no active workspace")
	}
	cwd, err := resolveCwd(p.Cwd, ws.cwd, "tab_create_failed")
	if err != nil {
		return nil, err
	}
	label := ""
	if p.Label != nil {
		label = *p.Label
	}
	t, err := s.newTab(ws, label, cwd, p.Env)
	if err != nil {
		return nil, apiErr("tab_create_failed", "spawn shell: %v", err)
	}
	if p.Focus {
		ws.active = t
		s.focused = ws
	}
	s.emitCreated(t)
	return struct {
		Type     string        `json:"type"`
		Tab      herdr.TabInfo `json:"tab"`
		RootPane paneJSON      `json:"root_pane"`
	}{"tab_created", s.tabView(t), s.paneView(t.panes[0])}, nil
}

func (s *Server) findWorkspace(id string) *workspace {
	for _, ws := range s.workspaces {
		if ws.id == id {
			return ws
		}
	}
	return nil
}

// scope resolves an optional workspace_id filter.
func (s *Server) scope(raw json.RawMessage) ([]*workspace, error) {
	var p struct {
		WorkspaceID *string `json:"workspace_id"`
	}
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	if p.WorkspaceID == nil {
		return s.workspaces, nil
	}
	ws := s.findWorkspace(*p.WorkspaceID)
	if ws == nil {
		return nil, apiErr("workspace_not_found", "workspace %s not found", *p.WorkspaceID)
	}
	return []*workspace{ws}, nil
}

func (s *Server) tabList(raw json.RawMessage) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wss, err := s.scope(raw)
	if err != nil {
		return nil, err
	}
	tabs := []herdr.TabInfo{}
	for _, ws := range wss {
		for _, t := range ws.tabs {
			tabs = append(tabs, s.tabView(t))
		}
	}
	return struct {
		Type string          `json:"type"`
		Tabs []herdr.TabInfo `json:"tabs"`
	}{"tab_list", tabs}, nil
}

func (s *Server) paneList(raw json.RawMessage) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wss, err := s.scope(raw)
	if err != nil {
		return nil, err
	}
	panes := []paneJSON{}
	for _, ws := range wss {
		for _, t := range ws.tabs {
			for _, p := range t.panes {
				panes = append(panes, s.paneView(p))
			}
		}
	}
	return struct {
		Type  string     `json:"type"`
		Panes []paneJSON `json:"panes"`
	}{"pane_list", panes}, nil
}

// lookupPane decodes {pane_id} (required unless optional) and finds the pane; with optional
// and no pane_id it returns the focused pane. Server.mu held.
func (s *Server) lookupPane(raw json.RawMessage, dst any, paneIDOf func() string, optional bool) (*pane, error) {
	req := []string{"pane_id"}
	if optional {
		req = nil
	}
	if err := decodeParams(raw, dst, req...); err != nil {
		return nil, err
	}
	id := paneIDOf()
	if id == "" && optional {
		if s.focused != nil && s.focused.active != nil && len(s.focused.active.panes) > 0 {
			return s.focused.active.panes[0], nil
		}
		return nil, apiErr("pane_not_found", "no focused pane")
	}
	p := s.paneByID[id]
	if p == nil {
		return nil, apiErr("pane_not_found", "pane %s not found", id)
	}
	return p, nil
}

func (s *Server) paneGet(raw json.RawMessage) (any, error) {
	var q struct {
		PaneID string `json:"pane_id"`
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.lookupPane(raw, &q, func() string { return q.PaneID }, false)
	if err != nil {
		return nil, err
	}
	return struct {
		Type string   `json:"type"`
		Pane paneJSON `json:"pane"`
	}{"pane_info", s.paneView(p)}, nil
}

func (s *Server) paneProcessInfo(raw json.RawMessage) (any, error) {
	var q struct {
		PaneID *string `json:"pane_id"`
	}
	s.mu.Lock()
	p, err := s.lookupPane(raw, &q, func() string {
		if q.PaneID == nil {
			return ""
		}
		return *q.PaneID
	}, true)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return struct {
		Type        string            `json:"type"`
		ProcessInfo herdr.ProcessInfo `json:"process_info"`
	}{"pane_process_info", processInfo(p.id, p.pid)}, nil
}

func (s *Server) paneSendInput(raw json.RawMessage) (any, error) {
	var q struct {
		PaneID string   `json:"pane_id"`
		Text   string   `json:"text"`
		Keys   []string `json:"keys"`
	}
	s.mu.Lock()
	p, err := s.lookupPane(raw, &q, func() string { return q.PaneID }, false)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	var keys []byte
	for _, k := range q.Keys {
		b, ok := encodeKey(k)
		if !ok {
			return nil, apiErr("invalid_key", "unknown key %q", k)
		}
		keys = append(keys, b...)
	}
	if err := p.write(append(p.pasteBytes(q.Text), keys...)); err != nil {
		return nil, apiErr("pane_send_failed", "write to pane %s: %v", p.id, err)
	}
	return okResult(), nil
}

func (s *Server) paneSendText(raw json.RawMessage) (any, error) {
	var q struct {
		PaneID string `json:"pane_id"`
		Text   string `json:"text"`
	}
	if err := decodeParams(raw, &q, "pane_id", "text"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	p, err := s.lookupPane(raw, &q, func() string { return q.PaneID }, false)
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if err := p.write([]byte(q.Text)); err != nil {
		return nil, apiErr("pane_send_failed", "write to pane %s: %v", p.id, err)
	}
	return okResult(), nil
}

func (s *Server) paneRead(raw json.RawMessage) (any, error) {
	var q struct {
		PaneID    string  `json:"pane_id"`
		Source    string  `json:"source"`
		Lines     *int64  `json:"lines"`
		Format    *string `json:"format"`
		StripANSI *bool   `json:"strip_ansi"`
	}
	if err := decodeParams(raw, &q, "pane_id", "source"); err != nil {
		return nil, err
	}
	switch q.Source {
	case herdr.SourceVisible, herdr.SourceRecent, herdr.SourceRecentUnwrapped, herdr.SourceDetection:
	default:
		return nil, badRequest(fmt.Sprintf("unknown variant `%s` for field `source`", q.Source))
	}
	format := "text"
	if q.Format != nil {
		format = *q.Format
	}
	if format != "text" && format != "ansi" {
		return nil, badRequest(fmt.Sprintf("unknown variant `%s` for field `format`", format))
	}
	n := 0
	if q.Lines != nil {
		if *q.Lines < 0 || *q.Lines > 1<<32-1 {
			return nil, badRequest("field `lines` out of range for u32")
		}
		n = int(*q.Lines)
	}
	s.mu.Lock()
	p, err := s.lookupPane(raw, &q, func() string { return q.PaneID }, false)
	var wsID, tabID string
	if p != nil {
		wsID, tabID = p.tab.ws.id, p.tab.id
	}
	s.mu.Unlock()
	if err != nil {
		return nil, err
	}

	rawOut, dropped := p.output()
	plain := format == "text" && (q.StripANSI == nil || *q.StripANSI)
	var lines []string
	if plain {
		lines = renderText(rawOut)
		if q.Source != herdr.SourceRecentUnwrapped {
			lines = wrapLines(lines, renderWidth)
		}
	} else {
		lines = strings.Split(string(rawOut), "\n")
	}
	if q.Source == herdr.SourceVisible || q.Source == herdr.SourceDetection {
		lines, _ = lastLines(lines, renderRows)
		dropped = false
	}
	lines, cut := lastLines(lines, n)
	outFormat := "text"
	if !plain {
		outFormat = "ansi"
	}
	// herdr answers revision 0 whatever the pane's revision (src/app/api/panes.rs, herdr
	// issue #2804): nothing can wait on it changing.
	return struct {
		Type string               `json:"type"`
		Read herdr.PaneReadResult `json:"read"`
	}{"pane_read", herdr.PaneReadResult{
		PaneID: p.id, WorkspaceID: wsID, TabID: tabID, Source: q.Source, Format: outFormat,
		Text: strings.Join(lines, "\n"), Revision: 0, Truncated: cut || dropped,
	}}, nil
}

func (s *Server) paneClose(raw json.RawMessage) (any, error) {
	var q struct {
		PaneID string `json:"pane_id"`
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.lookupPane(raw, &q, func() string { return q.PaneID }, false)
	if err != nil {
		return nil, err
	}
	s.detachPane(p)
	s.shutdownAsync(p)
	return okResult(), nil
}

func (s *Server) tabClose(raw json.RawMessage) (any, error) {
	var q struct {
		TabID string `json:"tab_id"`
	}
	if err := decodeParams(raw, &q, "tab_id"); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tabByID[q.TabID]
	if t == nil {
		return nil, apiErr("tab_not_found", "tab %s not found", q.TabID)
	}
	panes := append([]*pane(nil), t.panes...)
	s.detachTab(t)
	for _, p := range panes {
		s.shutdownAsync(p)
	}
	return okResult(), nil
}

// shutdownAsync kills a detached pane's session in the background. Server.mu held.
func (s *Server) shutdownAsync(p *pane) {
	s.log.Info("pane closed", "pane", p.id, "shell_pid", p.pid)
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		p.shutdown()
	}()
}

func (s *Server) sessionSnapshot(raw json.RawMessage) (any, error) {
	if err := decodeParams(raw, &struct{}{}); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := struct {
		Version            string                `json:"version"`
		Protocol           int                   `json:"protocol"`
		FocusedWorkspaceID string                `json:"focused_workspace_id,omitempty"`
		FocusedTabID       string                `json:"focused_tab_id,omitempty"`
		FocusedPaneID      string                `json:"focused_pane_id,omitempty"`
		Workspaces         []herdr.WorkspaceInfo `json:"workspaces"`
		Tabs               []herdr.TabInfo       `json:"tabs"`
		Panes              []paneJSON            `json:"panes"`
		Layouts            []herdr.Layout        `json:"layouts"`
		Agents             []agentJSON           `json:"agents"`
	}{Version: s.cfg.Version, Protocol: s.cfg.Protocol, Workspaces: []herdr.WorkspaceInfo{}, Tabs: []herdr.TabInfo{},
		Panes: []paneJSON{}, Layouts: []herdr.Layout{}, Agents: []agentJSON{}}
	if ws := s.focused; ws != nil {
		snap.FocusedWorkspaceID = ws.id
		if ws.active != nil {
			snap.FocusedTabID = ws.active.id
			if len(ws.active.panes) > 0 {
				snap.FocusedPaneID = ws.active.panes[0].id
			}
		}
	}
	area := herdr.Rect{Width: renderWidth, Height: renderRows}
	for _, ws := range s.workspaces {
		snap.Workspaces = append(snap.Workspaces, s.wsView(ws))
		for _, t := range ws.tabs {
			snap.Tabs = append(snap.Tabs, s.tabView(t))
			l := herdr.Layout{WorkspaceID: ws.id, TabID: t.id, Area: area,
				Panes: []herdr.LayoutPane{}, Splits: []herdr.LayoutSplit{}}
			for _, p := range t.panes {
				v := s.paneView(p)
				snap.Panes = append(snap.Panes, v)
				l.FocusedPaneID = t.panes[0].id
				l.Panes = append(l.Panes, herdr.LayoutPane{PaneID: p.id, Focused: v.Focused, Rect: area})
				if v.Agent != "" {
					snap.Agents = append(snap.Agents, agentJSON{PaneID: p.id, TerminalID: p.terminalID,
						WorkspaceID: ws.id, TabID: t.id, Focused: v.Focused, Agent: v.Agent,
						AgentStatus: v.AgentStatus, Revision: v.Revision})
				}
			}
			snap.Layouts = append(snap.Layouts, l)
		}
	}
	return struct {
		Type     string `json:"type"`
		Snapshot any    `json:"snapshot"`
	}{"session_snapshot", snap}, nil
}

// envLookup finds key in a "KEY=value" list, falling back to the process environment when env
// is nil.
func envLookup(env []string, key string) string {
	if env == nil {
		return os.Getenv(key)
	}
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// ---- events (Server.mu held unless said) ----

// emitCreated publishes tab_created and pane_created for a new tab.
func (s *Server) emitCreated(t *tab) {
	s.emit("tab_created", "", struct {
		Type string        `json:"type"`
		Tab  herdr.TabInfo `json:"tab"`
	}{"tab_created", s.tabView(t)})
	for _, p := range t.panes {
		s.emit(herdr.KindPaneCreated, p.id, struct {
			Type string   `json:"type"`
			Pane paneJSON `json:"pane"`
		}{herdr.KindPaneCreated, s.paneView(p)})
	}
}

// emitPaneClosed publishes pane_closed.
func (s *Server) emitPaneClosed(paneID, wsID string) {
	s.emit(herdr.KindPaneClosed, paneID, struct {
		Type        string `json:"type"`
		PaneID      string `json:"pane_id"`
		WorkspaceID string `json:"workspace_id"`
	}{herdr.KindPaneClosed, paneID, wsID})
}

// publishStatus publishes a pane's status changes, in order: pane_agent_detected when the agent
// was first seen, then pane_agent_status_changed. Called without Server.mu or pane.mu held.
func (s *Server) publishStatus(p *pane, changes []statusChange) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.tab == nil {
		return // closed meanwhile
	}
	wsID := p.tab.ws.id
	labels := p.labels()
	for _, c := range changes {
		if c.detected {
			s.emit(herdr.KindPaneAgentDetected, p.id, struct {
				Type        string `json:"type"`
				PaneID      string `json:"pane_id"`
				WorkspaceID string `json:"workspace_id"`
				Agent       string `json:"agent"`
			}{herdr.KindPaneAgentDetected, p.id, wsID, c.agent})
		}
		s.hub.publish(statusEvent(p.id, wsID, c.status, c.agent, labels))
	}
}
