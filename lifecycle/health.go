package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Health is the body of fleetd's GET /healthz: {"status":"ok","name":"kb"}
// (the name field is #160's unit 1, "give a fleet a name").
type Health struct {
	Status string `json:"status"`
	Name   string `json:"name"`
}

// Probe asks the daemon on 127.0.0.1:port for /healthz. It returns the
// decoded body and the round-trip latency, or an error when nothing answers
// or what answers is not fleetd-like (non-200, not JSON, no name).
func Probe(ctx context.Context, client *http.Client, port int) (Health, time.Duration, error) {
	url := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Health{}, 0, err
	}
	t0 := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return Health{}, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	lat := time.Since(t0)
	if err != nil {
		return Health{}, lat, err
	}
	if resp.StatusCode != http.StatusOK {
		return Health{}, lat, fmt.Errorf("%s answered HTTP %d", url, resp.StatusCode)
	}
	var h Health
	if err := json.Unmarshal(body, &h); err != nil || h.Name == "" {
		return Health{}, lat, fmt.Errorf("%s answered, but not as a fleetd (no JSON name field)", url)
	}
	return h, lat, nil
}

// portFree reports whether 127.0.0.1:port can be bound right now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}
