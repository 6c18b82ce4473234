package journal

import (
	"encoding/json"
	"math"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// appendEvent appends e's JSON to b: the same bytes json.Marshal(e) gives
// (TestAppendEventIsMarshal), without reflection, for the writer's hot
// path (a profile of the Overhead bench put json.Marshal at most of the
// journal's remaining cost per call). Data values of other types than
// string, bool, float64, int, int64, uint64 and json.RawMessage (or a
// float json writes in exponent form) fall back to json.Marshal of Data.
func appendEvent(b []byte, e *Event) ([]byte, error) {
	b = append(b, `{"seq":`...)
	b = strconv.AppendUint(b, e.Seq, 10)
	b = append(b, `,"time":"`...)
	b = e.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	for _, f := range [...]struct {
		key, v string
		always bool
	}{{`,"host":`, e.Host, false}, {`,"fleet":`, e.Fleet, false}, {`,"member":`, e.Member, false},
		{`,"kind":`, e.Kind, true}, {`,"origin":`, e.Origin, false}, {`,"outcome":`, e.Outcome, false}, {`,"detail":`, e.Detail, false}} {
		if f.v != "" || f.always {
			b = appendString(append(b, f.key...), f.v)
		}
	}
	if len(e.Data) > 0 {
		b = append(b, `,"data":`...)
		var ok bool
		if b, ok = appendData(b, e.Data); !ok {
			return b, errFallback
		}
	}
	return append(b, '}'), nil
}

// errFallback says appendEvent met a value it does not encode itself.
var errFallback = &json.UnsupportedValueError{Str: "journal: data value for json.Marshal"}

// encodeEvent is appendEvent, or json.Marshal where appendEvent falls back.
func encodeEvent(b []byte, e *Event) ([]byte, error) {
	n := len(b)
	out, err := appendEvent(b, e)
	if err == nil {
		return out, nil
	}
	v, err := json.Marshal(e)
	if err != nil {
		return b[:n], err
	}
	return append(b[:n], v...), nil
}

func appendData(b []byte, d map[string]any) ([]byte, bool) {
	keys := make([]string, 0, len(d))
	for k := range d {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(appendString(b, k), ':')
		switch v := d[k].(type) {
		case string:
			b = appendString(b, v)
		case bool:
			b = strconv.AppendBool(b, v)
		case int:
			b = strconv.AppendInt(b, int64(v), 10)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		case uint64:
			b = strconv.AppendUint(b, v, 10)
		case float64:
			a := math.Abs(v)
			if math.IsNaN(v) || math.IsInf(v, 0) || a != 0 && (a < 1e-6 || a >= 1e21) {
				return b, false
			}
			b = strconv.AppendFloat(b, v, 'f', -1, 64)
		case json.RawMessage:
			if !json.Valid(v) || len(v) == 0 {
				return b, false
			}
			c := len(b)
			b = append(b, v...)
			if compacted(b[c:]) {
				break
			}
			return b, false
		default:
			return b, false
		}
	}
	return append(b, '}'), true
}

// compacted reports whether raw JSON has no whitespace outside strings
// (json.Marshal compacts a RawMessage; appendEvent leaves such to it).
func compacted(v []byte) bool {
	in := false
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case in && c == '\\':
			i++
		case c == '"':
			in = !in
		case !in && (c == ' ' || c == '\n' || c == '\t' || c == '\r'):
			return false
		case in && (c == '<' || c == '>' || c == '&' || c >= utf8.RuneSelf):
			return false // json.Marshal would escape these
		}
	}
	return true
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string as encoding/json writes it
// (HTML-escaped, invalid UTF-8 as U+FFFD, U+2028 and U+2029 escaped).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(append(b, s[start:i]...), `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(append(b, s[start:]...), '"')
}
