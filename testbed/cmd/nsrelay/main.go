// Command nsrelay is test equipment, not part of fleetmgr: one half of the
// relay that carries the broker's loopback ports into a network namespace
// over a unix socket (package testbed/nsrelay, which starts both halves).
//
// Usage:
//
//	nsrelay outer -socket PATH -allow PORT[,PORT…] [-host 127.0.0.1] [-max-conns N]
//	nsrelay inner -socket PATH -listen PORT[,PORT…] [-host 127.0.0.1] [-max-conns N]
//
// outer runs in the host's namespace: it listens on the unix socket PATH and
// connects each connection to HOST:PORT for the port its header asks for,
// if allowed. inner runs inside the namespace: it listens on HOST:PORT for
// each port and carries each connection to PATH. Once listening, each
// prints "nsrelay: ready" alone on stdout; its log (one line per
// connection) goes to stderr. SIGTERM or SIGINT stops it: listeners and
// connections closed, exit status 0. Bad arguments: exit status 2.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/fleetmgr/fleetmgr/testbed/nsrelay"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "outer" && args[0] != "inner") {
		fmt.Fprintln(stderr, "usage: nsrelay outer|inner -socket PATH (-allow|-listen) PORT[,PORT…] [-host ADDR] [-max-conns N]")
		return 2
	}
	mode := args[0]
	fs := flag.NewFlagSet("nsrelay "+mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	socket := fs.String("socket", "", "the unix socket between the halves")
	host := fs.String("host", "127.0.0.1", "outer: the address ports are dialled on; inner: the address listened on")
	maxConns := fs.Int("max-conns", nsrelay.DefaultMaxConns, "connections relayed at once at most")
	portsFlag := "allow"
	portsHelp := "the only ports a connection may ask for (comma-separated)"
	if mode == "inner" {
		portsFlag, portsHelp = "listen", "the ports to listen on (comma-separated)"
	}
	portsArg := fs.String(portsFlag, "", portsHelp)
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	ports, err := parsePorts(*portsArg)
	if err != nil || *socket == "" || fs.NArg() != 0 {
		if err == nil {
			err = errors.New("-socket is required, and no arguments after the flags")
		}
		fmt.Fprintf(stderr, "nsrelay %s: -%s: %v\n", mode, portsFlag, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	lg := log.New(stderr, "nsrelay ", log.Ltime|log.Lmicroseconds)
	ready := func() { fmt.Fprintln(stdout, nsrelay.ReadyLine) }
	if mode == "outer" {
		err = (&nsrelay.Outer{Socket: *socket, Host: *host, Allow: ports, MaxConns: *maxConns, Log: lg}).Run(ctx, ready)
	} else {
		err = (&nsrelay.Inner{Socket: *socket, Host: *host, Listen: ports, MaxConns: *maxConns, Log: lg}).Run(ctx, ready)
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// parsePorts reads "P[,P…]", each 1–65535.
func parsePorts(s string) ([]int, error) {
	if s == "" {
		return nil, errors.New("no port given")
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		p, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || p <= 0 || p > 65535 {
			return nil, fmt.Errorf("%q is not a port (1-65535)", f)
		}
		out = append(out, p)
	}
	return out, nil
}
