package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/fleetmgr/fleetmgr/cmdutil"
	"github.com/fleetmgr/fleetmgr/federation/peerview"
	"github.com/fleetmgr/fleetmgr/iostreams"
	"github.com/fleetmgr/fleetmgr/journal"
	"github.com/fleetmgr/fleetmgr/notify"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/serveapi"
	"github.com/fleetmgr/fleetmgr/serveclient"
	"github.com/fleetmgr/fleetmgr/termtext"
)

// EventsOptions are `fleetmgr events`' flags.
type EventsOptions struct {
	f            *cmdutil.Factory
	Fleets       []string
	Kinds        []string
	Since, Until string
	Follow, JSON bool
	Limit        int
}

// NewCmdEvents is `fleetmgr events` (serveclient.Client.Events).
func NewCmdEvents(f *cmdutil.Factory, runF func(*EventsOptions) error) *cobra.Command {
	opts := &EventsOptions{f: f}
	cmd := &cobra.Command{
		Use:     "events [NAME…]",
		Short:   "Show the journal: what happened to the fleets, who asked, what it cost",
		Long:    help("events"),
		Example: "  fleetmgr events\n  fleetmgr events kb --since 1h\n  fleetmgr events --kind fleet.restart --kind control\n  fleetmgr events kb -f --json",
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.Fleets = args
			return cmdutil.Run(cmd, f, opts, runF, runEvents)
		},
		ValidArgsFunction: f.CompleteFleets(false, true),
	}
	cmd.Flags().StringSliceVar(&opts.Kinds, "kind", nil, "only events of this kind (repeatable; a prefix such as member selects member.*)")
	cmd.Flags().StringVar(&opts.Since, "since", "", "oldest event: a duration back (1h, 30m) or a time (2026-12-03T09:00:00Z)")
	cmd.Flags().StringVar(&opts.Until, "until", "", "events before this: a duration back or a time")
	cmd.Flags().BoolVarP(&opts.Follow, "follow", "f", false, "keep printing new events until Ctrl-C")
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "print JSON (an array; one object per line with -f)")
	cmd.Flags().IntVarP(&opts.Limit, "lines", "n", 0, "newest events shown (default 1000)")
	return cmd
}

func runEvents(ctx context.Context, opts *EventsOptions, ios *iostreams.IOStreams) error {
	cfg, c, err := opts.f.ClientInForce()
	if err != nil {
		return err
	}
	args := serveapi.EventsArgs{Fleets: opts.Fleets, Kinds: opts.Kinds, Since: opts.Since, Until: opts.Until, Limit: opts.Limit}
	if _, err := args.Query(time.Now()); err != nil {
		return &cmdutil.ExitError{Code: 2, Err: err}
	}
	if opts.Follow {
		for _, n := range opts.Fleets {
			if _, host, ok := peerview.SplitRemote(n); ok && (cfg.Federation == nil || host != cfg.Federation.Host) {
				return &cmdutil.ExitError{Code: 2, Err: fmt.Errorf("events %s: -f is not available for a fleet of another host (each look would be a signed request to %s): run `fleetmgr events %s --since 10m` again, or `fleetmgr events %s -f` on %s itself", n, host, n, strings.SplitN(n, "@", 2)[0], host)}
			}
		}
	}
	ev, err := c.Events(ctx, args)
	if err != nil {
		return err
	}
	if err := unknownEventsFleets(ctx, cfg, c, opts.Fleets, ev); err != nil {
		return err
	}
	if !opts.Follow {
		if opts.JSON {
			return cmdutil.PrintJSON(ios.Out, ev)
		}
		printEvents(ios.Out, ev)
		return nil
	}
	print := func(ev []journal.Event) error {
		if !opts.JSON {
			printEvents(ios.Out, ev)
			return nil
		}
		for _, e := range ev {
			b, err := json.Marshal(e)
			if err != nil {
				return err
			}
			fmt.Fprintf(ios.Out, "%s\n", termtext.JSON(b))
		}
		return nil
	}
	if err := print(ev); err != nil {
		return err
	}
	var last uint64
	if len(ev) > 0 {
		last = ev[len(ev)-1].Seq
	}
	args.Since, args.Until, args.Limit = "", "", 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
		args.After = last
		ev, err := c.Events(ctx, args)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if len(ev) > 0 {
			last = ev[len(ev)-1].Seq
		}
		if err := print(ev); err != nil {
			return err
		}
	}
}

// unknownEventsFleets refuses (exit 2) a fleet name of this host that the
// config in force does not define and the journal never heard of: a typo
// would otherwise print nothing, as a quiet fleet does. A fleet removed
// from the config whose events the journal still holds is shown, and so
// is a NAME@HOST (its host judges it). seen are the events the query
// found: a name among them is known.
func unknownEventsFleets(ctx context.Context, cfg *registry.Config, c cmdutil.Client, names []string, seen []journal.Event) error {
	var unknown []string
	for _, n := range names {
		if slices.ContainsFunc(seen, func(e journal.Event) bool { return e.Fleet == n }) {
			continue
		}
		if _, _, remote := peerview.SplitRemote(n); remote {
			continue
		}
		if _, ok := cfg.Fleets[n]; ok || slices.Contains(unknown, n) {
			continue
		}
		ev, err := c.Events(ctx, serveapi.EventsArgs{Fleets: []string{n}, Limit: 1})
		if err != nil {
			return err
		}
		if len(ev) == 0 {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	known := "it defines no fleets"
	if names := cfg.Names(); len(names) > 0 {
		known = "it defines " + strings.Join(names, ", ")
	}
	return &cmdutil.ExitError{Code: 2, Err: fmt.Errorf("unknown fleet %s: not in %s (%s) and the journal holds no event of it",
		strings.Join(quoteAll(unknown), ", "), cfg.Path, known)}
}

// quoteAll is each of s in Go quotes.
func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[i] = strconv.Quote(v)
	}
	return out
}

// printEvents prints one line per event: time, fleet, kind, outcome,
// origin and detail.
func printEvents(w io.Writer, ev []journal.Event) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, e := range ev {
		who := e.Fleet
		if e.Member != "" {
			who += "/" + e.Member
		}
		if who == "" {
			who = "-"
		}
		detail := e.Detail
		if e.Kind == journal.KindCall {
			detail = fmt.Sprintf("%s %vms %vB", e.Detail, e.Data["duration_ms"], e.Data["result_bytes"])
		}
		if from, ok := e.Data["from"].(string); ok && e.Kind != journal.KindCall {
			detail = strings.TrimSpace("from " + from + " " + detail)
		}
		origin := e.Origin
		if origin != "" {
			origin = "by " + origin
		}
		outcome, rest := splitOutcome(e.Outcome)
		if rest != "" {
			detail = strings.TrimSuffix(rest+"; "+detail, "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format("2006-01-02 15:04:05"), termtext.Cell(who), e.Kind, termtext.Cell(outcome),
			termtext.Cell(strings.TrimSpace(detail+" "+origin)))
	}
	tw.Flush()
}

// outcomeWidth is the most runes the events table's OUTCOME column
// takes: a longer outcome ("error: port 4100 taken", "failed: …") would
// widen the column for every row.
const outcomeWidth = 12

// splitOutcome is an event's outcome as the OUTCOME column shows it and
// what is left for the DETAIL column: a short outcome whole; a long one's
// word before ": " ("error", "failed") with its text as the rest; else
// cut, with the whole outcome as the rest.
func splitOutcome(o string) (short, rest string) {
	if utf8.RuneCountInString(o) <= outcomeWidth {
		return o, ""
	}
	if head, tail, ok := strings.Cut(o, ": "); ok && utf8.RuneCountInString(head) <= outcomeWidth {
		return head, tail
	}
	r := []rune(o)
	return string(r[:outcomeWidth-1]) + "…", o
}

// NotifyOptions are `fleetmgr notify test`'s.
type NotifyOptions struct {
	f    *cmdutil.Factory
	Rule string
	JSON bool
}

// NewCmdNotify is `fleetmgr notify` with its verb test.
func NewCmdNotify(f *cmdutil.Factory, runF func(*NotifyOptions) error) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "notify",
		Short: "Notifications ([[notify]] rules)",
		Long:  help("notify"),
		Args:  cobra.NoArgs,
	}
	opts := &NotifyOptions{f: f}
	test := &cobra.Command{
		Use:     "test [RULE]",
		Short:   "Send a test notification through every sink of a rule (every rule by default)",
		Long:    help("notify-test"),
		Args:    cobra.MaximumNArgs(1),
		Example: "  fleetmgr notify test\n  fleetmgr notify test needs-me",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				opts.Rule = args[0]
			}
			return cmdutil.Run(cmd, f, opts, runF, runNotifyTest)
		},
	}
	test.Flags().BoolVar(&opts.JSON, "json", false, "print JSON")
	cmd.AddCommand(test)
	return cmd
}

// runNotifyTest sends through serve when one runs (its environment is
// the one real notifications use), else from this process.
func runNotifyTest(ctx context.Context, opts *NotifyOptions, ios *iostreams.IOStreams) error {
	cfg, c, err := opts.f.Client()
	if err != nil {
		return err
	}
	at, err := c.NotifyTest(ctx, opts.Rule)
	via := "serve"
	if errors.Is(err, serveclient.ErrNoDaemon) {
		via = "this process (no serve runs)"
		n := notify.New(notify.Options{Rules: func() []registry.Notify { return cfg.Notify }})
		nctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); n.Run(nctx) }()
		var raw []notify.Attempt
		raw, err = n.Test(ctx, opts.Rule)
		cancel()
		<-done
		at = serveapi.NotifyAttemptsOf(raw)
	}
	if err != nil {
		return err
	}
	if opts.JSON {
		return cmdutil.PrintJSON(ios.Out, at)
	}
	failed := 0
	fmt.Fprintf(ios.Out, "sent from %s:\n", via)
	for _, a := range at {
		if a.OK {
			fmt.Fprintf(ios.Out, "  %s %s: ok\n", a.Rule, a.Sink)
			continue
		}
		failed++
		fmt.Fprintf(ios.Out, "  %s %s: FAILED: %s\n", a.Rule, a.Sink, termtext.Cell(a.Error))
	}
	if failed > 0 {
		return &cmdutil.ExitError{Code: 1, Err: fmt.Errorf("%d of %d sinks failed", failed, len(at))}
	}
	return nil
}
