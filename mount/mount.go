// Package mount writes the operator's MCP client configuration for this
// fleetmgr: Claude Code through its own CLI (`claude mcp add`), OpenCode
// by merging an entry into opencode.json. The mount is either the
// streamable-HTTP endpoint of `fleetmgr serve` or a command mount running
// `fleetmgr mcp` (stdio, bridged to the daemon's unix socket).
//
// It never decides who may mount: the CLI refuses to run it inside a herdr
// pane (a fleet member must never mount the manager, fleetd issue #160),
// and the daemon's guard refuses such callers anyway.
package mount

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// Client is an MCP client fleetmgr can configure.
type Client string

// The clients.
const (
	Claude   Client = "claude"
	OpenCode Client = "opencode"
)

// Scope is where the configuration goes: the operator's own (every
// project) or the current project's.
type Scope string

// The scopes.
const (
	User    Scope = "user"
	Project Scope = "project"
)

// DefaultName is the name the manager is mounted under.
const DefaultName = "fleets"

// Runner runs a client's CLI and returns its combined output.
type Runner func(ctx context.Context, name string, args ...string) (string, error)

// ExecRunner runs the command with os/exec in dir ("" the current one),
// bounded to 2 minutes.
func ExecRunner(dir string) Runner {
	return func(ctx context.Context, name string, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
}

// Options say what to mount where.
type Options struct {
	Client Client
	Scope  Scope
	// Name is the server's name in the client; "" is DefaultName.
	Name string
	// URL is the HTTP endpoint (http://LISTEN/mcp) for an HTTP mount.
	URL string
	// Command, when not empty, makes a command mount running it
	// (fleetmgr --config CONFIG mcp) instead of URL.
	Command []string
	// Dir is the project directory (for Scope Project); "" is the
	// current one.
	Dir string
	// Getenv reads HOME and XDG_CONFIG_HOME (OpenCode's user config).
	Getenv func(string) string
	// ClaudeBin is Claude Code's executable; "" looks up "claude" in
	// PATH.
	ClaudeBin string
	// Run runs the client's CLI; nil is ExecRunner(Dir).
	Run Runner
	// Print only returns what would be done (Result.Printed).
	Print bool
}

// Result is what Mount did (or, with Print, would do).
type Result struct {
	// Path is the file written (OpenCode) or "" (Claude Code writes its
	// own).
	Path string `json:"path,omitempty"`
	// Ran lists the client commands run.
	Ran []string `json:"ran,omitempty"`
	// Replaced reports whether an entry of that name existed and was
	// replaced.
	Replaced bool `json:"replaced"`
	// Printed is, with Print, the command line (Claude Code) or the whole
	// configuration file (OpenCode) that would be run or written.
	Printed string `json:"printed,omitempty"`
}

// Mount configures the client.
func Mount(ctx context.Context, o Options) (*Result, error) {
	if o.Name == "" {
		o.Name = DefaultName
	}
	if len(o.Command) == 0 && o.URL == "" {
		return nil, errors.New("neither a URL nor a command to mount")
	}
	switch o.Scope {
	case User, Project:
	default:
		return nil, fmt.Errorf("unknown scope %q: user or project", o.Scope)
	}
	if o.Run == nil {
		o.Run = ExecRunner(o.Dir)
	}
	switch o.Client {
	case Claude:
		return mountClaude(ctx, o)
	case OpenCode:
		return mountOpenCode(o)
	}
	return nil, fmt.Errorf("unknown client %q: claude or opencode", o.Client)
}

// claudeArgs is `claude mcp add` for o.
func claudeArgs(o Options) []string {
	args := []string{"mcp", "add", "--scope", string(o.Scope)}
	if len(o.Command) > 0 {
		return append(append(args, o.Name, "--"), o.Command...)
	}
	return append(args, "--transport", "http", o.Name, o.URL)
}

// mountClaude runs `claude mcp add`; when the name exists in that scope it
// removes that entry (`claude mcp remove`) and adds again.
func mountClaude(ctx context.Context, o Options) (*Result, error) {
	args := claudeArgs(o)
	bin := o.ClaudeBin
	if bin == "" {
		bin = "claude"
	}
	if o.Print {
		return &Result{Printed: ShellJoin(append([]string{bin}, args...))}, nil
	}
	if o.ClaudeBin == "" {
		p, err := exec.LookPath("claude")
		if err != nil {
			return nil, fmt.Errorf("claude (Claude Code's command) is not on PATH (%v); run this where it is:\n  %s", err, ShellJoin(append([]string{"claude"}, args...)))
		}
		bin = p
	}
	res := &Result{}
	out, err := o.Run(ctx, bin, args...)
	if err != nil && strings.Contains(out, "already exists") {
		rm := []string{"mcp", "remove", "--scope", string(o.Scope), o.Name}
		if out, err := o.Run(ctx, bin, rm...); err != nil {
			return nil, fmt.Errorf("%s: %s", ShellJoin(append([]string{"claude"}, rm...)), firstLine(out, err))
		}
		res.Ran, res.Replaced = append(res.Ran, ShellJoin(append([]string{"claude"}, rm...))), true
		out, err = o.Run(ctx, bin, args...)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %s", ShellJoin(append([]string{"claude"}, args...)), firstLine(out, err))
	}
	res.Ran = append(res.Ran, ShellJoin(append([]string{"claude"}, args...)))
	return res, nil
}

func firstLine(out string, err error) string {
	if out = strings.TrimSpace(out); out != "" {
		return strings.SplitN(out, "\n", 2)[0]
	}
	return err.Error()
}

// ShellJoin quotes args for a POSIX shell, each word in single quotes
// unless it holds only characters that need none.
func ShellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@%+,") == "" {
			q[i] = a
			continue
		}
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// Lines are what `fleetmgr mount` prints of a Mount with o: with Print
// what would be run or written; else the commands run, the file written,
// and what is mounted where.
func (r *Result) Lines(o Options) []string {
	if o.Print {
		return []string{r.Printed}
	}
	var out []string
	for _, c := range r.Ran {
		out = append(out, "ran: "+c)
	}
	if r.Path != "" {
		out = append(out, "wrote "+r.Path)
	}
	what, name, target := "mounted", o.Name, o.URL
	if r.Replaced {
		what = "mounted (replacing the entry of that name)"
	}
	if name == "" {
		name = DefaultName
	}
	if len(o.Command) > 0 {
		target = ShellJoin(o.Command)
	}
	return append(out, fmt.Sprintf("%s %s in %s (%s scope): %s", what, name, o.Client, o.Scope, target))
}
