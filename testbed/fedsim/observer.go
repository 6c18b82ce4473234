package fedsim

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fleetmgr/fleetmgr/proxy"
)

// observer is the observing manager's process and its events.
type observer struct {
	pid    int
	events <-chan event
	stop   func()
	// ages, when set, reads the presence age quantiles (p50, p99) at the
	// end of the window.
	ages func() (time.Duration, time.Duration)
	// arm, when set, is called just before the kill: the observer starts
	// watching for expiries (a serve is not polled during the window).
	arm func()
}

// startObserver runs ObserverExec … observe CONFIG (Observe) and relays
// the JSON events it prints.
func startObserver(ctx context.Context, o Options, cfg observerConfig, dir string) (*observer, error) {
	cfgPath := filepath.Join(dir, "observer.json")
	b, _ := json.Marshal(cfg)
	if err := os.WriteFile(cfgPath, b, 0o600); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, o.ObserverExec[0], append(o.ObserverExec[1:], "observe", cfgPath)...)
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	events := make(chan event, 64)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var e event
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				events <- e
			}
		}
	}()
	return &observer{pid: cmd.Process.Pid, events: events, stop: func() { stdin.Close(); _ = cmd.Wait() }}, nil
}

// The environment variables the serve observer's [broker] names for the
// administrator's credentials.
const (
	envAdminUser     = "FEDSIM_ADMIN_USER"
	envAdminPassword = "FEDSIM_ADMIN_PASSWORD"
)

// startServeObserver runs `fleetmgr serve` (Options.Serve) as the
// observing manager: a fleets.toml with [broker] and [federation] (host,
// the run's vhost, its heartbeat, every simulated host's trust line) and
// no fleet, its state dir the one fedsim made its key and broker password
// in (serve provisions itself again, idempotently, as at any start). Its
// events come from what it says: "connected" from its log line; then its
// view read with fleetmgr_list over MCP every 100 ms until every host is
// online with all its fleets ("converged"); then nothing is asked of it
// during the window; once armed (before the kill), fleetmgr_list every
// 100 ms again for hosts turning expired ("expired", with the time since
// the host's last beat as the view gives it). The presence age comes
// from its /metrics.
func startServeObserver(ctx context.Context, o Options, host, stateDir, vhost string, trust []string) (*observer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	listen := l.Addr().String()
	l.Close()
	q := make([]string, 0, len(trust))
	for _, t := range trust {
		if !strings.HasPrefix(t, host+" ") {
			q = append(q, strconv.Quote(t))
		}
	}
	herdrBin := o.HerdrBin
	if herdrBin == "" {
		herdrBin = "herdr"
	}
	toml := fmt.Sprintf(`[manager]
listen = %q
state_dir = %q
herdr_bin = %q

[broker]
management_url = %q
amqp_url = %q
admin_user_env = %q
admin_password_env = %q

[federation]
host = %q
vhost = %q
heartbeat = %q
trust = [%s]
`, listen, stateDir, herdrBin, o.MgmtURL, o.AMQPURL, envAdminUser, envAdminPassword, host, vhost, o.Heartbeat.String(), strings.Join(q, ",\n  "))
	cfgPath := filepath.Join(filepath.Dir(stateDir), "observer-fleets.toml")
	if err := os.WriteFile(cfgPath, []byte(toml), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(o.Serve, "--config", cfgPath, "serve")
	cmd.Env = append(os.Environ(), envAdminUser+"="+o.AdminUser, envAdminPassword+"="+o.AdminPassword)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	events := make(chan event, 64)
	armed := make(chan struct{})
	sctx, cancel := context.WithCancel(ctx)
	logged := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if o.Log != nil && (strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR")) {
				o.Log.Info("observer serve: " + line)
			}
			if strings.Contains(line, "federation: connected") {
				select {
				case logged <- line:
				default:
				}
			}
		}
	}()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	go func() {
		defer close(events)
		send := func(e event) bool {
			select {
			case events <- e:
				return true
			case <-sctx.Done():
				return false
			}
		}
		select {
		case <-logged:
		case <-exited:
			send(event{Event: "error", Err: "fleetmgr serve exited before connecting"})
			return
		case <-sctx.Done():
			return
		}
		if !send(event{Event: "connected"}) {
			return
		}
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "fedsim", Version: "bench"}, nil).Connect(sctx,
			&mcp.StreamableClientTransport{Endpoint: "http://" + listen + "/mcp", MaxRetries: -1}, nil)
		if err != nil {
			send(event{Event: "error", Err: "MCP session to serve: " + err.Error()})
			return
		}
		defer cs.Close()
		view := func() (*proxy.ListResult, error) {
			res, err := cs.CallTool(sctx, &mcp.CallToolParams{Name: "fleetmgr_list", Arguments: map[string]any{}})
			if err != nil {
				return nil, err
			}
			var lr proxy.ListResult
			b, _ := json.Marshal(res.StructuredContent)
			if err := json.Unmarshal(b, &lr); err != nil || lr.Federation == nil {
				return nil, fmt.Errorf("fleetmgr_list: no federation (%v)", err)
			}
			return &lr, nil
		}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			lr, err := view()
			if err != nil {
				send(event{Event: "error", Err: err.Error()})
				return
			}
			online := 0
			for _, h := range lr.Federation.Hosts {
				if h.State == "online" && h.Fleets == o.Fleets {
					online++
				}
			}
			if online == o.Hosts {
				send(event{Event: "converged", Online: online})
				break
			}
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
		}
		select { // the window: nothing is asked of serve
		case <-armed:
		case <-sctx.Done():
			return
		}
		seen := map[string]bool{}
		for {
			lr, err := view()
			if err != nil {
				send(event{Event: "error", Err: err.Error()})
				return
			}
			for _, h := range lr.Federation.Hosts {
				if h.State == "expired" && !seen[h.Host] {
					seen[h.Host] = true
					since := int64(0)
					if !h.LastSeen.IsZero() {
						since = time.Since(h.LastSeen).Milliseconds()
					}
					if !send(event{Event: "expired", Host: h.Host, SinceLastSeenMS: since}) {
						return
					}
				}
			}
			select {
			case <-sctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	ages := func() (time.Duration, time.Duration) {
		resp, err := http.Get("http://" + listen + "/metrics")
		if err != nil {
			return 0, 0
		}
		defer resp.Body.Close()
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(resp.Body)
		if err != nil {
			return 0, 0
		}
		fam := fams["fleetmgr_federation_presence_age_seconds"]
		if fam == nil || len(fam.Metric) == 0 || fam.Metric[0].Histogram == nil {
			return 0, 0
		}
		h := fam.Metric[0].Histogram
		n := float64(h.GetSampleCount())
		p50, p99 := -1.0, -1.0
		for _, b := range h.Bucket {
			c := float64(b.GetCumulativeCount())
			if p50 < 0 && c >= 0.5*n {
				p50 = b.GetUpperBound()
			}
			if p99 < 0 && c >= 0.99*n {
				p99 = b.GetUpperBound()
			}
		}
		sec := func(f float64) time.Duration { return time.Duration(max(f, 0) * float64(time.Second)) }
		return sec(p50), sec(p99)
	}
	stop := func() {
		cancel()
		_ = cmd.Process.Signal(syscall.SIGTERM) // a clean stop: offline announced
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	}
	var once bool
	arm := func() {
		if !once {
			once = true
			close(armed)
		}
	}
	return &observer{pid: cmd.Process.Pid, events: events, stop: stop, ages: ages, arm: arm}, nil
}
