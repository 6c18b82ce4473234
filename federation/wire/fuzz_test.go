package wire

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzVerify: any headers and body are refused or accepted with a reason,
// never a panic; an accepted message verifies again only as a replay.
func FuzzVerify(f *testing.F) {
	fx := newFixture(f)
	good := fx.request(f, fx.alpha, nil)
	hj, _ := json.Marshal(good.Headers)
	f.Add(hj, good.Body, "fleet.control", "beta")
	f.Add([]byte(`{"x-fleetmgr-key":"ed25519:","x-fleetmgr-sig":"AA=="}`), []byte("{}"), "", "")
	f.Add([]byte(`{"x-fleetmgr-v":1,"x-fleetmgr-kind":"presence","x-fleetmgr-key":"k","x-fleetmgr-sig":"s","x-fleetmgr-seq":-1}`), []byte(nil), "fleet.roster", "roster.x")
	f.Fuzz(func(t *testing.T, headers, body []byte, exchange, key string) {
		var h map[string]any
		if json.Unmarshal(headers, &h) != nil {
			return
		}
		// JSON numbers arrive as float64; give the integer headers the
		// types AMQP would.
		for k, v := range h {
			if n, ok := v.(float64); ok {
				h[k] = int64(n)
			}
		}
		seen := &MemorySeen{Now: func() time.Time { return fx.now }}
		d := Delivery{Exchange: exchange, RoutingKey: key, Headers: h, Body: body}
		v, rej := fx.v.Verify(d, controlRoute(), seen)
		if (v == nil) == (rej == nil) {
			t.Fatalf("verified %v and rejected %v", v, rej)
		}
		if rej != nil && rej.Reason == "" {
			t.Fatal("rejection without a reason")
		}
		if v != nil {
			if _, rej := fx.v.Verify(d, controlRoute(), seen); rej == nil || rej.Reason != ReasonReplayed {
				t.Fatalf("second delivery: %v", rej)
			}
		}
	})
}
