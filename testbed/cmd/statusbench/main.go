// Command statusbench is test equipment: it measures `fleetmgr status`
// on the stand-ins at scale and prints the figures.
//
// It generates F fleets × M members worktrees of N empty files each (once,
// reused on later runs), starts F fleets (herdr + fleetd stand-ins), spawns
// M members per fleet that all claim to be working (one in each fleet also
// writes a file, one prints), starts `fleetmgr serve` (its inotify watcher
// scans every worktree root), and then measures:
//
//   - serve's idle CPU while watching (utime+stime over -idle),
//   - one `fleetmgr status --json` through the daemon: wall, CPU seconds of
//     the CLI and of serve, the CLI's peak RSS and serve's RSS,
//   - one `fleetmgr status --json --local` (walking every busy worktree
//     twice, in this process): wall, CPU seconds, peak RSS.
//
// Usage: scripts/status-bench [-fleets 10] [-members 8] [-files 50000] …
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/fleetmgr/fleetmgr/status"
	"github.com/fleetmgr/fleetmgr/testbed/syncbuf"
)

func main() {
	fleets := flag.Int("fleets", 10, "fleets")
	members := flag.Int("members", 8, "members per fleet")
	files := flag.Int("files", 50000, "files per member worktree")
	perDir := flag.Int("per-dir", 100, "files per leaf directory (directories, not files, cost watches)")
	dir := flag.String("dir", filepath.Join(os.TempDir(), "fmbench"), "work directory (the generated trees are kept and reused)")
	bin := flag.String("bin", "", "directory holding fleetmgr, herdr and fleetd (built from this module)")
	interval := flag.Duration("interval", 2*time.Second, "status sample interval")
	idle := flag.Duration("idle", 20*time.Second, "how long to measure serve's idle CPU")
	runs := flag.Int("runs", 3, "daemon status runs with --fresh")
	cachedRuns := flag.Int("cached-runs", 20, "daemon status runs answered from serve's last sampling (p50 printed)")
	walk := flag.Bool("walk", true, "also measure a --local (walking) status")
	maxWatches := flag.Int("max-watches", 8192, "[status] max_watches (0: serve walks too, for comparison)")
	flag.Parse()
	if err := run(*fleets, *members, *files, *perDir, *dir, *bin, *interval, *idle, *runs, *cachedRuns, *walk, *maxWatches); err != nil {
		fmt.Fprintln(os.Stderr, "statusbench:", err)
		os.Exit(1)
	}
}

// generate makes dir/trees/f<i>/m<j> with n empty files each:
// d<k>/e<l>/<file>, perDir files per leaf directory, 10 leaves per d<k>, with
// four writers at a time. The trees are dated an hour back.
func generate(dir string, fleets, members, n, perDir int) (time.Duration, error) {
	marker := filepath.Join(dir, fmt.Sprintf(".generated-%d-%d-%d-%d", fleets, members, n, perDir))
	if _, err := os.Stat(marker); err == nil {
		return 0, nil
	}
	t0 := time.Now()
	if err := os.RemoveAll(filepath.Join(dir, "trees")); err != nil {
		return 0, err
	}
	jobs := make(chan string)
	errs := make(chan error, fleets*members)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Go(func() {
			for wt := range jobs {
				errs <- generateOne(wt, n, perDir)
			}
		})
	}
	for i := 1; i <= fleets; i++ {
		for j := 1; j <= members; j++ {
			jobs <- filepath.Join(dir, "trees", fmt.Sprintf("f%d", i), fmt.Sprintf("m%d", j))
		}
		fmt.Fprintf(os.Stderr, "generating fleet %d/%d (%s)\n", i, fleets, time.Since(t0).Round(time.Second))
	}
	close(jobs)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return time.Since(t0), os.WriteFile(marker, nil, 0o644)
}

// generateOne fills one worktree.
func generateOne(wt string, n, perDir int) error {
	for k := 0; k < n; k++ {
		leaf := filepath.Join(wt, fmt.Sprintf("d%03d", k/perDir/10), fmt.Sprintf("e%d", k/perDir%10))
		if k%perDir == 0 {
			if err := os.MkdirAll(leaf, 0o755); err != nil {
				return err
			}
		}
		f, err := os.OpenFile(filepath.Join(leaf, fmt.Sprintf("f%05d.go", k)), os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		f.Close()
	}
	old := time.Now().Add(-time.Hour)
	return filepath.WalkDir(wt, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chtimes(p, old, old)
		}
		return nil
	})
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// cpuOf is utime+stime of pid in seconds (/proc/PID/stat fields 14, 15).
func cpuOf(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseFloat(fields[11], 64)
	k, _ := strconv.ParseFloat(fields[12], 64)
	return (u + k) / 100 // USER_HZ
}

// rssOf is VmRSS and VmHWM of pid in MiB.
func rssOf(pid int) (rss, hwm float64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb float64
		if strings.HasPrefix(sc.Text(), "VmRSS:") {
			fmt.Sscan(strings.TrimPrefix(sc.Text(), "VmRSS:"), &kb)
			rss = kb / 1024
		}
		if strings.HasPrefix(sc.Text(), "VmHWM:") {
			fmt.Sscan(strings.TrimPrefix(sc.Text(), "VmHWM:"), &kb)
			hwm = kb / 1024
		}
	}
	return rss, hwm
}

type measured struct {
	wall, cpu, rssMiB float64
	rep               *status.Report
}

func run(fleets, members, files, perDir int, dir, bin string, interval, idle time.Duration, runs, cachedRuns int, walk bool, maxWatches int) error {
	if bin == "" {
		return errors.New("-bin is required (scripts/status-bench builds it)")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	gen, err := generate(dir, fleets, members, files, perDir)
	if err != nil {
		return err
	}
	run, err := os.MkdirTemp(dir, "run")
	if err != nil {
		return err
	}
	defer os.RemoveAll(run)
	home := filepath.Join(run, "home")
	_ = os.MkdirAll(home, 0o700)
	env := []string{}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "HERDR_") || strings.HasPrefix(kv, "XDG_CONFIG_HOME=") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "XDG_CONFIG_HOME="+filepath.Join(run, "xdg"), "HOME="+home)
	listen := fmt.Sprintf("127.0.0.1:%d", freePort())
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "[manager]\nlisten = %q\nstate_dir = %q\nherdr_bin = %q\nport_range = [1024, 65535]\nstop_grace = \"3s\"\nstart_timeout = \"30s\"\n\n[status]\ninterval = %q\nmax_watches = %d\n",
		listen, filepath.Join(run, "state"), filepath.Join(bin, "herdr"), interval.String(), maxWatches)
	ports := map[string]int{}
	for i := 1; i <= fleets; i++ {
		name := fmt.Sprintf("f%d", i)
		ports[name] = freePort()
		proj := filepath.Join(run, "proj-"+name)
		_ = os.MkdirAll(proj, 0o755)
		fmt.Fprintf(&cfg, "\n[fleets.%s]\nproject = %q\ncommand = [%q, \"--config\", \"{{.ConfigPath}}\"]\nport = %d\nworktree_root = %q\n",
			name, proj, filepath.Join(bin, "fleetd"), ports[name], filepath.Join(dir, "trees", name))
	}
	cfgPath := filepath.Join(run, "fleets.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg.String()), 0o644); err != nil {
		return err
	}
	fm := func(args ...string) *exec.Cmd {
		c := exec.Command(filepath.Join(bin, "fleetmgr"), append([]string{"--config", cfgPath}, args...)...)
		c.Env = env
		return c
	}
	defer func() {
		c := fm("stop", "--all", "--yes") // its members end with it: no question (issue 24.3)
		c.Stdout, c.Stderr = os.Stderr, os.Stderr
		_ = c.Run()
	}()
	t0 := time.Now()
	if out, err := fm("start", "--all").CombinedOutput(); err != nil {
		return fmt.Errorf("start: %v\n%s", err, out)
	}
	fmt.Fprintf(os.Stderr, "started %d fleets in %s\n", fleets, time.Since(t0).Round(time.Millisecond))

	// Members: all claim working; m1 writes, m2 prints, the rest do nothing.
	claim := `printf '\033]777;herdr-status;working\007'; `
	ctx := context.Background()
	client := mcp.NewClient(&mcp.Implementation{Name: "statusbench", Version: "test"}, nil)
	for i := 1; i <= fleets; i++ {
		name := fmt.Sprintf("f%d", i)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: fmt.Sprintf("http://127.0.0.1:%d/mcp", ports[name]), MaxRetries: -1}, nil)
		if err != nil {
			return err
		}
		for j := 1; j <= members; j++ {
			cmd := claim + "sleep 100000"
			switch j {
			case 1:
				cmd = claim + "while true; do date >> bench.txt; sleep 0.5; done"
			case 2:
				cmd = claim + "while true; do date; sleep 0.5; done"
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fleet_spawn", Arguments: map[string]any{"id": fmt.Sprintf("m%d", j), "command": cmd}})
			if err != nil || res.IsError {
				return fmt.Errorf("spawn %s/m%d: %v %+v", name, j, err, res)
			}
		}
		cs.Close()
	}
	time.Sleep(2 * time.Second) // let every shell print its status escape

	// serve, with its watcher scanning every worktree root.
	var serveLog syncbuf.Buffer
	serve := fm("serve")
	serve.Stdout, serve.Stderr = &serveLog, &serveLog
	serve.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	t0 = time.Now()
	if err := serve.Start(); err != nil {
		return err
	}
	defer func() {
		_ = serve.Process.Signal(syscall.SIGTERM)
		_ = serve.Wait()
	}()
	deadline := time.Now().Add(10 * time.Minute)
	for maxWatches > 0 && strings.Count(serveLog.String(), "status watcher: root watched") < fleets {
		if time.Now().After(deadline) {
			return fmt.Errorf("watcher did not scan every root:\n%s", serveLog.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	scan := time.Since(t0)
	scanCPU := cpuOf(serve.Process.Pid)
	_, scanHWM := rssOf(serve.Process.Pid)
	watches := 0
	for _, line := range strings.Split(serveLog.String(), "\n") {
		if i := strings.Index(line, " watches="); i >= 0 && strings.Contains(line, "root watched") {
			n, _ := strconv.Atoi(strings.Fields(line[i+len(" watches="):])[0])
			watches += n
		}
	}

	// Idle CPU of serve while watching (members keep writing/printing).
	c0 := cpuOf(serve.Process.Pid)
	time.Sleep(idle)
	idleCPU := (cpuOf(serve.Process.Pid) - c0) / idle.Seconds()

	measure := func(args ...string) (measured, error) {
		c := fm(append([]string{"status", "--json"}, args...)...)
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		s0 := cpuOf(serve.Process.Pid)
		t := time.Now()
		if err := c.Run(); err != nil {
			return measured{}, fmt.Errorf("status %v: %v\n%s", args, err, errb.String())
		}
		wall := time.Since(t).Seconds()
		ru := c.ProcessState.SysUsage().(*syscall.Rusage)
		cpu := time.Duration(ru.Utime.Nano()+ru.Stime.Nano()).Seconds() + cpuOf(serve.Process.Pid) - s0
		if len(args) > 0 && args[0] == "--local" { // serve did not take part
			cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		}
		var rep status.Report
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			return measured{}, err
		}
		return measured{wall: wall, cpu: cpu, rssMiB: float64(ru.Maxrss) / 1024, rep: &rep}, nil
	}
	verdicts := func(r *status.Report) string {
		n := map[status.Verdict]int{}
		for _, f := range r.Fleets {
			for v, k := range f.Summary {
				n[v] += k
			}
		}
		return fmt.Sprintf("WORKING %d, STALLED %d, other %d", n[status.Working], n[status.Stalled], fleets*members-n[status.Working]-n[status.Stalled])
	}

	fmt.Printf("statusbench: %d fleets × %d members × %d files (%d per directory) = %d files; interval %s; %d CPUs; load %s\n",
		fleets, members, files, perDir, fleets*members*files, interval, runtime.NumCPU(), loadavg())
	if gen > 0 {
		fmt.Printf("  tree generation (once):            %.1f s\n", gen.Seconds())
	}
	if maxWatches == 0 {
		time.Sleep(3 * time.Second) // no watcher: give serve a moment to settle
		fmt.Printf("  [status] max_watches = 0: serve runs no watcher and walks\n")
	}
	fmt.Printf("  watcher initial scan (serve):      %.1f s wall, %.1f CPU-s, %d watches, serve peak RSS %.0f MiB\n", scan.Seconds(), scanCPU, watches, scanHWM)
	fmt.Printf("  serve idle CPU while watching:     %.2f %% of one core (over %s)\n", idleCPU*100, idle)
	for i := 1; i <= runs; i++ {
		m, err := measure("--fresh")
		if err != nil {
			return err
		}
		rss, _ := rssOf(serve.Process.Pid)
		fmt.Printf("  status --fresh via daemon run %d:   %.2f s wall (elapsed_ms %d), %.2f CPU-s (CLI+serve), CLI peak RSS %.0f MiB, serve RSS %.0f MiB; %s\n",
			i, m.wall, m.rep.ElapsedMS, m.cpu, m.rssMiB, rss, verdicts(m.rep))
	}
	// Answered from serve's last sampling (the default): the first call
	// wakes serve's background sampling, the rest are timed.
	if cachedRuns > 0 {
		if _, err := measure(); err != nil {
			return err
		}
		var walls []float64
		cached := 0
		for range cachedRuns {
			m, err := measure()
			if err != nil {
				return err
			}
			walls = append(walls, m.wall)
			if m.rep.Cached {
				cached++
			}
		}
		sort.Float64s(walls)
		fmt.Printf("  status (serve's last verdicts) ×%d: p50 %.0f ms, max %.0f ms wall (whole CLI process); %d of %d answered from the cache\n",
			cachedRuns, walls[len(walls)/2]*1000, walls[len(walls)-1]*1000, cached, cachedRuns)
	}
	// Fixed cost: the same status with a 100 ms interval.
	if m, err := measure("--interval", "100ms"); err == nil {
		fmt.Printf("  fixed cost (daemon, 100ms interval): %.2f s wall (elapsed_ms %d in serve), %.2f CPU-s\n", m.wall, m.rep.ElapsedMS, m.cpu)
	} else {
		return err
	}
	if walk {
		m, err := measure("--local")
		if err != nil {
			return err
		}
		fmt.Printf("  status --local (walk):             %.2f s wall (elapsed_ms %d), %.2f CPU-s, peak RSS %.0f MiB; %s\n",
			m.wall, m.rep.ElapsedMS, m.cpu, m.rssMiB, verdicts(m.rep))
	}
	fmt.Printf("  target: wall <= interval + 0.5 s = %.1f s\n", interval.Seconds()+0.5)
	return nil
}

// loadavg is the 1-minute load average (/proc/loadavg), for context.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
