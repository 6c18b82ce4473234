package status

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/registry"
	"github.com/fleetmgr/fleetmgr/resources"
	"github.com/fleetmgr/fleetmgr/termtext"
)

// ANSI colours used by Render; every code is 5 bytes so a coloured column
// stays aligned in a tabwriter.
const (
	colRed     = "\x1b[31m"
	colGreen   = "\x1b[32m"
	colYellow  = "\x1b[33m"
	colMagenta = "\x1b[35m"
	colCyan    = "\x1b[36m"
	colGrey    = "\x1b[90m"
	colDefault = "\x1b[39m"
)

// VerdictText is how a member's verdict reads in the table:
// "WORKING (files,output)", "STALLED 4m12s", "UNKNOWN: pane w1:p3 gone".
func VerdictText(m Member) string {
	switch m.Verdict {
	case Working:
		return "WORKING (" + strings.Join(m.Evidence, ",") + ")"
	case Stalled:
		if m.LastChangeAgeS != nil {
			return "STALLED " + fmtAge(*m.LastChangeAgeS)
		}
		return "STALLED"
	case Unknown:
		return "UNKNOWN: " + m.Reason
	}
	return string(m.Verdict)
}

func fmtAge(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func colourOf(v Verdict) string {
	switch v {
	case Working:
		return colGreen
	case Stalled:
		return colYellow
	case Blocked:
		return colMagenta
	case Unknown:
		return colRed
	case Remote:
		return colCyan
	case Idle:
		return colGrey
	}
	return colDefault
}

// RenderFrame is Render for one report of a series (`fleetmgr status
// --watch`): with inPlace (a terminal) it first homes the cursor and
// clears the screen, so that each report replaces the last; otherwise the
// reports after the first are parted by a blank line.
// wide picks the long form (Render) over the one that fits TableWidth
// columns (RenderNarrow).
func RenderFrame(w io.Writer, r *Report, first, inPlace, colour, wide bool) error {
	switch {
	case inPlace:
		fmt.Fprint(w, "\x1b[H\x1b[2J") // cursor home (CUP), erase display (ED 2)
	case !first:
		fmt.Fprintln(w)
	}
	if wide {
		return Render(w, r, colour)
	}
	return RenderNarrow(w, r, colour)
}

// TableWidth is the most columns a line of RenderNarrow takes.
const TableWidth = 120

// RenderNarrow is `fleetmgr status`'s default table: fleet and member
// rows with state, verdict, pid or pane, uptime, restarts, CPU and
// resident memory (CPUText, MemText) and the detail,
// every line cut to TableWidth columns (a cut line is cut at a word and
// ends in "… (--wide)"); the
// health, herdr, broker and member-count columns are Render's (--wide)
// and the JSON's.
func RenderNarrow(w io.Writer, r *Report, colour bool) error {
	paint := painter(colour)
	if r.Supervision != "" {
		fmt.Fprintln(w, fitWidth(r.Supervision, TableWidth))
	}
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLEET / MEMBER\tSTATE\tVERDICT\tPID / PANE\tUPTIME\tRESTARTS\tCPU\tMEM\tDETAIL")
	c := termtext.Cell
	for _, f := range r.Fleets {
		verdict, pid, up := fleetCells(f)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", c(f.Name), c(f.State), paint(f.Verdict, c(verdict)),
			pid, up, f.Restarts, CPUText(f.Resources), MemText(f.Resources), c(fleetDetail(f, r.GeneratedAt)))
		for _, m := range f.Members {
			detail := m.Reason
			if m.Verdict == Unknown {
				detail = ""
			}
			if m.Verdict == Working && m.LastChangeAgeS != nil {
				detail = "last change " + fmtAge(*m.LastChangeAgeS) + " ago"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t\t\t%s\t%s\t%s\n", c(m.ID), c(orDash(m.State)), paint(m.Verdict, c(VerdictText(m))),
				c(orDash(m.PaneID)), CPUText(m.Resources), MemText(m.Resources), c(detail))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, l := range strings.SplitAfter(buf.String(), "\n") {
		if l == "" {
			continue
		}
		fmt.Fprintln(w, fitWidth(strings.TrimSuffix(l, "\n"), TableWidth))
	}
	renderFederation(w, r.Federation)
	renderNotifyFailing(w, r.NotifyFailing)
	return footer(w, r)
}

// painter colours a verdict's text for a terminal (colour), or leaves
// it plain (pipes and files).
func painter(colour bool) func(Verdict, string) string {
	return func(v Verdict, s string) string {
		if !colour {
			return s
		}
		return colourOf(v) + s + colDefault
	}
}

// fleetCells are a fleet row's verdict (its own, else the members'
// summary), pid and uptime cells, "-" where there is none: the same in
// the narrow and the wide table.
func fleetCells(f Fleet) (verdict, pid, up string) {
	verdict, pid, up = string(f.Verdict), "-", "-"
	if f.Verdict == "" {
		verdict = summary(f)
	}
	if f.PID != 0 {
		pid = fmt.Sprint(f.PID)
	}
	if f.UptimeS > 0 {
		up = (time.Duration(f.UptimeS) * time.Second).String()
	}
	return verdict, pid, up
}

// footer is the table's last line: how and when the report was made.
func footer(w io.Writer, r *Report) error {
	if r.Cached {
		_, err := fmt.Fprintf(w, "verdicts of fleetmgr serve's last sampling, %s old (%s apart, at %s); --fresh samples anew\n",
			fmtAge(float64(r.AgeMS)/1000), time.Duration(r.IntervalMS)*time.Millisecond, r.GeneratedAt.Local().Format("15:04:05"))
		return err
	}
	_, err := fmt.Fprintf(w, "sampled %s apart in %.1fs via %s at %s\n", time.Duration(r.IntervalMS)*time.Millisecond,
		float64(r.ElapsedMS)/1000, r.Via, r.GeneratedAt.Local().Format("15:04:05"))
	return err
}

// cutMark ends a line RenderNarrow cut: the rest is in the wide table.
const cutMark = "… (--wide)"

// fitWidth cuts line to width visible columns (ANSI colour sequences take
// none): a longer line is cut at a word (the last space within 30
// columns of the limit, else at the limit), ends in cutMark, which points
// to `status --wide` where the line is whole, and has its colour reset.
func fitWidth(line string, width int) string {
	if utf8.RuneCountInString(stripANSI(line)) <= width {
		return line
	}
	limit := width - utf8.RuneCountInString(cutMark)
	cols, inEsc := 0, false
	cut, space, spaceCol := len(line), -1, 0
	for i, r := range line {
		switch {
		case inEsc:
			inEsc = r != 'm'
			continue
		case r == '\x1b':
			inEsc = true
			continue
		}
		if cols == limit {
			cut = i
			break
		}
		if r == ' ' {
			space, spaceCol = i, cols
		}
		cols++
	}
	if space > 0 && spaceCol >= limit-30 && cut < len(line) && line[cut] != ' ' {
		cut = space
	}
	out := strings.TrimRight(line[:cut], " ;,") + cutMark
	if strings.Contains(line, "\x1b[") {
		out += colDefault
	}
	return out
}

// stripANSI is s without its ANSI colour sequences.
func stripANSI(s string) string {
	var b strings.Builder
	inEsc := false
	for _, r := range s {
		switch {
		case inEsc:
			inEsc = r != 'm'
		case r == '\x1b':
			inEsc = true
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Render writes r as a table: one row per fleet, its members indented
// below it. With colour, verdicts are coloured (for a terminal); without,
// the output is plain text (for pipes and files).
func Render(w io.Writer, r *Report, colour bool) error {
	paint := painter(colour)
	if r.Supervision != "" {
		fmt.Fprintln(w, r.Supervision)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLEET / MEMBER\tSTATE\tVERDICT\tPID / PANE\tUPTIME / LIVE\tRESTARTS / AGENT\tCPU\tMEM\tPROCS\tFDS\tPANE AGE\tHEALTHZ\tHERDR\tBROKER\tMEMBERS\tDETAIL")
	for _, f := range r.Fleets {
		verdict, pid, up := fleetCells(f)
		health, herdr, broker := "-", "-", "-"
		if f.Health != nil {
			if f.Health.OK {
				health = fmt.Sprintf("%.1fms", f.Health.LatencyMS)
			} else {
				health = "down"
			}
		}
		if f.Herdr != nil {
			herdr = "dead"
			if f.Herdr.Alive {
				herdr = "alive"
				if f.Herdr.Protocol > 0 {
					herdr = fmt.Sprintf("alive (%s, p%d)", f.Herdr.Version, f.Herdr.Protocol)
				}
				if u := f.Herdr.Updates; u != nil && u.Mode == UpdatesEvents { // followed from herdr's push
					if f.Herdr.Protocol > 0 {
						herdr = fmt.Sprintf("alive (%s, p%d, events)", f.Herdr.Version, f.Herdr.Protocol)
					} else {
						herdr = "alive (events)"
					}
				}
			}
		}
		if f.Broker != nil {
			broker = brokerText(f.Broker)
		}
		members := "-"
		if f.MemberCount >= 0 {
			members = fmt.Sprint(f.MemberCount)
		}
		detail := fleetDetail(f, r.GeneratedAt)
		// Every text from a fleet or a peer host is escaped: a member's
		// id, a roster field or a peer's error must not act on the
		// operator's terminal (docs/SECURITY.md "Text from fleets and peers").
		c := termtext.Cell
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t-\t%s\t%s\t%s\t%s\t%s\n", c(f.Name), c(f.State), paint(f.Verdict, c(verdict)),
			pid, up, f.Restarts, CPUText(f.Resources), MemText(f.Resources), procsText(f.Resources), fdsText(f.Resources),
			health, c(herdr), c(broker), members, c(detail))
		for _, m := range f.Members {
			detail := m.Reason
			if m.Verdict == Unknown {
				detail = ""
			}
			if m.Verdict == Working && m.LastChangeAgeS != nil {
				detail = "last change " + fmtAge(*m.LastChangeAgeS) + " ago"
			}
			paneAge := "-"
			if m.PaneAgeS != nil {
				paneAge = fmtAge(*m.PaneAgeS)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\t\t\t\t%s\n", c(m.ID), c(orDash(m.State)), paint(m.Verdict, c(VerdictText(m))),
				c(orDash(m.PaneID)), c(orDash(m.LiveStatus)), c(orDash(m.AgentStatus)),
				CPUText(m.Resources), MemText(m.Resources), procsText(m.Resources), fdsText(m.Resources), paneAge, c(detail))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	renderFederation(w, r.Federation)
	renderNotifyFailing(w, r.NotifyFailing)
	return footer(w, r)
}

// CPUText is a CPU column's cell: the percentage of one core used over
// the status's interval ("12.5%", "150%" for 1.5 cores), "-" when not
// measured (no resources, or no earlier read of /proc saw the processes).
func CPUText(u *resources.Usage) string {
	if u == nil || u.CPUPercent == nil {
		return "-"
	}
	if *u.CPUPercent >= 100 {
		return fmt.Sprintf("%.0f%%", *u.CPUPercent)
	}
	return fmt.Sprintf("%.1f%%", *u.CPUPercent)
}

// MemText is a MEM column's cell: the resident memory in binary units
// ("812K", "210M", "1.5G"), "-" when not measured.
func MemText(u *resources.Usage) string {
	if u == nil {
		return "-"
	}
	b := float64(u.RSSBytes)
	for _, unit := range []string{"K", "M", "G"} {
		b /= 1024
		if b < 1024 || unit == "G" {
			if b < 10 && unit != "K" {
				return fmt.Sprintf("%.1f%s", b, unit)
			}
			return fmt.Sprintf("%.0f%s", b, unit)
		}
	}
	return "-"
}

func procsText(u *resources.Usage) string {
	if u == nil {
		return "-"
	}
	return fmt.Sprint(u.Procs)
}

func fdsText(u *resources.Usage) string {
	if u == nil {
		return "-"
	}
	return fmt.Sprint(u.FDs)
}

// fleetDetail is a fleet row's DETAIL: why it could not be probed, then
// supervision, each part only when set: for a fleet whose start did not
// become healthy, what happens next (WhatNext, one sentence that stands
// for the restart, crash-loop and error parts); "restarting in 4s (reason: …)" for
// a pending restart (now is when the report was made), else "last
// restart: …"; "last exit: …" (left out when the restart reason already
// says it); for a fleet the supervisor gave up on, "crash loop: …" (its
// error, which names the last failure, so the two before are left out);
// "last error: …" while not running; "not in fleets.toml any more" for a
// fleet removed from the file while it ran; "restart pending (KEYS
// changed)"; "schema drift: TOOL, …" naming the
// tools whose schema differs from other fleets' (the sentences are in the
// JSON); "tools not exposed: TOOL, …" and "schemas relaxed: TOOL, …"
// (ExcludedTools, RelaxedTools; the reasons are in the JSON).
func fleetDetail(f Fleet, now time.Time) string {
	var detail []string
	if f.Error != "" {
		detail = append(detail, f.Error)
	}
	if rf := f.Remote; rf != nil && f.Verdict == "" {
		seen := "on " + f.Host
		if rf.BeatAgeS != nil {
			seen += ": last beat " + fmtAge(*rf.BeatAgeS) + " ago"
		}
		if rf.VerdictsAgeS != nil {
			seen += fmt.Sprintf(", verdicts %s old", fmtAge(float64(*rf.VerdictsAgeS)))
		}
		detail = append(detail, seen)
	}
	// What the last restart ended comes first: the compact table cuts
	// the detail to fit, and no loss is silent.
	if lost := lifecycle.LostSentence(f.LastRestartLost); lost != "" {
		detail = append(detail, lost)
	}
	// A start that did not become healthy: what happens next, in its one
	// sentence, which says the cause, the pending retry (or that there is
	// none) and the way out, so the restart, crash loop and error parts
	// below would repeat it. A crash loop (of failed starts) keeps its
	// own part, which says the same and fits the compact table.
	if f.WhatNext != "" && !f.CrashLoop {
		detail = append(detail, f.WhatNext)
		// Of the error only a herdr session the failure left running
		// (lifecycle.Shown.HerdrLeft's text) is news.
		left := ""
		if i := strings.LastIndex(f.LastError, "herdr session "); i >= 0 && strings.Contains(f.LastError[i:], " still runs (pid ") {
			left = f.LastError[i:]
		}
		f.LastRestartReason, f.NextRestartAt, f.LastError, f.CrashLoop = "", time.Time{}, left, false
	}
	if p := f.RestartPolicy; p != "" && p != string(registry.RestartAlways) {
		detail = append(detail, "restart = "+p)
	}
	lastError := f.LastError
	switch f.State {
	case "running":
		lastError = ""
	case string(lifecycle.PhaseStale):
		// Why the record is stale comes first, as it is: it is the
		// fleet's state, not an error of a past start.
		detail = append([]string{oneLine(lastError)}, detail...)
		lastError = ""
	}
	// A crash loop's error names the failure that ended it, which makes
	// the last restart's reason and exit redundant.
	crash, crashText := "", strings.HasPrefix(lastError, "crash loop: ")
	if f.CrashLoop {
		crash = "crash loop"
		if crashText {
			crash, lastError = crashLoopText(lastError), ""
		}
	}
	reason := oneLine(f.LastRestartReason)
	if !f.NextRestartAt.IsZero() {
		in := f.NextRestartAt.Sub(now).Seconds()
		when := "restarting in " + fmtAge(in)
		if in < 0 {
			when = "restart overdue by " + fmtAge(-in)
		}
		if reason != "" {
			when += " (reason: " + reason + ")"
		}
		detail = append(detail, when)
	} else if reason != "" && !(f.CrashLoop && crashText) {
		detail = append(detail, "last restart: "+reason)
	}
	if f.LastExit != "" && !strings.Contains(reason, f.LastExit) && !(f.CrashLoop && crashText) {
		detail = append(detail, "last exit: "+f.LastExit)
	}
	if crash != "" {
		detail = append(detail, crash)
	}
	if lastError != "" {
		detail = append(detail, "last error: "+oneLine(lastError))
	}
	if f.NotInConfig {
		if strings.Contains(lastError, " is no longer in ") {
			lastError = "" // says the same as the note below
		}
		detail = append(detail, "not in fleets.toml any more: `fleetmgr stop "+f.Name+"` stops it; never restarted")
	}
	if len(f.RestartPending) > 0 {
		detail = append(detail, "restart pending ("+strings.Join(f.RestartPending, ", ")+" changed): `fleetmgr restart "+f.Name+"` applies it")
	}
	if len(f.SchemaDrift) > 0 {
		tools := make([]string, len(f.SchemaDrift))
		for i, d := range f.SchemaDrift {
			tools[i], _, _ = strings.Cut(d, ": ")
		}
		detail = append(detail, "schema drift: "+strings.Join(tools, ", ")+" (--json or fleetmgr check says how)")
	}
	for _, part := range []struct {
		label string
		notes []ToolNote
	}{{"tools not exposed", f.ExcludedTools}, {"schemas relaxed", f.RelaxedTools}} {
		if len(part.notes) > 0 {
			tools := make([]string, len(part.notes))
			for i, n := range part.notes {
				tools[i] = n.Tool
			}
			detail = append(detail, part.label+": "+strings.Join(tools, ", ")+" (--json or fleetmgr check says why)")
		}
	}
	if f.Herdr != nil && f.Herdr.Warning != "" {
		detail = append(detail, fmt.Sprintf("untested herdr protocol %d (fleetmgr check says more)", f.Herdr.Protocol))
	}
	return strings.Join(detail, "; ")
}

func brokerText(b *Broker) string {
	switch {
	case !b.Configured:
		return "none"
	case !b.Reachable:
		return "unreachable"
	}
	total := 0
	for _, n := range b.Inboxes {
		total += n
	}
	return fmt.Sprintf("ok (%d queued)", total)
}

// summary counts a fleet's member verdicts: "2 WORKING, 1 STALLED".
func summary(f Fleet) string {
	if len(f.Summary) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(f.Summary))
	for v := range f.Summary {
		keys = append(keys, string(v))
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", f.Summary[Verdict(k)], k))
	}
	return strings.Join(parts, ", ")
}

// crashLoopText is a crash loop's error cut to fit the table: what failed
// is shortened, never the end that says how to get out of it ("not
// restarting until `fleetmgr start NAME` or `fleetmgr restart NAME`").
func crashLoopText(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	const way = "; not restarting until "
	if i := strings.LastIndex(s, way); i >= 0 {
		return oneLine(s[:i]) + s[i:]
	}
	return oneLine(s)
}

// oneLine is the first line of s, cut to 120 bytes (between characters).
func oneLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 120 {
		cut := 117
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}

// renderNotifyFailing writes one line per failing notification sink.
func renderNotifyFailing(w io.Writer, fs []FailingSink) {
	for _, f := range fs {
		fmt.Fprintln(w, termtext.Line(FailingSinkLine(f)))
	}
}
