package mount

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/fleetmgr/fleetmgr/atomicfile"

	"github.com/tailscale/hujson"
)

// OpenCodePath returns the OpenCode configuration file of scope: for
// User, $XDG_CONFIG_HOME/opencode (else ~/.config/opencode); for Project,
// dir. In that directory the file is opencode.jsonc when only that one
// exists, else opencode.json.
func OpenCodePath(scope Scope, dir string, getenv func(string) string) (string, error) {
	if scope == User {
		if x := getenv("XDG_CONFIG_HOME"); filepath.IsAbs(x) {
			dir = filepath.Join(x, "opencode")
		} else if h := getenv("HOME"); filepath.IsAbs(h) {
			dir = filepath.Join(h, ".config", "opencode")
		} else {
			return "", errors.New("neither $XDG_CONFIG_HOME nor $HOME is an absolute path")
		}
	}
	json, jsonc := filepath.Join(dir, "opencode.json"), filepath.Join(dir, "opencode.jsonc")
	if _, err := os.Stat(json); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(jsonc); err == nil {
			return jsonc, nil
		}
	}
	return json, nil
}

// openCodeEntry is the `mcp` entry for o (OpenCode's config schema:
// "remote" with url, or "local" with command).
func openCodeEntry(o Options) map[string]any {
	if len(o.Command) > 0 {
		return map[string]any{"type": "local", "command": o.Command, "enabled": true}
	}
	return map[string]any{"type": "remote", "url": o.URL, "enabled": true}
}

// MergeOpenCode returns src (an OpenCode config: JSON, or JSONC with
// comments and trailing commas) with mcp.NAME set to entry, keeping every
// other byte — comments, order, formatting — as it was (tailscale/hujson's
// patch). An empty src gives a new file: {"$schema": …, "mcp": {NAME:
// entry}}, indented. replaced reports
// whether mcp.NAME existed. It refuses a file whose top level, or whose
// mcp, is not an object, and checks that the result, read as JSON, differs
// from src only in mcp.NAME.
func MergeOpenCode(src []byte, name string, entry map[string]any) (out []byte, replaced bool, err error) {
	if len(bytes.TrimSpace(src)) == 0 {
		out, err := json.MarshalIndent(map[string]any{"$schema": "https://opencode.ai/config.json", "mcp": map[string]any{name: entry}}, "", "  ")
		return append(out, '\n'), false, err
	}
	v, err := hujson.Parse(src)
	if err != nil {
		return nil, false, fmt.Errorf("not JSON or JSONC: %w", err)
	}
	before, err := standard(v)
	if err != nil {
		return nil, false, err
	}
	root, ok := before.(map[string]any)
	if !ok {
		return nil, false, errors.New("the top level is not an object")
	}
	var ops []map[string]any
	mcp, has := root["mcp"]
	switch m := mcp.(type) {
	case map[string]any:
		_, replaced = m[name]
	case nil:
		if has {
			return nil, false, errors.New(`"mcp" is null, not an object`)
		}
		ops = append(ops, map[string]any{"op": "add", "path": "/mcp", "value": map[string]any{}})
	default:
		return nil, false, errors.New(`"mcp" is not an object`)
	}
	ops = append(ops, map[string]any{"op": "add", "path": "/mcp/" + pointerEscape(name), "value": entry})
	patch, err := json.Marshal(ops)
	if err != nil {
		return nil, false, err
	}
	if err := v.Patch(patch); err != nil {
		return nil, false, err
	}
	after, err := standard(v)
	if err != nil {
		return nil, false, err
	}
	// The result must be src's object with exactly mcp.NAME set.
	want := map[string]any{}
	for k, x := range root {
		want[k] = x
	}
	m := map[string]any{}
	if old, ok := root["mcp"].(map[string]any); ok {
		for k, x := range old {
			m[k] = x
		}
	}
	ent, _ := standardJSON(entry)
	m[name] = ent
	want["mcp"] = m
	if !reflect.DeepEqual(after, want) {
		return nil, false, errors.New("merging would change more than the mcp entry")
	}
	return v.Pack(), replaced, nil
}

// standard decodes a HuJSON value as plain JSON.
func standard(v hujson.Value) (any, error) {
	c := v.Clone()
	c.Standardize()
	var x any
	if err := json.Unmarshal(c.Pack(), &x); err != nil {
		return nil, err
	}
	return x, nil
}

// standardJSON round-trips x through encoding/json.
func standardJSON(x any) (any, error) {
	b, err := json.Marshal(x)
	if err != nil {
		return nil, err
	}
	var y any
	return y, json.Unmarshal(b, &y)
}

// pointerEscape escapes a JSON Pointer token (RFC 6901).
func pointerEscape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// mountOpenCode merges the entry into the scope's opencode.json(c).
func mountOpenCode(o Options) (*Result, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.Getwd()
		if err != nil {
			return nil, err
		}
		dir = d
	}
	path, err := OpenCodePath(o.Scope, dir, getenv)
	if err != nil {
		return nil, err
	}
	// A symbolic link (to a dotfiles repository's file, say) is followed:
	// its target is edited and the link stays, as fleetsfile.Edit does for
	// fleets.toml. Replacing the link with a file would leave the
	// operator's own file without the entry, and the link gone.
	target := path
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return nil, fmt.Errorf("%s is a symbolic link whose target cannot be resolved (%v): point it at a file, or remove it; the file is unchanged", path, err)
		}
		target = real
	}
	src, err := os.ReadFile(target)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	perm := fs.FileMode(0o644)
	if st, err := os.Stat(target); err == nil {
		perm = st.Mode().Perm()
	}
	out, replaced, err := MergeOpenCode(src, o.Name, openCodeEntry(o))
	if err != nil {
		return nil, fmt.Errorf("%s: %w; the file is unchanged", path, err)
	}
	res := &Result{Path: path, Replaced: replaced}
	if o.Print {
		res.Printed = string(out)
		return res, nil
	}
	if err := writeAtomic(target, out, perm); err != nil {
		return nil, err
	}
	return res, nil
}

// writeAtomic writes data to path through a temporary file beside it and
// a rename, creating the directory (0755) when missing.
func writeAtomic(path string, data []byte, perm fs.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, perm)
}
