// Command fedsim is test equipment: the federation benchmark
// (docs/FEDERATION.md "Benchmark"). For
// each N of -hosts it simulates N managers (each its own key, broker
// user, connection and -fleets fleets) in this process, runs one observing
// manager in a child process (this command, "observe"), and prints per N:
// provisioning and cold-start times, the observer's time to converge
// (every host online with its fleets), the time to expire a killed host,
// the observer's CPU (% of one core) and RSS over a steady window, and the
// broker's publish and deliver rates. Every run is bounded (-timeout) and
// deletes its vhost and users.
//
// Usage: go run ./testbed/cmd/fedsim [-hosts 10,50,100] [-fleets 10]
// [-heartbeat 2s] [-window 20s] [-serve PATH/fleetmgr -herdr PATH/herdr]
// (a real `fleetmgr serve` as the observer); the broker comes from
// FLEETMGR_TEST_BROKER_MGMT, FLEETMGR_TEST_AMQP, FLEETMGR_TEST_BROKER_USER
// and FLEETMGR_TEST_BROKER_PASSWORD (default: a local RabbitMQ, guest).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmgr/fleetmgr/testbed/fedsim"
)

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "observe" {
		if err := fedsim.Observe(os.Args[2], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "fedsim observe:", err)
			os.Exit(1)
		}
		return
	}
	hosts := flag.String("hosts", "10,50,100", "comma-separated numbers of simulated hosts, one run each")
	fleets := flag.Int("fleets", 10, "fleets per host")
	hb := flag.Duration("heartbeat", 2*time.Second, "heartbeat of every manager")
	window := flag.Duration("window", 20*time.Second, "steady-state measurement window")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound of each run")
	verbose := flag.Bool("v", false, "log progress")
	idle := flag.Bool("idle", false, "light hosts do not consume their roster queues (the broker still routes every beat to every queue)")
	full := flag.Bool("full", false, "simulate each host as a whole Federation (verifying everyone's presence in this process) instead of a light publisher")
	serve := flag.String("serve", "", "a fleetmgr binary: its `serve` observes instead of this command's observer (a real daemon; the figures are its own)")
	herdrBin := flag.String("herdr", "", "with -serve: its [manager] herdr_bin (default herdr; the testbed stand-in will do)")
	flag.Parse()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	lvl := slog.LevelWarn
	if *verbose {
		lvl = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	mgmt := env("FLEETMGR_TEST_BROKER_MGMT", "http://127.0.0.1:15672")
	obsName := "fedsim's own observer (a bare Federation)"
	if *serve != "" {
		obsName = "fleetmgr serve (" + *serve + ")"
	}
	fmt.Printf("broker %s, heartbeat %s, %d fleets per host, window %s, observer: %s\n", mgmt, *hb, *fleets, *window, obsName)
	fmt.Printf("%5s %10s %10s %10s %10s %11s %7s %7s %7s %9s %9s %8s %8s %5s\n", "N", "provision", "coldstart", "converge",
		"expire", "after-beat", "cpu%", "rssMB", "peakMB", "publish/s", "deliver/s", "age-p50", "age-p99", "flaps")
	failed := false
	for _, s := range strings.Split(*hosts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			fmt.Fprintln(os.Stderr, "bad -hosts:", err)
			os.Exit(2)
		}
		unlock, err := fedsim.LockBroker()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		ctx, cancel := context.WithTimeout(context.Background(), *timeout)
		r, err := fedsim.Run(ctx, fedsim.Options{
			MgmtURL: mgmt, AMQPURL: env("FLEETMGR_TEST_AMQP", "amqp://127.0.0.1:5672"),
			AdminUser: env("FLEETMGR_TEST_BROKER_USER", "guest"), AdminPassword: env("FLEETMGR_TEST_BROKER_PASSWORD", "guest"),
			Hosts: n, Fleets: *fleets, Heartbeat: *hb, Window: *window, Full: *full, Idle: *idle, ObserverExec: []string{self}, Log: log,
			Serve: *serve, HerdrBin: *herdrBin,
		})
		cancel()
		unlock()
		if err != nil {
			fmt.Fprintf(os.Stderr, "N=%d: %v\n", n, err)
			failed = true
			continue
		}
		fmt.Printf("%5d %10s %10s %10s %10s %11s %7.2f %7.1f %7.1f %9.1f %9.1f %8s %8s %5d\n", r.Hosts,
			r.Provision.Round(time.Millisecond), r.ColdStart.Round(time.Millisecond), r.Converge.Round(time.Millisecond),
			r.Expire.Round(time.Millisecond), r.ExpireAfterLastBeat.Round(time.Millisecond), r.ObserverCPU,
			r.ObserverRSSMB, r.ObserverPeak, r.PublishRate, r.DeliverRate, r.PresenceAgeP50, r.PresenceAgeP99, r.Flaps)
	}
	if failed {
		os.Exit(1)
	}
}
