package brokertest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// rabbitmqctl stops and starts the local RabbitMQ's application with
// rabbitmqctl (the Erlang node, epmd and the listeners' owner keep
// running; queues and messages are kept).
type rabbitmqctl struct{}

// path finds rabbitmqctl on PATH or where Debian installs it.
func (rabbitmqctl) path() (string, error) {
	bin, err := exec.LookPath("rabbitmqctl")
	if err == nil {
		return bin, nil
	}
	for _, p := range []string{"/usr/sbin/rabbitmqctl", "/usr/lib/rabbitmq/bin/rabbitmqctl"} {
		if _, serr := os.Stat(p); serr == nil {
			return p, nil
		}
	}
	return "", err
}

func (r rabbitmqctl) usable() string {
	if _, err := r.path(); err != nil {
		return "rabbitmqctl, not found (" + err.Error() + ")"
	}
	return ""
}

func (r rabbitmqctl) stop(t testing.TB)  { t.Helper(); r.run(t, "stop_app") }
func (r rabbitmqctl) start(t testing.TB) { t.Helper(); r.run(t, "start_app") }

// run runs rabbitmqctl with args, bounded to 60 s.
func (r rabbitmqctl) run(t testing.TB, args ...string) {
	t.Helper()
	bin, err := r.path()
	if err != nil {
		t.Fatalf("%s: rabbitmqctl: %v", NameRabbitMQ, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: rabbitmqctl %s: %v\n%s", NameRabbitMQ, strings.Join(args, " "), err, out)
	}
}

// version is `rabbitmqctl version` (the version of the RabbitMQ tools,
// installed with the server from the same package).
func (r rabbitmqctl) version() (string, error) {
	bin, err := r.path()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	return strings.TrimSpace(string(out)), err
}
