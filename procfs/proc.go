package procfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Environ returns the environment pid was started with (/proc/PID/environ),
// as "KEY=VALUE" strings in order. Changes the process made to its own
// environment after exec are not visible. Reading another user's process
// needs privilege; the error then wraps fs.ErrPermission.
func Environ(pid int) ([]string, error) {
	path := fmt.Sprintf("%s/%d/environ", procRoot, pid)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("procfs: environ of pid %d: %w", pid, err)
	}
	var env []string
	for _, kv := range bytes.Split(data, []byte{0}) {
		if len(kv) > 0 {
			env = append(env, string(kv))
		}
	}
	return env, nil
}

// Exe returns the absolute path of pid's executable (the /proc/PID/exe
// link). If the file was deleted after exec, the kernel's " (deleted)"
// suffix is kept, so callers can tell.
func Exe(pid int) (string, error) {
	path := fmt.Sprintf("%s/%d/exe", procRoot, pid)
	exe, err := os.Readlink(path)
	if err != nil {
		return "", fmt.Errorf("procfs: exe of pid %d: %w", pid, err)
	}
	return exe, nil
}

// UIDs returns pid's real and effective user ids, from the "Uid:" line of
// /proc/PID/status.
func UIDs(pid int) (real, effective int, err error) {
	path := fmt.Sprintf("%s/%d/status", procRoot, pid)
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, fmt.Errorf("procfs: uids of pid %d: %w", pid, err)
	}
	real, effective, err = parseUIDs(data)
	if err != nil {
		return 0, 0, fmt.Errorf("procfs: parse %s: %w", path, err)
	}
	return real, effective, nil
}

// parseUIDs finds the "Uid:" line of a status file. It never panics.
func parseUIDs(data []byte) (real, effective int, err error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "Uid:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 2 {
			return 0, 0, fmt.Errorf("status line Uid %q has %d fields, need at least 2", line, len(f))
		}
		if real, err = strconv.Atoi(f[0]); err != nil {
			return 0, 0, fmt.Errorf("real uid: %w", err)
		}
		if effective, err = strconv.Atoi(f[1]); err != nil {
			return 0, 0, fmt.Errorf("effective uid: %w", err)
		}
		return real, effective, nil
	}
	if err := sc.Err(); err != nil {
		return 0, 0, err
	}
	return 0, 0, fmt.Errorf("no Uid line")
}
