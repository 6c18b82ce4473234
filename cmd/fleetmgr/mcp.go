package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/spf13/cobra"
)

func (a *app) mcpCmd() *cobra.Command {
	var noStart bool
	cmd := &cobra.Command{
		Use:   "mcp",
		Args:  cobra.NoArgs,
		Short: "Bridge stdio to the running fleetmgr serve (for clients that mount a command)",
		Long: `Connect standard input/output to fleetmgr serve's unix socket ([manager] mcp_socket), for
MCP clients that mount a command:

  claude mcp add fleets -- fleetmgr mcp

If no daemon answers, it starts one with 'fleetmgr serve --detach' first (unless --no-start).
The daemon's guard checks this bridge process: run from inside a herdr pane it is refused.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.load()
			if err != nil {
				return err
			}
			conn, err := net.DialTimeout("unix", cfg.Manager.MCPSocket, time.Second)
			if err != nil {
				if noStart {
					return fmt.Errorf("no fleetmgr serve answers on %s (start one with: fleetmgr serve --detach)", cfg.Manager.MCPSocket)
				}
				fmt.Fprintf(a.stderr, "fleetmgr mcp: no daemon on %s; starting fleetmgr serve --detach\n", cfg.Manager.MCPSocket)
				da := *a
				da.stdout = a.stderr // keep stdout for the protocol
				if err := da.detach(cmd.Context(), cfg); err != nil {
					return err
				}
				if conn, err = net.DialTimeout("unix", cfg.Manager.MCPSocket, 2*time.Second); err != nil {
					return err
				}
			}
			return bridge(cmd.Context(), conn.(*net.UnixConn), os.Stdin, os.Stdout)
		},
	}
	cmd.Flags().BoolVar(&noStart, "no-start", false, "fail instead of starting a daemon when none runs")
	return cmd
}

// refusalCode is the JSON-RPC error code serve's unix mount sends, as its
// only line, to a peer the guard refused (the answer to the peer's first
// request, or with a null id; see refuseUnix).
const refusalCode = -32001

// bridge copies in → conn and conn → out until either side ends. When the
// daemon's first line is the guard's refusal it is passed on to the client
// and bridge returns an exit error (status 3) carrying the reason.
func bridge(ctx context.Context, conn *net.UnixConn, in io.Reader, out io.Writer) error {
	defer conn.Close()
	done := make(chan error, 2)
	refused := make(chan string, 1)
	go func() {
		_, err := io.Copy(conn, in)
		_ = conn.CloseWrite()
		done <- err
	}()
	go func() {
		br := bufio.NewReader(conn)
		first, err := br.ReadBytes('\n')
		if len(first) > 0 {
			var msg struct {
				Error *struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if json.Unmarshal(first, &msg) == nil && msg.Error != nil && msg.Error.Code == refusalCode {
				refused <- msg.Error.Message
			}
			if _, werr := out.Write(first); werr != nil {
				done <- werr
				return
			}
		}
		if err != nil {
			done <- nil
			return
		}
		_, err = io.Copy(out, br)
		done <- err
	}()
	var err error
	select {
	case <-ctx.Done():
		return nil
	case err = <-done:
		// Client closed stdin: wait briefly for the daemon's last replies.
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
	}
	select {
	case reason := <-refused:
		return &exitError{code: 3, err: errors.New(reason)}
	default:
	}
	return err
}
