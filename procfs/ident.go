package procfs

import (
	"fmt"
	"os"
	"slices"
	"strings"
)

// Identity helpers: what a process shows about itself beyond its pid and
// start time, so that a record naming a pid (and start time) can be checked
// against the process that holds it now before anyone signals it. A pid and
// start time name one process for the life of one boot only; after a reboot
// (or in a forged record) the same pair can name any process.

// bootIDPath holds the kernel's random UUID for this boot (random(4):
// /proc/sys/kernel/random/boot_id), the same for every reader until the
// next boot.
const bootIDPath = procRoot + "/sys/kernel/random/boot_id"

// BootID returns the identifier of the running boot, e.g.
// "fe9f5b93-cee1-4373-9bc4-9c248b05ee47" (the content of
// /proc/sys/kernel/random/boot_id without its newline). Two readings
// differ exactly when the system rebooted in between.
func BootID() (string, error) {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return "", fmt.Errorf("procfs: boot id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("procfs: boot id: %s is empty", bootIDPath)
	}
	return id, nil
}

// Cmdline returns pid's argument vector (/proc/PID/cmdline split at its
// NUL bytes, prometheus/procfs's Proc.CmdLine), argv[0] first. Empty
// arguments are kept, except trailing ones (prometheus/procfs trims the
// NULs at the end before splitting; no identity check here looks at an
// empty last argument). A zombie or kernel thread has none (an empty
// slice, no error). A process may rewrite its own argument area; what it
// wrote is what is returned.
func Cmdline(pid int) ([]string, error) {
	p, err := proc(pid)
	if err == nil {
		var argv []string
		if argv, err = p.CmdLine(); err == nil {
			return argv, nil
		}
	}
	return nil, fmt.Errorf("procfs: cmdline of pid %d: %w", pid, err)
}

// HasFlag reports whether argv holds the option flag with value, either as
// two arguments ("--session", "kb") or as one ("--session=kb"), anywhere
// after argv[0].
func HasFlag(argv []string, flag, value string) bool {
	for i := 1; i < len(argv); i++ {
		if argv[i] == flag+"="+value || (argv[i] == flag && i+1 < len(argv) && argv[i+1] == value) {
			return true
		}
	}
	return false
}

// HasEnv reports whether pid's environment (as it was at exec, see
// Environ) holds exactly the entry "key=value". An unreadable environment
// (another user's process, or one gone) is an error.
func HasEnv(pid int, key, value string) (bool, error) {
	env, err := Environ(pid)
	if err != nil {
		return false, err
	}
	return slices.Contains(env, key+"="+value), nil
}
