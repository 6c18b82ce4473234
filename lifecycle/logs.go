package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"
)

// LogProcs are the processes whose logs a fleet has: the values
// LogPath, LogTail and FollowLog accept as proc.
var LogProcs = []string{"fleetd", "herdr"}

func checkLogProc(proc string) error {
	for _, p := range LogProcs {
		if p == proc {
			return nil
		}
	}
	return fmt.Errorf("no %q log: a fleet's logs are %v", proc, LogProcs)
}

// LogTail returns the last n lines (n <= 0: all) of fleet name's current
// fleetd or herdr log (proc). A fleet that has not run yet has an empty
// log, not an error.
func (m *Manager) LogTail(name, proc string, n int) ([]string, error) {
	if _, err := m.Fleet(name); err != nil {
		return nil, err
	}
	if err := checkLogProc(proc); err != nil {
		return nil, err
	}
	return readTail(m.LogPath(name, proc), n)
}

// tailLines is LogTail for internal use: errors become an empty tail.
func (m *Manager) tailLines(name, proc string, n int) []string {
	lines, _ := readTail(m.LogPath(name, proc), n)
	return lines
}

// readTail is readTailRaw without the log pipe's timestamps (logtime.go).
func readTail(path string, n int) ([]string, error) {
	raw, err := readTailRaw(path, n)
	for i, l := range raw {
		raw[i] = splitStamp(l).Text
	}
	return raw, err
}

// cutMark begins a line of which readTail shows only the end.
const cutMark = "[line cut: its start is more than 1 MiB back] …"

// readTailRaw reads at most the last 1 MiB of path and returns its last n
// lines (all when n <= 0), as written (with their timestamps). A line that
// starts before that window is shown by its end, after cutMark.
func readTailRaw(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return []string{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	const window = 1 << 20
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := max(fi.Size()-window, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if err != nil {
		return nil, err
	}
	if off > 0 {
		// The window starts inside a line unless the byte before it ends
		// one. That line's end is kept, marked as cut: dropping it lost
		// the whole line, the last one written when it is longer than the
		// window, and the tail showed fewer lines than asked with nothing
		// said.
		var prev [1]byte
		if _, err := f.ReadAt(prev[:], off-1); err != nil {
			return nil, err
		}
		if prev[0] != '\n' {
			b = append([]byte(cutMark), b...)
		}
	}
	b = bytes.TrimRight(b, "\n")
	if len(b) == 0 {
		return []string{}, nil
	}
	lines := bytes.Split(b, []byte("\n"))
	if n > 0 && len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	out := make([]string, len(lines))
	for i, l := range lines {
		out[i] = string(l)
	}
	return out, nil
}

// FollowLog writes what is appended to fleet name's proc log to w until ctx
// ends. It looks at the file when inotify says it changed (one instance
// shared by every follower of the Manager, filewatch.go) and every 5 s
// anyway; without inotify it polls every 200 ms. It follows rotation: when
// the file at the path is a new one (another inode) or shrank, it
// continues from the start of the new file. It starts at the current end
// of the file. What it writes is what the children printed, without the
// log pipe's timestamps.
func (m *Manager) FollowLog(ctx context.Context, name, proc string, w io.Writer) error {
	return m.followRaw(ctx, name, proc, &unstampWriter{w: w})
}

// followRaw is FollowLog writing the file's bytes as they are.
func (m *Manager) followRaw(ctx context.Context, name, proc string, w io.Writer) error {
	if _, err := m.Fleet(name); err != nil {
		return err
	}
	if err := checkLogProc(proc); err != nil {
		return err
	}
	return m.FollowFile(ctx, m.LogPath(name, proc), w)
}

// TailFile is the last n lines (n <= 0: all within the last 1 MiB) of the
// log file at path, as written; a missing file is an empty tail. serve's
// own log (`fleetmgr logs --serve`) is read so.
func TailFile(path string, n int) ([]string, error) { return readTailRaw(path, n) }

// FollowFile is FollowLog for the log file at path (serve's own log):
// what is appended, as written, until ctx ends.
func (m *Manager) FollowFile(ctx context.Context, path string, w io.Writer) error {
	var f *os.File
	var ino uint64
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	open := func(fromEnd bool) {
		if f != nil {
			f.Close()
			f = nil
		}
		nf, err := os.Open(path)
		if err != nil {
			return
		}
		fi, err := nf.Stat()
		if err != nil {
			nf.Close()
			return
		}
		if fromEnd {
			_, _ = nf.Seek(0, io.SeekEnd)
		}
		f, ino = nf, inode(fi)
	}
	// Subscribed before the file is opened at its end, so that nothing
	// written after that goes unsignalled.
	poll := 200 * time.Millisecond
	var wake <-chan struct{}
	if sub, ok := m.files.subscribe(path); ok {
		defer m.files.unsubscribe(sub)
		wake, poll = sub.c, 5*time.Second
	}
	open(true)
	timer := time.NewTimer(poll)
	defer timer.Stop()
	buf := make([]byte, 32<<10)
	for {
		if f != nil {
			for {
				n, err := f.Read(buf)
				if n > 0 {
					if _, werr := w.Write(buf[:n]); werr != nil {
						return werr
					}
				}
				if err != nil || n == 0 {
					break
				}
			}
		}
		timer.Reset(poll)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		case <-wake: // nil without inotify
		}
		fi, err := os.Stat(path)
		switch {
		case err != nil:
			// Between rotation's rename and the new file; try again.
		case f == nil || inode(fi) != ino:
			if f != nil { // drain what the old file got before the rename
				_, _ = io.Copy(w, f)
			}
			open(false)
		default:
			if pos, err := f.Seek(0, io.SeekCurrent); err == nil && fi.Size() < pos {
				_, _ = f.Seek(0, io.SeekStart) // truncated in place
			}
		}
	}
}

func inode(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
