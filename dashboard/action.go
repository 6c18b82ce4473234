package dashboard

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
)

// csrfContext separates the token's MAC from any other use of the key.
const csrfContext = "fleetmgr dashboard action v1\x00"

// newToken makes a page's CSRF token: a random nonce and its HMAC-SHA256
// under the Server's secret, "base64url(nonce).base64url(mac)". Each page
// load gets its own; any of them is valid for as long as this Server
// lives (a new serve has a new secret, and its page says to reload).
func (s *Server) newToken() (string, error) {
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	return enc.EncodeToString(nonce[:]) + "." + enc.EncodeToString(s.mac(nonce[:])), nil
}

func (s *Server) mac(nonce []byte) []byte {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(csrfContext))
	m.Write(nonce)
	return m.Sum(nil)
}

// validToken checks a token made by newToken, in constant time.
func (s *Server) validToken(tok string) bool {
	n, m, ok := strings.Cut(tok, ".")
	if !ok {
		return false
	}
	enc := base64.RawURLEncoding
	nonce, err1 := enc.DecodeString(n)
	mac, err2 := enc.DecodeString(m)
	if err1 != nil || err2 != nil || len(nonce) != 16 {
		return false
	}
	return hmac.Equal(mac, s.mac(nonce))
}

// sameOrigin checks that r comes from this origin: Origin present and equal
// to the request's own scheme://Host, and Sec-Fetch-Site (when the browser
// sends it) "same-origin". net/http's CrossOriginProtection judges the
// same two headers but lets a request without either through (non-browser
// clients); an action must come from the page, whose browser always sends
// Origin on a POST.
func sameOrigin(r *http.Request) (bool, string) {
	if err := http.NewCrossOriginProtection().Check(r); err != nil {
		return false, err.Error()
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return false, "no Origin header"
	}
	scheme := "http://"
	if r.TLS != nil {
		scheme = "https://"
	}
	if !strings.EqualFold(o, scheme+r.Host) {
		return false, fmt.Sprintf("Origin %s is not this page's origin %s%s", o, scheme, r.Host)
	}
	if sfs := r.Header.Get("Sec-Fetch-Site"); sfs != "" && sfs != "same-origin" {
		return false, "Sec-Fetch-Site " + sfs
	}
	return true, ""
}

// actionReply is the body of a POST /api/action answer.
type actionReply struct {
	OK     bool   `json:"ok"`
	Verb   Verb   `json:"verb"`
	Fleet  string `json:"fleet"`
	Lead   bool   `json:"lead,omitempty"`
	Error  string `json:"error,omitempty"`
	TookMS int64  `json:"took_ms"`
	ActionResult
}

// maxActions bounds the actions under way at once (one per fleet anyway).
const maxActions = 8

// serveAction runs one start/stop/restart asked for by the page. Refused,
// with nothing done, logged and counted: any method but POST (405), an
// Origin that is missing or not this origin (403), a body that is not
// JSON (415), a missing or invalid CSRF token (403), an unknown verb or a
// malformed body (400), a fleet with an action already under way (409),
// a name that is no fleet name or that Action reports unknown after
// reading fleets.toml again (400), a fleet of another host (400: the page
// shows them, the CLI and the manager tools act on them).
func (s *Server) serveAction(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.refuse(w, r, http.StatusMethodNotAllowed, "method", r.Method+" is not allowed: actions are POST only")
		return
	}
	if ok, why := sameOrigin(r); !ok {
		s.refuse(w, r, http.StatusForbidden, "origin", why)
		return
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		s.refuse(w, r, http.StatusUnsupportedMediaType, "content_type", "the body must be application/json")
		return
	}
	if !s.validToken(r.Header.Get(CSRFHeader)) {
		s.refuse(w, r, http.StatusForbidden, "csrf", "missing or invalid "+CSRFHeader+" token (a page from an earlier fleetmgr serve? reload it)")
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<10+1))
	if err != nil || len(body) > 4<<10 {
		s.refuse(w, r, http.StatusBadRequest, "bad_request", "the body must be at most 4 KiB of JSON")
		return
	}
	var a Action
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil || dec.More() {
		s.refuse(w, r, http.StatusBadRequest, "bad_request", fmt.Sprintf("body: want {\"verb\":…,\"fleet\":…,\"lead\":…}: %v", err))
		return
	}
	switch a.Verb {
	case VerbStart, VerbRestart:
	case VerbStop:
		if a.Lead {
			s.refuse(w, r, http.StatusBadRequest, "bad_request", "lead applies to start and restart only")
			return
		}
	default:
		s.refuse(w, r, http.StatusBadRequest, "bad_request", fmt.Sprintf("verb %q: want start, stop or restart", a.Verb))
		return
	}
	if !registry.ValidFleetName(a.Fleet) {
		s.refuse(w, r, http.StatusBadRequest, "unknown_fleet", fmt.Sprintf("no fleet %q (fleets: %s)", a.Fleet, strings.Join(s.hub.knownNames(), ", ")))
		return
	}
	s.known(r.Context(), a.Fleet) // the rows read once more for a name they do not hold yet
	if host, remote := s.hub.remoteHost(a.Fleet); remote {
		s.refuse(w, r, http.StatusBadRequest, "remote", fmt.Sprintf("fleet %s is on host %s: the page does not act on another host's fleets (fleetmgr start|stop|restart NAME@HOST, or the manager tools, do)", a.Fleet, host))
		return
	}
	if !s.claim(a.Fleet) {
		s.refuse(w, r, http.StatusConflict, "busy", "an action on fleet "+a.Fleet+" is already under way (or too many actions are)")
		return
	}
	defer s.release(a.Fleet)

	s.opt.Log.Info("dashboard: action", "verb", a.Verb, "fleet", a.Fleet, "lead", a.Lead, "remote", r.RemoteAddr)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.opt.ActionTimeout)
	defer cancel()
	t0 := time.Now()
	// A name the page does not show yet goes to Action all the same: like
	// the manager tools, it reads fleets.toml again for a fleet added since.
	res, err := s.opt.Action(ctx, a)
	if errors.Is(err, ErrUnknownFleet) {
		s.refuse(w, r, http.StatusBadRequest, "unknown_fleet", err.Error())
		return
	}
	reply := actionReply{OK: err == nil, Verb: a.Verb, Fleet: a.Fleet, Lead: a.Lead, TookMS: time.Since(t0).Milliseconds(), ActionResult: res}
	if reply.Steps == nil {
		reply.Steps = []lifecycle.Step{}
	}
	if err != nil {
		reply.Error = err.Error()
		s.opt.Log.Warn("dashboard: action failed", "verb", a.Verb, "fleet", a.Fleet, "err", err)
	}
	// Show the result in every open page now, not at the next read.
	s.refreshRows(context.WithoutCancel(r.Context()))
	s.hub.askSample([]string{a.Fleet})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(reply)
}

// claim marks an action on fleet under way; false when one already is, or
// maxActions are.
func (s *Server) claim(fleet string) bool {
	s.actMu.Lock()
	defer s.actMu.Unlock()
	if s.inAction[fleet] || len(s.inAction) >= maxActions {
		return false
	}
	s.inAction[fleet] = true
	return true
}

func (s *Server) release(fleet string) {
	s.actMu.Lock()
	defer s.actMu.Unlock()
	delete(s.inAction, fleet)
}
