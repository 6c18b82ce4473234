package service

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/coreos/go-systemd/v22/unit"
)

// StopScope is which processes systemd signals when it stops or restarts
// a service, by the service's KillMode= (systemd.kill(5)).
type StopScope int

// The stop scopes, from KillMode=control-group (the default) to none.
const (
	// SignalsAll: control-group — SIGTERM, then SIGKILL, to every process
	// in the unit's control group, fleets started by serve included.
	SignalsAll StopScope = iota
	// SignalsMainThenKillsRest: mixed — SIGTERM to the main process,
	// SIGKILL to the rest of the control group.
	SignalsMainThenKillsRest
	// SignalsMainOnly: process — the main process alone.
	SignalsMainOnly
	// SignalsNone: none (deprecated by systemd) — nothing is signalled.
	SignalsNone
)

func (s StopScope) String() string {
	return [...]string{"every process of the control group", "the main process, then SIGKILL to the rest", "the main process only", "nothing"}[s]
}

// StopSignals maps a KillMode= value to its StopScope; an unknown value is
// treated as the default, control-group.
func StopSignals(killMode string) StopScope {
	switch killMode {
	case "mixed":
		return SignalsMainThenKillsRest
	case "process":
		return SignalsMainOnly
	case "none":
		return SignalsNone
	}
	return SignalsAll
}

// UnitView is what systemd reads from a service unit, for the settings
// SystemdUnit writes: each single-valued setting's effective (last) value,
// with systemd's quoting, escapes and specifier %% undone.
type UnitView struct {
	ExecStart       []string // argv
	KillMode        string   // "" when not set (control-group)
	Restart         string
	EnvironmentFile string
	Environment     []string // NAME=value, in order
	WantedBy        []string
}

// ReadSystemdUnit parses a unit file (go-systemd's unit parser for the
// file's structure, SplitExec/SplitWords for the values).
func ReadSystemdUnit(data []byte) (*UnitView, error) {
	opts, err := unit.DeserializeOptions(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	v := &UnitView{}
	for _, o := range opts {
		var err error
		switch o.Section + "." + o.Name {
		case "Service.ExecStart":
			v.ExecStart, err = SplitExec(o.Value)
		case "Service.KillMode":
			v.KillMode = o.Value
		case "Service.Restart":
			v.Restart = o.Value
		case "Service.EnvironmentFile":
			v.EnvironmentFile, err = unspecify(strings.TrimPrefix(o.Value, "-"))
		case "Service.Environment":
			var words []string
			words, err = SplitWords(o.Value, false)
			v.Environment = append(v.Environment, words...)
		case "Install.WantedBy":
			v.WantedBy = append(v.WantedBy, strings.Fields(o.Value)...)
		}
		if err != nil {
			return nil, fmt.Errorf("%s=%s: %w", o.Name, o.Value, err)
		}
	}
	return v, nil
}

// SplitExec reads an Exec line (ExecStart=…) into argv as systemd does
// (systemd.service(5) "Command lines", systemd.syntax(7)): words split at
// blanks, '"' or '\” quoted with C escapes, "%%" for '%', and in the
// arguments (not the executable) "$$" for '$'. What this package never
// writes — exec prefixes (-@:+!), other specifiers, $VARIABLE expansion — is
// an error rather than a guess.
func SplitExec(line string) ([]string, error) {
	words, err := SplitWords(line, true)
	if err != nil {
		return nil, err
	}
	if len(words) == 0 {
		return nil, errors.New("empty command line")
	}
	return words, nil
}

// SplitWords splits a setting's value into words (systemd.syntax(7)); with
// exec, '$' rules of Exec lines apply to every word after the first.
func SplitWords(s string, exec bool) ([]string, error) {
	var words []string
	i := 0
	for {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
		if i >= len(s) {
			return words, nil
		}
		if exec && len(words) == 0 && strings.ContainsRune("-@:+!", rune(s[i])) {
			return nil, fmt.Errorf("exec prefix %q is not supported here", s[i])
		}
		var w strings.Builder
		for i < len(s) && s[i] != ' ' && s[i] != '\t' {
			c := s[i]
			switch c {
			case '"', '\'':
				j := i + 1
				for j < len(s) && s[j] != c {
					if s[j] == '\\' {
						j++
					}
					j++
				}
				if j >= len(s) {
					return nil, fmt.Errorf("unterminated %c quote", c)
				}
				if err := unescape(&w, s[i+1:j]); err != nil {
					return nil, err
				}
				i = j + 1
				if i < len(s) && s[i] != ' ' && s[i] != '\t' {
					return nil, errors.New("a closing quote must be followed by a blank or the end")
				}
			default:
				j := i
				for j < len(s) && s[j] != ' ' && s[j] != '\t' && s[j] != '"' && s[j] != '\'' {
					if s[j] == '\\' {
						j++
					}
					j++
				}
				if j > len(s) {
					j = len(s)
				}
				if err := unescape(&w, s[i:j]); err != nil {
					return nil, err
				}
				i = j
			}
		}
		word, err := unspecify(w.String())
		if err != nil {
			return nil, err
		}
		if exec && len(words) > 0 {
			if word, err = undollar(word); err != nil {
				return nil, err
			}
		}
		words = append(words, word)
	}
}

// unescape writes s with C escapes undone.
func unescape(b *strings.Builder, s string) error {
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		i++
		if i >= len(s) {
			return errors.New("a trailing backslash")
		}
		switch c := s[i]; c {
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 's':
			b.WriteByte(' ')
		case '\\', '"', '\'':
			b.WriteByte(c)
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[c]
			if i+1+n > len(s) {
				return fmt.Errorf(`\%c needs %d hex digits`, c, n)
			}
			v, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32)
			if err != nil {
				return fmt.Errorf(`\%c needs %d hex digits`, c, n)
			}
			if c == 'x' {
				b.WriteByte(byte(v))
			} else {
				if !utf8.ValidRune(rune(v)) {
					return fmt.Errorf(`\%c%s is not a character`, c, s[i+1:i+1+n])
				}
				b.WriteRune(rune(v))
			}
			i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			if i+3 > len(s) {
				return errors.New("an octal escape needs 3 digits")
			}
			v, err := strconv.ParseUint(s[i:i+3], 8, 8)
			if err != nil {
				return errors.New("an octal escape needs 3 digits")
			}
			b.WriteByte(byte(v))
			i += 2
		default:
			return fmt.Errorf(`unknown escape \%c`, c)
		}
	}
	return nil
}

// unspecify undoes "%%"; any other specifier is an error.
func unspecify(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '%' {
			b.WriteByte('%')
			i++
			continue
		}
		return "", fmt.Errorf("specifier %q is not supported here", s[i:min(i+2, len(s))])
	}
	return b.String(), nil
}

// undollar undoes "$$"; a $VARIABLE is an error.
func undollar(s string) (string, error) {
	if !strings.Contains(s, "$") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '$' {
			b.WriteByte('$')
			i++
			continue
		}
		return "", fmt.Errorf("variable expansion %q is not supported here", s[i:])
	}
	return b.String(), nil
}
