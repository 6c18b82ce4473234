package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/serveclient"
	"github.com/fleetmgr/fleetmgr/status"
)

// TopOptions are `fleetmgr top`'s.
type TopOptions struct {
	f        *cmdutil.Factory
	Names    []string
	Interval time.Duration
}

// NewCmdTop is `fleetmgr top`: fleets and members sorted by CPU, refreshed
// in place (serveclient.Client.Watch, printed by status.RenderTop) until q.
func NewCmdTop(f *cmdutil.Factory, runF func(*TopOptions) error) *cobra.Command {
	opts := &TopOptions{f: f}
	cmd := &cobra.Command{
		Use:               "top [NAME…]",
		Short:             "Live view of fleets and members by CPU and memory, with verdicts (q quits)",
		Long:              help("top"),
		Example:           "  fleetmgr top\n  fleetmgr top kb --interval 2s",
		ValidArgsFunction: f.CompleteFleets(false, true),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Names = args
			if cmd.Flags().Changed("interval") && opts.Interval <= 0 {
				return cmdutil.UsageError(cmd, fmt.Errorf("--interval must be positive, e.g. 2s, not %s", opts.Interval))
			}
			return cmdutil.Run(cmd, f, opts, runF, runTop)
		},
	}
	cmd.Flags().DurationVar(&opts.Interval, "interval", 0, "time between refreshes, and between a busy member's two samples (default [status] interval, 3s)")
	return cmd
}

func runTop(ctx context.Context, opts *TopOptions, ios *iostreams.IOStreams) error {
	in, ok := ios.In.(*os.File)
	out, ok2 := ios.Out.(*os.File)
	if !ok || !ok2 || !term.IsTerminal(int(in.Fd())) || !term.IsTerminal(int(out.Fd())) {
		return errors.New("fleetmgr top needs a terminal on stdin and stdout (fleetmgr status --watch or --json otherwise)")
	}
	cfg, c, err := opts.f.ClientInForce()
	if err != nil {
		return err
	}
	old, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return fmt.Errorf("fleetmgr top: raw mode: %w", err)
	}
	defer term.Restore(int(in.Fd()), old)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The key reader: q (or Ctrl-C, which raw mode delivers as a byte)
	// ends the view. runTop owns it: it stops once the view ends, and
	// runTop returns only after it has.
	keysDone := make(chan struct{})
	defer func() { cancel(); <-keysDone }()
	go func() {
		defer close(keysDone)
		if err := readKeys(ctx, int(in.Fd()), cancel); err != nil {
			cancel()
		}
	}()
	fmt.Fprint(out, "\x1b[?25l") // hide the cursor while the view runs
	defer fmt.Fprint(out, "\x1b[?25h\r\n")
	req := serveclient.StatusRequest{Fleets: opts.Names, Interval: opts.Interval, Fresh: true}
	if in := opts.f.InForce; in != nil {
		req.ConfigError = in.Err
	}
	req.BeforeLocal = func() error { return opts.f.RefuseInPane(ctx, cfg, "read the status of") }
	err = c.Watch(ctx, req, true, func(rep *status.Report, first bool) error {
		width, _, err := term.GetSize(int(out.Fd()))
		if err != nil {
			width = status.TableWidth
		}
		return status.RenderTop(out, rep, width)
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// readKeys reads keys from fd until q, Q or Ctrl-C (byte 3) is typed,
// then calls quit; it returns when ctx ends as well, without waiting for
// a key: it waits in poll(2) on fd and on a pipe that ctx's end closes,
// so it never sits in a read nobody can interrupt. An error reading fd
// (the terminal went away) is returned.
func readKeys(ctx context.Context, fd int, quit func()) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	stop := context.AfterFunc(ctx, func() { _ = w.Close() })
	defer func() {
		if stop() {
			_ = w.Close()
		}
	}()
	b := make([]byte, 16)
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(r.Fd()), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return fmt.Errorf("poll the terminal: %w", err)
		}
		if fds[1].Revents != 0 || ctx.Err() != nil {
			return nil
		}
		if fds[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR) == 0 {
			continue
		}
		n, err := unix.Read(fd, b)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil || n == 0 {
			return fmt.Errorf("read the terminal: %v", cmp.Or(err, io.EOF))
		}
		for _, k := range b[:n] {
			if k == 'q' || k == 'Q' || k == 3 {
				quit()
				return nil
			}
		}
	}
}
