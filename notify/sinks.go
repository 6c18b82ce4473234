package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/fleetmgr/fleetmgr/atomicfile"
	"github.com/fleetmgr/fleetmgr/herdr"
	"github.com/fleetmgr/fleetmgr/registry"
)

// SinkEnv is what the herdr and mcp sinks reach through.
type SinkEnv struct {
	// HerdrSockets lists the operator's herdr sessions' sockets (serve:
	// those of [guard] operator_sessions).
	HerdrSockets func() []string
	// MCP sends the event as notifications/message (level warning) to
	// the connected MCP sessions that set a log level of warning or lower
	// (logging/setLevel); it reports how many took it.
	MCP func(ctx context.Context, e Event) (int, error)
}

// Senders returns the sink constructor over env (nil: the herdr and mcp
// sinks report that they have nowhere to go).
func Senders(env *SinkEnv) func(registry.NotifySink) Sender {
	if env == nil {
		env = &SinkEnv{}
	}
	return func(s registry.NotifySink) Sender {
		switch s.Type {
		case "webhook":
			return &Webhook{Sink: s}
		case "command":
			return &Command{Argv: s.Command}
		case "herdr":
			return herdrSink{env.HerdrSockets}
		case "mcp":
			return mcpSink{env.MCP}
		}
		return errSink{fmt.Errorf("unknown sink type %q", s.Type)}
	}
}

type errSink struct{ error }

func (e errSink) Send(context.Context, Event) error { return e.error }

// Webhook POSTs the event through go-retryablehttp (3 retries, 1–8 s
// exponential backoff). The URL comes from the environment variable
// Sink.URLEnv or the file Sink.URLFile (which must be mode 0600) at each
// send; errors never show it (it carries a token).
type Webhook struct {
	Sink registry.NotifySink
	// Client overrides the HTTP client (tests); nil: a retryablehttp one.
	Client *retryablehttp.Client
}

// URL resolves the webhook's URL.
func (w *Webhook) URL() (string, error) {
	if w.Sink.URLEnv != "" {
		u := strings.TrimSpace(os.Getenv(w.Sink.URLEnv))
		if u == "" {
			return "", fmt.Errorf("$%s (url_env) is not set in serve's environment", w.Sink.URLEnv)
		}
		return u, nil
	}
	fi, err := os.Stat(w.Sink.URLFile)
	if err != nil {
		return "", fmt.Errorf("url_file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("url_file %s has mode %04o: it must be readable by its owner only (chmod 600)", w.Sink.URLFile, fi.Mode().Perm())
	}
	b, err := atomicfile.Read(w.Sink.URLFile, 64<<10)
	if err != nil {
		return "", fmt.Errorf("url_file: %w", err)
	}
	u := strings.TrimSpace(string(b))
	if u == "" {
		return "", fmt.Errorf("url_file %s is empty", w.Sink.URLFile)
	}
	return u, nil
}

// Body renders the request body and content type of preset for e.
func Body(preset string, e Event) ([]byte, string, error) {
	switch preset {
	case "slack":
		b, err := json.Marshal(map[string]string{"text": e.Text})
		return b, "application/json", err
	case "discord":
		b, err := json.Marshal(map[string]string{"content": e.Text})
		return b, "application/json", err
	case "ntfy":
		return []byte(e.Text), "text/plain; charset=utf-8", nil
	}
	b, err := json.Marshal(e)
	return b, "application/json", err
}

// Send posts e; a status other than 2xx after the retries is an error.
func (w *Webhook) Send(ctx context.Context, e Event) error {
	u, err := w.URL()
	if err != nil {
		return err
	}
	body, ctype, err := Body(w.Sink.Preset, e)
	if err != nil {
		return err
	}
	c := w.Client
	if c == nil {
		c = retryablehttp.NewClient()
		c.RetryMax, c.RetryWaitMin, c.RetryWaitMax = 3, time.Second, 8*time.Second
		c.Logger = nil
		c.HTTPClient.Timeout = 10 * time.Second
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, u, body)
	if err != nil {
		return errors.New("webhook URL does not parse") // never the URL: it carries a token
	}
	req.Header.Set("Content-Type", ctype)
	if w.Sink.Preset == "ntfy" {
		req.Header.Set("Title", "fleetmgr: "+e.Kind)
		if e.State == StateResolved {
			req.Header.Set("Tags", "white_check_mark")
		} else {
			req.Header.Set("Tags", "warning")
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		var ue interface{ Unwrap() error }
		if errors.As(err, &ue) && ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("webhook %s: not delivered: %s", host(u), scrub(err.Error(), u))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("webhook %s answered %s", host(u), resp.Status)
	}
	return nil
}

// host is the URL's host, all an error may name of it.
func host(u string) string {
	rest := u
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	return rest
}

func scrub(msg, u string) string { return strings.ReplaceAll(msg, u, host(u)) }

// Command runs Argv with the event as JSON on stdin and as FLEETMGR_EVENT_*
// variables (KIND, FLEET, MEMBER, STATE, TEXT, RULE, SINCE); it must exit
// 0 within the send's deadline.
type Command struct{ Argv []string }

// Send runs the command once.
func (c *Command) Send(ctx context.Context, e Event) error {
	if len(c.Argv) == 0 {
		return errors.New("command sink without a command")
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, c.Argv[0], c.Argv[1:]...)
	cmd.Stdin = bytes.NewReader(append(b, '\n'))
	cmd.Env = append(os.Environ(),
		"FLEETMGR_EVENT_KIND="+e.Kind, "FLEETMGR_EVENT_FLEET="+e.Fleet, "FLEETMGR_EVENT_MEMBER="+e.Member, "FLEETMGR_EVENT_HOST="+e.Host,
		"FLEETMGR_EVENT_STATE="+e.State, "FLEETMGR_EVENT_TEXT="+e.Text, "FLEETMGR_EVENT_RULE="+e.Rule,
		"FLEETMGR_EVENT_SINCE="+e.Since.Format(time.RFC3339))
	cmd.WaitDelay = 2 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if len(msg) > 200 {
			msg = msg[:200] + "…"
		}
		if msg != "" {
			return fmt.Errorf("%s: %v: %s", c.Argv[0], err, msg)
		}
		return fmt.Errorf("%s: %v", c.Argv[0], err)
	}
	return nil
}

type herdrSink struct{ sockets func() []string }

// Send raises herdr's own notification (notification.show) in each
// operator session; an error when there is none or none took it.
func (h herdrSink) Send(ctx context.Context, e Event) error {
	var socks []string
	if h.sockets != nil {
		socks = h.sockets()
	}
	if len(socks) == 0 {
		return errors.New("herdr sink: no operator herdr session ([guard] operator_sessions) to show it in")
	}
	var errs []error
	ok := 0
	for _, s := range socks {
		err := herdr.New(s).Call(ctx, "notification.show", map[string]any{"title": "fleetmgr: " + e.Kind, "body": e.Text}, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		ok++
	}
	if ok == 0 {
		return fmt.Errorf("herdr sink: %w", errors.Join(errs...))
	}
	return nil
}

type mcpSink struct {
	send func(context.Context, Event) (int, error)
}

// Send logs the event to the connected MCP sessions (notifications/message)
// that asked for log messages; an error when none took it.
func (m mcpSink) Send(ctx context.Context, e Event) error {
	if m.send == nil {
		return errors.New("mcp sink: no MCP server")
	}
	n, err := m.send(ctx, e)
	if err != nil {
		return err
	}
	if n == 0 {
		return errors.New("mcp sink: no connected MCP session takes log messages (a client must send logging/setLevel, warning or lower, to get notifications/message)")
	}
	return nil
}
