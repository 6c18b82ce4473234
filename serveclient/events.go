package serveclient

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/serveapi"
)

// Events reads the journal: through serve's fleetmgr_events when a serve
// runs for the state dir (it holds the file), else from the file itself.
// A NAME@HOST of another host is read from that host's journal through
// serve (the signed read path), so it needs a running serve.
func (c *Client) Events(ctx context.Context, args serveapi.EventsArgs) ([]journal.Event, error) {
	if _, err := args.Query(time.Now()); err != nil {
		return nil, err
	}
	sock := c.socket()
	if conn, err := net.DialTimeout("unix", sock, time.Second); err == nil {
		conn.Close()
		cs, err := c.session(ctx, sock, nil)
		if err != nil {
			return nil, err
		}
		defer cs.Close()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: serveapi.EventsTool, Arguments: args})
		if err != nil {
			return nil, err
		}
		if res.IsError {
			return nil, fmt.Errorf("%s: %s", serveapi.EventsTool, resultText(res))
		}
		var r serveapi.EventsResult
		if err := decodeStructured(res, &r); err != nil {
			return nil, fmt.Errorf("%s: unexpected result: %v", serveapi.EventsTool, err)
		}
		return r.Events, nil
	}
	for _, n := range args.Fleets {
		if isRemoteName(n) && c.cfg.Federation != nil {
			if _, host, _ := peerview.SplitRemote(n); host != c.cfg.Federation.Host {
				return nil, c.errNeedsServe(n)
			}
		}
	}
	path := serveapi.JournalPath(c.cfg)
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if !c.cfg.Manager.Journal {
			return nil, fmt.Errorf("no journal is kept: [manager] journal = false in %s", c.cfg.Path)
		}
		return []journal.Event{}, nil
	}
	j, err := journal.Open(journal.Options{Path: path, ReadOnly: true})
	if err != nil {
		return nil, err
	}
	defer j.Close()
	q, _ := args.Query(time.Now())
	return j.Query(q)
}

// NotifyTest runs fleetmgr_notify_test on the serve of the state dir
// (the sinks are reached from serve's environment, as real notifications
// are); ErrNoDaemon when none runs.
func (c *Client) NotifyTest(ctx context.Context, rule string) ([]serveapi.NotifyAttempt, error) {
	sock := c.socket()
	conn, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return nil, ErrNoDaemon
	}
	conn.Close()
	cs, err := c.session(ctx, sock, nil)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: serveapi.NotifyTestTool, Arguments: map[string]any{"rule": rule}})
	if err != nil {
		return nil, err
	}
	if res.IsError {
		return nil, errors.New(strings.TrimSpace(resultText(res)))
	}
	var r serveapi.NotifyTestResult
	if err := decodeStructured(res, &r); err != nil {
		return nil, fmt.Errorf("%s: unexpected result: %v", serveapi.NotifyTestTool, err)
	}
	return r.Attempts, nil
}
