package lifecycle

import (
	"bytes"
	"context"
	"io"
	"time"
)

// Timestamps in fleet logs (issue 24 item 14). The log pipe's copier
// begins every line it writes with the time it read it, in UTC with
// milliseconds and a space: "2026-12-03T09:19:10.123Z ". Readers strip
// it (LogTail, FollowLog: what fleetd and herdr printed, as before) or
// parse it (LogTailTimed, FollowLogTimed). A line without it (written
// before, or by a child appending to its log directly) has no time.

// logStampLayout is the layout of a line's timestamp; logStampLen its
// length with the space after it.
const (
	logStampLayout = "2006-01-02T15:04:05.000Z07:00"
	logStampLen    = len("2006-01-02T15:04:05.000Z ")
)

// LogLine is one line of a fleet's log with the time the log pipe read it
// (zero when the line has none).
type LogLine struct {
	Time time.Time
	Text string
}

// splitStamp parses a line's timestamp.
func splitStamp(l string) LogLine {
	if len(l) >= logStampLen && l[logStampLen-1] == ' ' && l[logStampLen-2] == 'Z' && l[4] == '-' && l[10] == 'T' {
		if t, err := time.Parse(logStampLayout, l[:logStampLen-1]); err == nil {
			return LogLine{Time: t, Text: l[logStampLen:]}
		}
	}
	return LogLine{Text: l}
}

// stampWriter writes to w what is written to it with a timestamp (now)
// at the start of every line.
type stampWriter struct {
	w       io.Writer
	now     func() time.Time
	midLine bool
}

func (s *stampWriter) Write(p []byte) (int, error) {
	var out bytes.Buffer
	out.Grow(len(p) + 64)
	stamp := s.now().UTC().Format(logStampLayout) + " "
	rest := p
	for len(rest) > 0 {
		if !s.midLine {
			out.WriteString(stamp)
		}
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			out.Write(rest)
			s.midLine = true
			break
		}
		out.Write(rest[:i+1])
		rest = rest[i+1:]
		s.midLine = false
	}
	if _, err := s.w.Write(out.Bytes()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// LogTailTimed is LogTail with each line's time.
func (m *Manager) LogTailTimed(name, proc string, n int) ([]LogLine, error) {
	if _, err := m.Fleet(name); err != nil {
		return nil, err
	}
	if err := checkLogProc(proc); err != nil {
		return nil, err
	}
	raw, err := readTailRaw(m.LogPath(name, proc), n)
	if err != nil {
		return nil, err
	}
	out := make([]LogLine, len(raw))
	for i, l := range raw {
		out[i] = splitStamp(l)
	}
	return out, nil
}

// FollowLogTimed is FollowLog handing each complete line, with its time,
// to each until ctx ends.
func (m *Manager) FollowLogTimed(ctx context.Context, name, proc string, each func(LogLine) error) error {
	lw := &lineWriter{each: func(l string) error { return each(splitStamp(l)) }}
	return m.followRaw(ctx, name, proc, lw)
}

// lineWriter hands each complete line written to it (without its
// newline) to each.
type lineWriter struct {
	each    func(string) error
	pending []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.pending = append(l.pending, p...)
	for {
		i := bytes.IndexByte(l.pending, '\n')
		if i < 0 {
			break
		}
		line := string(l.pending[:i])
		l.pending = l.pending[i+1:]
		if err := l.each(line); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// unstampWriter writes to w what is written to it without the timestamps
// at the starts of its lines (FollowLog's output is what the children
// printed).
type unstampWriter struct {
	w       io.Writer
	head    []byte // the start of a line, until it is known whether it has a stamp
	midLine bool
}

func (u *unstampWriter) Write(p []byte) (int, error) {
	var out bytes.Buffer
	rest := p
	for len(rest) > 0 {
		if !u.midLine {
			need := logStampLen - len(u.head)
			take := min(need, len(rest))
			if i := bytes.IndexByte(rest[:take], '\n'); i >= 0 {
				take = i + 1
			}
			u.head = append(u.head, rest[:take]...)
			rest = rest[take:]
			if len(u.head) < logStampLen && u.head[len(u.head)-1] != '\n' {
				continue // wait for more
			}
			if l := splitStamp(string(u.head)); l.Time.IsZero() {
				out.Write(u.head)
			} else {
				out.WriteString(l.Text)
			}
			u.midLine = u.head[len(u.head)-1] != '\n'
			u.head = u.head[:0]
			continue
		}
		i := bytes.IndexByte(rest, '\n')
		if i < 0 {
			out.Write(rest)
			break
		}
		out.Write(rest[:i+1])
		rest = rest[i+1:]
		u.midLine = false
	}
	if out.Len() > 0 {
		if _, err := u.w.Write(out.Bytes()); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}
