package proxy

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/fleetmgr/fleetmgr/atomicfile"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation"
	"github.com/fleetmgr/fleetmgr/federation/catalogues"
	"github.com/fleetmgr/fleetmgr/registry"
)

// CallHandler returns what serves peers' tool calls and catalogues
// (federation.Config.Calls): a call goes to the local fleet's fleetd
// through the proxy's one call path (forwardCall: the fleet's
// call_timeout, metrics, progress, cancellation), as primary like every
// call fleetmgr makes; a catalogue is the fleet's tools as last listed
// (its catalogue.json), with the hash presence announces for it
// (Proxy.CatalogueHash). Only this host's own fleets are served: a peer cannot
// reach a third host through this one, nor call the manager's own
// fleetmgr_* tools.
func (p *Proxy) CallHandler() federation.CallHandler { return callHandler{p} }

type callHandler struct{ p *Proxy }

// peerProgressToken is the caller token of a peer's call inside this
// manager: the peer puts its own caller's token on what it relays.
const peerProgressToken = "peer"

// Call implements federation.CallHandler.
func (h callHandler) Call(ctx context.Context, from, fleet, tool string, args, meta json.RawMessage, progress func(json.RawMessage)) (json.RawMessage, error) {
	p := h.p
	if err := p.localFleet(fleet); err != nil {
		return nil, &federation.RPCError{Code: int(jsonrpc.CodeInvalidParams), Message: err.Error()}
	}
	c := toolCall{name: tool, peer: from, fleet: fleet, args: args}
	if len(meta) > 0 {
		if err := json.Unmarshal(meta, &c.meta); err != nil {
			return nil, &federation.RPCError{Code: int(jsonrpc.CodeInvalidParams), Message: "_meta: " + err.Error()}
		}
	}
	if progress != nil {
		c.progressToken = peerProgressToken
		c.progress = func(np *mcp.ProgressNotificationParams) {
			if b, err := json.Marshal(np); err == nil {
				progress(b)
			}
		}
	}
	r := p.forwardCall(ctx, &c)
	switch {
	case r.raw != nil:
		return r.raw, nil
	case r.result != nil:
		return json.Marshal(r.result) // fleetmgr's own tool error (fleet down, timeout …)
	case r.err != nil:
		if je, ok := r.err.(*jsonrpc.Error); ok {
			return nil, &federation.RPCError{Code: int(je.Code), Message: je.Message, Data: je.Data}
		}
		return nil, r.err
	}
	return nil, fmt.Errorf("fleet %s: %s: no result", fleet, tool)
}

// Catalogue implements federation.CallHandler.
func (h callHandler) Catalogue(_ context.Context, from, fleet string) (json.RawMessage, string, error) {
	p := h.p
	if err := p.localFleet(fleet); err != nil {
		return nil, "", err
	}
	tools, hash, ok := p.LocalCatalogue(fleet)
	if !ok {
		return nil, "", fmt.Errorf("fleet %s on host %s has no catalogue yet: it has not run since it was added", fleet, p.hostName())
	}
	return tools, hash, nil
}

// localFleet checks that fleet is one of this host's own fleets.
func (p *Proxy) localFleet(fleet string) error {
	f, err := p.opt.Manager.Fleet(fleet)
	if err != nil || f.Host != "" && f.Host != registry.LocalHost && f.Host != p.hostName() {
		return fmt.Errorf("host %s has no fleet %q", p.hostName(), fleet)
	}
	return nil
}

// hostName is this manager's host id, or "this host" without federation.
func (p *Proxy) hostName() string {
	if p.opt.Remote != nil {
		return p.opt.Remote.Host()
	}
	return "this host"
}

// LocalCatalogue returns fleet's tools as last listed (the JSON array
// its catalogue.json holds) and their SHA-256, the hash presence announces
// for it (CatalogueHash); ok is false when the fleet has never been
// listed. The file is written whole by a rename, so the bytes and their
// hash always belong together.
func (p *Proxy) LocalCatalogue(fleet string) (tools json.RawMessage, hash string, ok bool) {
	b, err := atomicfile.Read(p.catalogueCache(fleet), atomicfile.MaxCatalogue)
	if err != nil || !json.Valid(b) {
		return nil, "", false
	}
	b = p.servedCatalogue(fleet, b)
	return b, catalogues.Sum(b), true
}
