package setup

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/broker"
	"github.com/fleetmgr/fleetmgr/fleetsfile"
	"github.com/fleetmgr/fleetmgr/lifecycle"
	"github.com/fleetmgr/fleetmgr/procfs"
	"github.com/fleetmgr/fleetmgr/registry"
)

// InitOptions are `fleetmgr init`'s.
type InitOptions struct {
	// Path is the file to write; "" writes InitPath.
	Path string
	// Fleet, when not nil and with a Project, is a first fleet added to
	// the template. Without a Project it must be empty (the flags naming,
	// numbering or commanding a first fleet need --project).
	Fleet *FleetOptions
	// Getenv reads the environment (HOME, XDG_CONFIG_HOME); nil is
	// os.Getenv.
	Getenv func(string) string
}

// InitResult is what Init did.
type InitResult struct {
	// Config is the file written, as it loads.
	Config *registry.Config
	// Fleet is the fleet added, nil without one.
	Fleet *registry.Fleet
	// Shadowed names ./fleets.toml when one exists in the working
	// directory and Init wrote elsewhere: fleetmgr run from here reads
	// that one first.
	Shadowed string
}

// Init writes the commented template (fleetsfile.Template) to opts.Path,
// or InitPath, with a first fleet when opts.Fleet is set. It never
// overwrites a file (fleetsfile.Create), and what it writes loads.
func Init(_ context.Context, opts InitOptions) (*InitResult, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	path := opts.Path
	if path == "" {
		p, err := InitPath(getenv)
		if err != nil {
			return nil, err
		}
		path = p
	}
	if fo := opts.Fleet; fo != nil && fo.Project == "" {
		if fo.Name != "" || fo.Port != 0 || fo.Lead || len(fo.Command) > 0 {
			return nil, errors.New("--name, --port, --lead and a command describe the first fleet: pass --project DIR too")
		}
		opts.Fleet = nil
	}
	data := fleetsfile.Template()
	var want fleetsfile.Fleet
	var abs string
	if opts.Fleet != nil {
		var err error
		if want, abs, err = opts.Fleet.fleet(getenv); err != nil {
			return nil, err
		}
		if data, err = fleetsfile.Append(data, want); err != nil {
			return nil, err
		}
	}
	res := &InitResult{}
	cfg, err := fleetsfile.Create(path, data, func(cfg *registry.Config) error {
		if opts.Fleet == nil {
			return nil
		}
		f, err := checkWritten(cfg, want, abs)
		res.Fleet = f
		return err
	})
	if err != nil {
		return nil, err
	}
	res.Config = cfg
	if local, err := filepath.Abs("fleets.toml"); err == nil && local != cfg.Path {
		if st, err := os.Stat(local); err == nil && st.Mode().IsRegular() {
			res.Shadowed = local
		}
	}
	return res, nil
}

// AddOptions are `fleetmgr add`'s.
type AddOptions struct {
	// Path is the fleets.toml to edit.
	Path string
	// Fleet is the fleet to add; Name is required.
	Fleet FleetOptions
	// Reload, when not nil, is called once the file is written.
	Reload Reloader
	// Getenv reads HOME; nil is os.Getenv.
	Getenv func(string) string
}

// AddResult is what Add did.
type AddResult struct {
	// Config is the file as it loads now.
	Config *registry.Config
	// Fleet is the fleet added, as it loads, with the port allocated to
	// it when the file gives none (registry.Config.AllocatePorts).
	Fleet *registry.Fleet
	// Reload is the Reloader's sentence ("" without one).
	Reload string
	// NotInConfig: the file did not define the fleet (a purge of what an
	// earlier remove left); the file was not changed.
	NotInConfig bool
}

// Add appends the fleet to the file (fleetsfile.Append through
// fleetsfile.Edit: byte-preserving, validated, atomic, untouched on any
// error), checks that it loads as asked, then calls Reload. An error from
// Reload is returned with the result: the file was written all the same.
func Add(ctx context.Context, opts AddOptions) (*AddResult, error) {
	if opts.Fleet.Name == "" {
		return nil, errors.New("no fleet name given")
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	want, abs, err := opts.Fleet.fleet(getenv)
	if err != nil {
		return nil, fmt.Errorf("%s: fleet %s: %w; the file is unchanged", opts.Path, opts.Fleet.Name, err)
	}
	res := &AddResult{}
	cfg, err := fleetsfile.Edit(opts.Path, func(src []byte) ([]byte, error) { return fleetsfile.Append(src, want) },
		func(cfg *registry.Config) error {
			f, err := checkWritten(cfg, want, abs)
			res.Fleet = f
			return err
		})
	if err != nil {
		return nil, err
	}
	res.Config = cfg
	if cfg.AllocatePorts() == nil { // else the port shows as 0; start allocates it
		res.Fleet = cfg.Fleets[want.Name]
	}
	if opts.Reload != nil {
		res.Reload, err = opts.Reload(ctx, cfg)
		if err != nil {
			return res, fmt.Errorf("fleet %s was added to %s, but the running fleetmgr serve did not reload it: %w", want.Name, cfg.Path, err)
		}
	}
	return res, nil
}

// RemoveOptions are `fleetmgr remove`'s.
type RemoveOptions struct {
	// Path is the fleets.toml to edit.
	Path string
	// Name is the fleet to remove.
	Name string
	// Purge also deletes the fleet's state directory
	// (<state_dir>/fleets/NAME: state, logs, rendered config, broker
	// password, and the default worktree root).
	Purge bool
	// DeleteMessages (with Purge) also deletes the fleet's broker vhost,
	// every message in it, and the fleet's broker user.
	DeleteMessages bool
	// DeleteWorktrees (with Purge) lets Purge delete a worktree root
	// inside the state directory that is not empty; without it such a
	// purge is refused, since worktrees may hold uncommitted work.
	DeleteWorktrees bool
	// Manager returns the lifecycle manager for a configuration (the
	// CLI's, with its logger and environment).
	Manager func(*registry.Config) *lifecycle.Manager
	// Reload, when not nil, is called once the file is written.
	Reload Reloader
	// Awaiting, when not nil, is told what Remove waits for next and for
	// how long at most (0: no bound of its own), for progress lines
	// (cmdutil.Waiter): the broker, the fleet's lock. The Reloader says
	// its own.
	Awaiting func(what string, timeout time.Duration)
}

// RemoveLockSlack is added to [manager] start_timeout and stop_grace to
// bound Remove's wait for the fleet's lock: the longest holder is a
// restart (a stop, then a start).
const RemoveLockSlack = 10 * time.Second

func (o RemoveOptions) awaiting(what string, timeout time.Duration) {
	if o.Awaiting != nil {
		o.Awaiting(what, timeout)
	}
}

// RemoveResult is what Remove did.
type RemoveResult struct {
	// Name is the fleet removed.
	Name string
	// Config is the file as it loads now.
	Config *registry.Config
	// Purged is the state directory deleted ("" when none was).
	Purged string
	// Vhost is the vhost deleted, or found missing ("" when not asked).
	Vhost string
	// VhostExisted reports whether Vhost existed before.
	VhostExisted bool
	// BrokerUser is the fleet's broker user, deleted with its vhost ("" when
	// not asked).
	BrokerUser string
	// Kept lists what was deliberately left, one sentence each.
	Kept []string
	// Reload is the Reloader's sentence ("" without one).
	Reload string
	// NotInConfig: the file did not define the fleet (a purge of what an
	// earlier remove left); the file was not changed.
	NotInConfig bool
}

// Remove takes fleet Name out of the file (fleetsfile.Remove through
// fleetsfile.Edit), refusing while the fleet is not stopped or is wanted
// running (lifecycle.Manager.State; a supervisor would start it again),
// while any of its recorded processes is alive, and when the file does not
// load (its state could not be checked). It holds the fleet's lock
// (lifecycle.Manager.LockFleet) from the last state check through the
// rewrite and the purge, so no start of the fleet runs in between.
//
// Order, so that a failure leaves as little changed as possible: the state
// check and a dry run of the edit; with DeleteMessages the vhost (refused
// by lifecycle while the fleet runs); then, under the lock, the state
// check again, the file, and with Purge the state directory; then Reload.
func Remove(ctx context.Context, opts RemoveOptions) (*RemoveResult, error) {
	if opts.DeleteMessages && !opts.Purge {
		return nil, errors.New("--yes-delete-messages deletes the fleet's vhost, which only --purge does: pass both")
	}
	if opts.DeleteWorktrees && !opts.Purge {
		return nil, errors.New("--yes-delete-worktrees goes with --purge")
	}
	old, err := registry.Load(opts.Path)
	if err != nil {
		return nil, fmt.Errorf("%w\nfleet %s's state cannot be checked while the file does not load: fix it first, or remove the table by hand", err, opts.Name)
	}
	f, err := old.Fleet(opts.Name)
	if err != nil {
		if opts.Purge && registry.ValidFleetName(opts.Name) {
			return purgeLeftover(opts, old, err)
		}
		return nil, err
	}
	src, err := os.ReadFile(old.Path)
	if err != nil {
		return nil, err
	}
	if _, err := fleetsfile.Remove(src, opts.Name); err != nil {
		return nil, fmt.Errorf("%s: %w; the file is unchanged", opts.Path, err)
	}
	m := opts.Manager(old)
	if err := stopped(m, opts.Name); err != nil {
		return nil, err
	}
	res := &RemoveResult{Name: opts.Name}
	dir := m.FleetDir(opts.Name)
	if opts.Purge {
		if within(f.WorktreeRoot, dir) {
			if n := entries(f.WorktreeRoot); n > 0 && !opts.DeleteWorktrees {
				return nil, fmt.Errorf("fleet %s's worktree root %s holds %d entries (members' worktrees, maybe with uncommitted work): --purge would delete them; pass --yes-delete-worktrees too, or move what you need first", opts.Name, f.WorktreeRoot, n)
			}
		} else {
			res.Kept = append(res.Kept, fmt.Sprintf("worktree root %s (outside the state directory)", f.WorktreeRoot))
		}
	}
	if opts.DeleteMessages {
		if old.Broker == nil {
			res.Kept = append(res.Kept, "no vhost: the file has no [broker] table")
		} else {
			opts.awaiting(fmt.Sprintf("the broker to delete fleet %s's vhost %s and user %s (each request within %s, retried)", opts.Name, f.Vhost, f.BrokerUser, broker.DefaultRequestTimeout), 0)
			existed, err := m.DeleteVhost(ctx, opts.Name)
			if err != nil {
				return nil, fmt.Errorf("%w; nothing was removed", err)
			}
			res.Vhost, res.VhostExisted = f.Vhost, existed
			// The fleet's user had permissions on that vhost only, and
			// its password file goes with the state directory.
			admin, err := m.BrokerAdmin()
			if err == nil {
				err = admin.DeleteUser(ctx, f.BrokerUser)
			}
			if err != nil {
				return nil, fmt.Errorf("fleet %s: vhost %s deleted, but not its broker user %s: %w; nothing else was removed", opts.Name, f.Vhost, f.BrokerUser, err)
			}
			res.BrokerUser = f.BrokerUser
		}
	} else if opts.Purge && old.Broker != nil {
		res.Kept = append(res.Kept, fmt.Sprintf("vhost %s and its messages (pass --yes-delete-messages to delete them)", f.Vhost))
	}
	bound := old.Manager.StartTimeout.Duration + old.Manager.StopGrace.Duration + RemoveLockSlack
	opts.awaiting(fmt.Sprintf("fleet %s's lock (held while another fleetmgr starts, stops or restarts it)", opts.Name), bound)
	lctx, cancel := context.WithTimeout(ctx, bound)
	unlock, err := m.LockFleet(lctx, opts.Name)
	cancel()
	if err != nil {
		return nil, err
	}
	defer unlock()
	if err := stopped(m, opts.Name); err != nil {
		return nil, err
	}
	cfg, err := fleetsfile.Edit(opts.Path, func(src []byte) ([]byte, error) { return fleetsfile.Remove(src, opts.Name) }, nil)
	if err != nil {
		return nil, err
	}
	res.Config = cfg
	if opts.Purge {
		if err := os.RemoveAll(dir); err != nil {
			return res, fmt.Errorf("fleet %s was removed from %s, but its state directory was not deleted: %w", opts.Name, cfg.Path, err)
		}
		res.Purged = dir
	}
	unlock()
	if opts.Reload != nil {
		res.Reload, err = opts.Reload(ctx, cfg)
		if err != nil {
			return res, fmt.Errorf("fleet %s was removed from %s, but the running fleetmgr serve did not reload: %w", opts.Name, cfg.Path, err)
		}
	}
	return res, nil
}

// purgeLeftover is `remove NAME --purge` of a fleet the file no longer
// defines (an earlier `remove NAME`, or an edit): its state directory is
// deleted when it has one and nothing of it may still run (the Manager
// does not know it: no record says it runs; a fleet removed while it ran
// must be stopped first). The worktree rule is Remove's; its vhost cannot
// be named without its table, so it is kept. No state directory: an error
// saying there is nothing to purge. notIn is the config's "unknown fleet"
// error.
func purgeLeftover(opts RemoveOptions, cfg *registry.Config, notIn error) (*RemoveResult, error) {
	m := opts.Manager(cfg)
	if _, err := m.Fleet(opts.Name); err == nil { // removed while it ran, may still run
		if err := stopped(m, opts.Name); err != nil {
			return nil, err
		}
	}
	dir := m.FleetDir(opts.Name)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%v, and it has no state directory (%s): there is nothing to purge", notIn, dir)
	}
	wt := filepath.Join(dir, "worktrees")
	if n := entries(wt); n > 0 && !opts.DeleteWorktrees {
		return nil, fmt.Errorf("fleet %s's worktree root %s holds %d entries (members' worktrees, maybe with uncommitted work): --purge would delete them; pass --yes-delete-worktrees too, or move what you need first", opts.Name, wt, n)
	}
	res := &RemoveResult{Name: opts.Name, Config: cfg, NotInConfig: true}
	if opts.DeleteMessages {
		res.Kept = append(res.Kept, fmt.Sprintf("the vhost of %s, if any: its name is not known without its table in %s", opts.Name, cfg.Path))
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("fleet %s: its state directory was not deleted: %w", opts.Name, err)
	}
	res.Purged = dir
	return res, nil
}

// stopped returns nil when fleet name is stopped, not wanted running, and
// none of its recorded processes is alive.
func stopped(m *lifecycle.Manager, name string) error {
	st, err := m.State(name)
	if err != nil {
		return fmt.Errorf("fleet %s: its state cannot be read (%v): run `fleetmgr stop %s` first", name, err, name)
	}
	switch {
	case st.Shown.Phase != lifecycle.PhaseStopped:
		return fmt.Errorf("fleet %s is %s: stop it first (`fleetmgr stop %s`); a fleet is removed only while stopped", name, st.Shown.Phase, name)
	case st.Desired == lifecycle.DesiredRunning:
		return fmt.Errorf("fleet %s is wanted running (a fleetmgr serve would start it again): stop it first (`fleetmgr stop %s`)", name, name)
	}
	for _, p := range []*lifecycle.Proc{st.Fleetd, st.Herdr} {
		if alive(p) {
			return fmt.Errorf("fleet %s still has a live process (pid %d): stop it first (`fleetmgr stop %s`)", name, p.PID, name)
		}
	}
	return nil
}

// alive reports whether p names a live process (pid and start time).
func alive(p *lifecycle.Proc) bool {
	if p == nil || p.PID <= 0 {
		return false
	}
	st, err := procfs.ReadStat(p.PID)
	if err != nil {
		return false
	}
	return (p.StartTime == 0 || st.StartTime == p.StartTime) && st.State != 'Z' && st.State != 'X'
}

// within reports whether path is dir or below it.
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// entries counts the entries of directory dir (0 when it is missing).
func entries(dir string) int {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0
	}
	return len(ents)
}
