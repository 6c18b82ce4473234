package fleetsfile

import (
	"bytes"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/fleetmgr/fleetmgr/registry"
)

// Append returns src (fleets.toml text) with a [fleets.NAME] table for f
// appended at its end, after one blank line; the bytes of src are kept as
// they are (a missing final newline is added first). Line endings follow
// src's first line (CRLF or LF).
//
// It fails, naming the line where it can, when f cannot be written
// (Fleet's rules), when src is not TOML, when NAME is defined already, or
// when src writes `fleets` in a form a table cannot be added to (an inline
// table). The result is decoded and must equal src's tree with exactly
// that fleet added, or Append fails rather than return it.
func Append(src []byte, f Fleet) ([]byte, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	tree, err := decode(src)
	if err != nil {
		return nil, err
	}
	o := registry.OutlineOf(string(src))
	if fleets, ok := tree["fleets"]; ok {
		if k, ok := keyAt(o, "fleets"); ok {
			return nil, fmt.Errorf("line %d writes fleets as one value (an inline table); a [fleets.%s] table cannot be added to it: write each fleet as its own [fleets.NAME] table", k.Line, f.Name)
		}
		if m, ok := fleets.(map[string]any); ok {
			if _, dup := m[f.Name]; dup {
				return nil, fmt.Errorf("fleet %s is already defined%s", f.Name, lineNote(firstLine(o, f.Name)))
			}
		}
	}
	cmd := f.Command
	if len(cmd) == 0 {
		cmd = DefaultCommand()
	}
	var body bytes.Buffer
	if err := toml.NewEncoder(&body).Encode(table{Project: f.Project, Command: cmd, Port: f.Port, Lead: f.Lead}); err != nil {
		return nil, fmt.Errorf("fleet %s: %w", f.Name, err)
	}
	nl := newline(src)
	var out bytes.Buffer
	out.Write(src)
	if len(src) > 0 && !bytes.HasSuffix(src, []byte("\n")) {
		out.WriteString(nl)
	}
	if len(src) > 0 {
		out.WriteString(nl)
	}
	out.WriteString("[fleets." + f.Name + "]" + nl)
	out.WriteString(strings.ReplaceAll(body.String(), "\n", nl))

	added, err := decode(body.Bytes())
	if err != nil {
		return nil, fmt.Errorf("fleet %s: the table written does not decode (%v); nothing was written", f.Name, err)
	}
	want := copyTree(tree)
	fleets, _ := want["fleets"].(map[string]any)
	if fleets == nil {
		fleets = map[string]any{}
		want["fleets"] = fleets
	}
	fleets[f.Name] = added
	if err := sameTree(out.Bytes(), want); err != nil {
		return nil, fmt.Errorf("adding fleet %s would not give the file intended (%v); nothing was written", f.Name, err)
	}
	return out.Bytes(), nil
}

// Remove returns src without fleet name: every table whose header is
// [fleets.NAME] or below it ([fleets.NAME.env], …), each with the comment
// lines directly above its header (no blank line between them), and the
// lines after it up to the next header or the comment lines directly
// above that one, which belong to the next table. When what is removed
// runs to the end of the file, the blank lines before it go too, so that
// removing what Append added gives back the bytes before it. Every other
// byte is kept.
//
// It refuses, naming the line, a fleet defined in a form that cannot be
// cut out line by line: an inline table (`fleets = {…}`, or `NAME = {…}`
// under [fleets]) or dotted keys outside its own tables
// (`fleets.NAME.port = 1` at the top, `NAME.port = 1` under [fleets]).
// The result is decoded and must equal src's tree without that fleet.
func Remove(src []byte, name string) ([]byte, error) {
	tree, err := decode(src)
	if err != nil {
		return nil, err
	}
	fleets, _ := tree["fleets"].(map[string]any)
	if _, ok := fleets[name]; !ok {
		names := make([]string, 0, len(fleets))
		for n := range fleets {
			names = append(names, n)
		}
		slices.Sort(names)
		if len(names) == 0 {
			return nil, fmt.Errorf("no fleet %s: the file defines no fleets", name)
		}
		return nil, fmt.Errorf("no fleet %s: the file defines %s", name, strings.Join(names, ", "))
	}
	o := registry.OutlineOf(string(src))
	lines := splitLines(src)
	cut := make([]bool, len(lines))
	blocks := 0
	for i, h := range o.Headers {
		if !under(h.Path, name) {
			continue
		}
		blocks++
		start := h.Line - 1
		for start > 0 && isComment(lines[start-1]) {
			start--
		}
		end := len(lines)
		if i+1 < len(o.Headers) {
			end = o.Headers[i+1].Line - 1
			for end > h.Line && isComment(lines[end-1]) {
				end--
			}
		}
		for j := start; j < end && j < len(lines); j++ {
			cut[j] = true
		}
	}
	// A key statement of the fleet outside its own tables: dotted keys or
	// an inline table, which cannot be cut out line by line.
	for _, k := range o.Keys {
		if k.Line-1 < len(cut) && cut[k.Line-1] {
			continue
		}
		if len(k.Path) == 1 && k.Path[0] == "fleets" {
			return nil, fmt.Errorf("line %d writes fleets as one inline table; remove fleet %s from it by hand (or write each fleet as its own [fleets.NAME] table)", k.Line, name)
		}
		if under(k.Path, name) {
			return nil, fmt.Errorf("line %d defines %s outside a [fleets.%s] table (a dotted key or an inline table); remove it by hand, or write the fleet as a [fleets.%s] table", k.Line, strings.Join(k.Path, "."), name, name)
		}
	}
	if blocks == 0 {
		return nil, fmt.Errorf("fleet %s is not written as a [fleets.%s] table; remove it by hand", name, name)
	}
	last := len(lines)
	for last > 0 && cut[last-1] {
		last--
	}
	if last < len(lines) { // the cut runs to the end: take the blank lines before it too
		for last > 0 && isBlank(lines[last-1]) {
			last--
			cut[last] = true
		}
	}
	var out bytes.Buffer
	for i, l := range lines {
		if !cut[i] {
			out.Write(l)
		}
	}
	want := copyTree(tree)
	wf := want["fleets"].(map[string]any)
	delete(wf, name)
	if err := sameTree(out.Bytes(), want); err != nil {
		return nil, fmt.Errorf("removing fleet %s line by line would not give the file intended (%v); remove it by hand", name, err)
	}
	return out.Bytes(), nil
}

// under reports whether path is fleets.NAME or below it.
func under(path []string, name string) bool {
	return len(path) >= 2 && path[0] == "fleets" && path[1] == name
}

// keyAt returns the key statement that assigns exactly path, if any.
func keyAt(o registry.Outline, path ...string) (registry.OutlineKey, bool) {
	for _, k := range o.Keys {
		if slices.Equal(k.Path, path) {
			return k, true
		}
	}
	return registry.OutlineKey{}, false
}

// firstLine returns the first line on which fleet name is written (a
// header or a key), 0 if none is found.
func firstLine(o registry.Outline, name string) int {
	ln := 0
	for _, h := range o.Headers {
		if under(h.Path, name) && (ln == 0 || h.Line < ln) {
			ln = h.Line
		}
	}
	for _, k := range o.Keys {
		if under(k.Path, name) && (ln == 0 || k.Line < ln) {
			ln = k.Line
		}
	}
	return ln
}

func lineNote(line int) string {
	if line == 0 {
		return ""
	}
	return fmt.Sprintf(" (line %d)", line)
}

// newline returns the line ending of src's first line, "\n" by default.
func newline(src []byte) string {
	if i := bytes.IndexByte(src, '\n'); i > 0 && src[i-1] == '\r' {
		return "\r\n"
	}
	return "\n"
}

// splitLines splits src after each '\n'; the last line may lack one.
func splitLines(src []byte) [][]byte {
	var lines [][]byte
	for len(src) > 0 {
		i := bytes.IndexByte(src, '\n')
		if i < 0 {
			lines = append(lines, src)
			break
		}
		lines = append(lines, src[:i+1])
		src = src[i+1:]
	}
	return lines
}

// isComment reports whether line holds only a comment.
func isComment(line []byte) bool {
	return bytes.HasPrefix(bytes.TrimLeft(line, " \t"), []byte("#"))
}

// isBlank reports whether line holds only white space.
func isBlank(line []byte) bool {
	return len(bytes.TrimSpace(line)) == 0
}

// sameTree decodes out and compares it with want, treating an empty
// fleets table as no fleets table (removing the last [fleets.NAME] of a
// file without a [fleets] header leaves none).
func sameTree(out []byte, want map[string]any) error {
	got, err := decode(out)
	if err != nil {
		return err
	}
	dropEmptyFleets(got)
	dropEmptyFleets(want)
	if !reflect.DeepEqual(got, want) {
		return fmt.Errorf("the decoded result differs from the expected one")
	}
	return nil
}

func dropEmptyFleets(t map[string]any) {
	if m, ok := t["fleets"].(map[string]any); ok && len(m) == 0 {
		delete(t, "fleets")
	}
}

// copyTree copies the top two levels of a decoded tree (the levels an
// edit changes: the root and fleets).
func copyTree(t map[string]any) map[string]any {
	out := make(map[string]any, len(t))
	for k, v := range t {
		out[k] = v
	}
	if m, ok := t["fleets"].(map[string]any); ok {
		c := make(map[string]any, len(m))
		for k, v := range m {
			c[k] = v
		}
		out["fleets"] = c
	}
	return out
}
