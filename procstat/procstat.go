// Package procstat parses a process's /proc/PID/stat line (proc(5))
// without reflection or allocation, for readers that parse it hundreds of
// times a second (package resources samples every process of the fleets'
// trees per status, watch frame and scrape).
//
// It exists beside github.com/prometheus/procfs, which parses the same
// line with fmt.Fscan: about 25 µs per process on the machine issue 28's
// cost target was measured on, where this package's Parse and the
// kernel's read together cost about 11 µs. Everything else fleetmgr reads
// from /proc goes through prometheus/procfs (package procfs says what).
// The differential fuzz test FuzzParseAgreesWithPrometheus holds the two
// to the same answer: whatever Parse accepts, prometheus/procfs accepts
// with the same value in every field Stat has, and a line in the kernel's
// own format that prometheus/procfs accepts, Parse accepts.
package procstat

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// Stat is the part of /proc/PID/stat fleetmgr reads (proc(5) field
// numbers): fleetmgr's one type for the line (package procfs names it
// procfs.Stat for process identity and the guard's parent chains; package
// resources reads CPU, memory and threads from it).
type Stat struct {
	// PID is field 1.
	PID int
	// Comm is field 2 without its parentheses; it may hold spaces and
	// parentheses.
	Comm string
	// State is field 3, one of "RSDZTtWXxKWPI".
	State byte
	// PPID is field 4, the parent's pid (0 for pid 1 and kernel roots).
	PPID int
	// Pgrp is field 5, the process group id.
	Pgrp int
	// Session is field 6, the session id.
	Session int
	// TTYNr is field 7, the controlling terminal's device number (0: none).
	TTYNr int
	// TPGID is field 8, the terminal's foreground process group (-1: none).
	TPGID int
	// UTime and STime are fields 14 and 15, the CPU time the process
	// (all its threads, living and exited) spent in user and kernel mode,
	// in clock ticks (ClockTicks a second).
	UTime, STime uint
	// NumThreads is field 20.
	NumThreads int
	// StartTime is field 22, when the process started, in clock ticks
	// since boot: with PID it names one process for the life of a boot.
	StartTime uint64
	// RSS is field 24, resident memory in pages.
	RSS int
	// ExitSignal is field 38, the signal the parent gets when the
	// process ends; -1 for a thread that is not its group's leader (the
	// kernel sets it so for CLONE_THREAD), whose /proc/TID/stat, read by
	// its id, shows its whole group's times and memory as another
	// process would. prometheus/procfs reads the field but keeps it not.
	ExitSignal int
}

// ClockTicks is USER_HZ, the unit of UTime, STime and StartTime: 100 on
// every Linux architecture Go supports (sysconf(_SC_CLK_TCK)).
const ClockTicks = 100

// pageSize is the unit of RSS.
var pageSize = os.Getpagesize()

// StartedSinceBoot is StartTime as a Duration since boot (the clock of
// CLOCK_BOOTTIME).
func (s *Stat) StartedSinceBoot() time.Duration {
	return time.Duration(s.StartTime) * (time.Second / ClockTicks)
}

// CPUTime is UTime + STime in seconds.
func (s *Stat) CPUTime() float64 { return float64(s.UTime+s.STime) / ClockTicks }

// ResidentBytes is RSS in bytes, computed as prometheus/procfs's
// ResidentMemory is (an int product), never below 0.
func (s *Stat) ResidentBytes() uint64 { return uint64(max(s.RSS*pageSize, 0)) }

// minFields is how many fields after the command name (from field 3 on)
// a line must have: prometheus/procfs reads up to field 44 (cguest_time),
// present since Linux 2.6.24.
const minFields = 44 - 2

// ErrFormat is wrapped by every error Parse returns.
var ErrFormat = errors.New("procstat: malformed stat line")

// Parse parses the content of a /proc/PID/stat file. The command name is
// what lies between the first '(' and the last ')', since the name itself
// may hold both; the fields after it must be single-space separated
// decimal numbers (the state a single letter), as the kernel writes them.
// It never panics; errors wrap ErrFormat and name the field.
func Parse(data []byte) (Stat, error) {
	var s Stat
	l := bytes.IndexByte(data, '(')
	r := bytes.LastIndexByte(data, ')')
	if l < 0 || r < l {
		return s, fmt.Errorf("%w: no parenthesised command name", ErrFormat)
	}
	pid, ok := decimal(bytes.TrimSuffix(data[:l], []byte{' '}), false, strconv.IntSize-1)
	if !ok || pid == 0 {
		return s, fmt.Errorf("%w: field 1 (pid) %q is not a pid", ErrFormat, data[:l])
	}
	s.PID = int(pid)
	s.Comm = string(data[l+1 : r])
	rest := data[r+1:]
	rest = bytes.TrimSuffix(rest, []byte{'\n'})
	if len(rest) < 2 || rest[0] != ' ' {
		return s, fmt.Errorf("%w: nothing after the command name", ErrFormat)
	}
	rest = rest[1:]
	for field := 3; field < 3+minFields; field++ {
		i := bytes.IndexByte(rest, ' ')
		tok := rest
		if i >= 0 {
			tok, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		if len(tok) == 0 {
			return s, fmt.Errorf("%w: field %d is missing", ErrFormat, field)
		}
		if field == 3 {
			if len(tok) != 1 || !isLetter(tok[0]) {
				return s, fmt.Errorf("%w: field 3 (state) %q is not one letter", ErrFormat, tok)
			}
			s.State = tok[0]
			continue
		}
		var dst *int
		var udst *uint
		switch field {
		case 4:
			dst = &s.PPID
		case 5:
			dst = &s.Pgrp
		case 6:
			dst = &s.Session
		case 7:
			dst = &s.TTYNr
		case 8:
			dst = &s.TPGID
		case 14:
			udst = &s.UTime
		case 15:
			udst = &s.STime
		case 20:
			dst = &s.NumThreads
		case 22:
			v, ok := decimal(tok, false, 64)
			if !ok {
				return s, fmt.Errorf("%w: field 22 (starttime) %q", ErrFormat, tok)
			}
			s.StartTime = v
			continue
		case 24:
			dst = &s.RSS
		case 38:
			dst = &s.ExitSignal
		}
		// Fields Stat leaves out are checked all the same, with the
		// type prometheus/procfs scans them into, so that Parse accepts
		// no line it refuses.
		signed := field <= 8 || (field >= 16 && field <= 21) || field == 24 || field == 38 || field >= 43
		bits := strconv.IntSize // its int and uint fields
		if field == 21 || field == 22 || (field >= 25 && field <= 38) || field == 42 {
			bits = 64 // its int64 and uint64 ones
		}
		v, ok := decimal(tok, signed, bits)
		if !ok {
			return s, fmt.Errorf("%w: field %d %q is not a decimal number", ErrFormat, field, tok)
		}
		switch {
		case dst != nil:
			*dst = int(int64(v))
		case udst != nil:
			*udst = uint(v)
		}
	}
	return s, nil
}

// decimal parses tok as a decimal integer fitting in bits bits (signed:
// with an optional '-'), returning its two's-complement bits. Like the
// kernel, it writes no '+' and no leading zero (fmt.Fscan, which
// prometheus/procfs uses, would read "010" as octal).
func decimal(tok []byte, signed bool, bits int) (uint64, bool) {
	neg := signed && len(tok) > 0 && tok[0] == '-'
	digits := tok
	if neg {
		digits = digits[1:]
	}
	if len(digits) == 0 || (digits[0] == '0' && len(digits) > 1) {
		return 0, false
	}
	limit := uint64(1)<<(bits-1) - 1 + uint64(1)<<(bits-1) // 2^bits - 1
	if signed {
		limit = uint64(1)<<(bits-1) - 1
		if neg {
			limit++
		}
	}
	var v uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (limit-d)/10 {
			return 0, false // out of range
		}
		v = v*10 + d
	}
	if neg {
		v = -v
	}
	return v, true
}

func isLetter(c byte) bool { return c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' }
