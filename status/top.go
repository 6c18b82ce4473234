package status

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/fleetmgr/fleetmgr/resources"
	"github.com/fleetmgr/fleetmgr/termtext"
)

// RenderTop writes one frame of `fleetmgr top`: the screen cleared and the
// cursor homed, then fleets sorted by CPU (highest first, then by name),
// each with its members sorted the same way: CPU, MEM, verdict and the
// age of the last change; lines end in "\r\n" (the terminal is in raw
// mode) and are cut to width columns.
func RenderTop(w io.Writer, r *Report, width int) error {
	if width <= 0 {
		width = TableWidth
	}
	var b strings.Builder
	b.WriteString("\x1b[H\x1b[2J")
	line := func(format string, a ...any) {
		b.WriteString(fitWidth(fmt.Sprintf(format, a...), width))
		b.WriteString("\r\n")
	}
	line("fleetmgr top — %s, every %s; q quits", r.GeneratedAt.Local().Format("15:04:05"), fmtAge(float64(r.IntervalMS)/1000))
	line("%-24s %7s %7s  %-28s %s", "FLEET / MEMBER", "CPU", "MEM", "VERDICT", "LAST CHANGE")
	fleets := slices.Clone(r.Fleets)
	slices.SortStableFunc(fleets, func(a, b Fleet) int {
		if c := cmp.Compare(pctOf(b.Resources), pctOf(a.Resources)); c != 0 {
			return c
		}
		return cmp.Compare(a.Name, b.Name)
	})
	c := termtext.Cell
	for _, f := range fleets {
		verdict := string(f.Verdict)
		if f.Verdict == "" {
			verdict = summary(f)
		}
		line("%-24s %7s %7s  %-28s %s", c(f.Name), CPUText(f.Resources), MemText(f.Resources), c(verdict), c(f.State))
		members := slices.Clone(f.Members)
		slices.SortStableFunc(members, func(a, b Member) int {
			if c := cmp.Compare(pctOf(b.Resources), pctOf(a.Resources)); c != 0 {
				return c
			}
			return cmp.Compare(a.ID, b.ID)
		})
		for _, m := range members {
			last := "-"
			if m.LastChangeAgeS != nil {
				last = fmtAge(*m.LastChangeAgeS) + " ago"
			}
			line("  %-22s %7s %7s  %-28s %s", c(m.ID), CPUText(m.Resources), MemText(m.Resources), c(VerdictText(m)), last)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// pctOf is u's CPU percentage, -1 when not measured (sorted last).
func pctOf(u *resources.Usage) float64 {
	if u == nil || u.CPUPercent == nil {
		return -1
	}
	return *u.CPUPercent
}
