package journal

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// TestAppendEventIsMarshal: the writer's encoder gives json.Marshal's
// bytes for the events serve writes (and the odd strings and values it
// may meet), falling back to it where it does not encode a value itself.
func TestAppendEventIsMarshal(t *testing.T) {
	at := time.Date(2026, 12, 3, 17, 1, 2, 345678900, time.UTC)
	odd := "a<b>&c\"d\\e\n\r\t\b\f\x01\x1f \u2028\u2029 é 日本 \xff\xfe end"
	cases := []Event{
		{Seq: 1, Time: at, Kind: KindCall},
		{Seq: 2, Time: at.Add(time.Second), Fleet: "kb", Kind: KindCall, Origin: "unix uid=0 pid=1 (fleetmgr) client e2e", Outcome: "ok", Detail: "fleet_whoami",
			Data: map[string]any{"tool": "fleet_whoami", "duration_ms": 1.234, "result_bytes": 57}},
		{Seq: 3, Time: at, Host: "beta", Fleet: "docs@beta", Member: odd, Kind: odd, Origin: odd, Outcome: odd, Detail: odd,
			Data: map[string]any{odd: odd, "b": true, "i64": int64(-7), "u": uint64(1 << 63), "f0": 0.0, "f": -12.5, "big": 1e20,
				"raw": json.RawMessage(`{"a":[1,2,"x"]}`)}},
		{Seq: 4, Time: at, Kind: KindVerdict, Data: map[string]any{"tiny": 1e-9}},                                 // exponent: fallback
		{Seq: 5, Time: at, Kind: KindCall, Data: map[string]any{"arguments": json.RawMessage(`{ "a" : "<x>" }`)}}, // not compact: fallback
		{Seq: 6, Time: at, Kind: KindControl, Data: map[string]any{"tools": []string{"a", "b"}}},                  // a slice: fallback
		{Seq: 7, Time: at.In(time.FixedZone("x", 3600)), Kind: KindPhase},
	}
	for i, e := range cases {
		want, err := json.Marshal(&e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodeEvent([]byte("prefix"), &e)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if !bytes.Equal(got, append([]byte("prefix"), want...)) {
			t.Errorf("case %d:\n got %s\nwant prefix%s", i, got, want)
		}
	}
}

// BenchmarkEncodeCall is the encoder's cost for a call event, against
// json.Marshal's.
func BenchmarkEncodeCall(b *testing.B) {
	e := Event{Seq: 123456, Time: time.Now().UTC(), Fleet: "kb", Kind: KindCall, Origin: "http uid=1000 pid=4242 (claude) client claude-code", Outcome: "ok", Detail: "fleet_whoami",
		Data: map[string]any{"tool": "fleet_whoami", "duration_ms": 1.234, "result_bytes": 57}}
	b.Run("append", func(b *testing.B) {
		var buf []byte
		for b.Loop() {
			buf, _ = encodeEvent(buf[:0], &e)
		}
	})
	b.Run("marshal", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(&e)
		}
	})
}

// FuzzEncodeEventIsMarshal is the differential fuzz of the writer's
// encoder against encoding/json: for any event fields and data values,
// encodeEvent's bytes are json.Marshal's (or both fail).
func FuzzEncodeEventIsMarshal(f *testing.F) {
	f.Add(uint64(1), int64(1764781262345678900), 0, "", "kb", "", KindCall, "unix uid=0", "ok", "fleet_whoami", "duration_ms", "x", 1.234, int64(57), true, []byte(`{"a":[1,2]}`))
	f.Add(uint64(1<<63), int64(-1), 3600, "beta", "docs@beta", "a<b>&c\"\\\n\u2028", "k\xff", "\x01", "", "é", "", "\xfe", 1e-9, int64(-7), false, []byte(`{ "a" : 1 }`))
	f.Add(uint64(0), int64(0), -45000, "", "", "", "", "", "", "", "k", "", 1e21, int64(1<<62), true, []byte("not json"))
	f.Fuzz(func(t *testing.T, seq uint64, nanos int64, zone int, host, fleet, member, kind, origin, outcome, detail, key, sval string, fv float64, iv int64, bv bool, raw []byte) {
		at := time.Unix(0, nanos).In(time.FixedZone("z", zone%(18*3600)))
		e := Event{Seq: seq, Time: at, Host: host, Fleet: fleet, Member: member, Kind: kind, Origin: origin, Outcome: outcome, Detail: detail}
		if key != "" {
			e.Data = map[string]any{key: sval, key + "f": fv, key + "i": iv, key + "b": bv, key + "u": uint64(iv)}
			if json.Valid(raw) {
				e.Data[key+"r"] = json.RawMessage(raw)
			}
		}
		want, werr := json.Marshal(&e)
		got, gerr := encodeEvent(nil, &e)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("json.Marshal error %v, encodeEvent error %v", werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("\n got %s\nwant %s", got, want)
		}
	})
}
