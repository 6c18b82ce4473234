package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// DefaultDialTimeout bounds an AMQP dial (TCP connect and handshake).
const DefaultDialTimeout = 5 * time.Second

// ErrQueueMissing is returned (wrapped) by QueueDepth when the queue does
// not exist in the vhost.
var ErrQueueMissing = errors.New("queue missing")

// ParseAMQPURL checks a broker address as fleets.toml's [broker] amqp_url
// gives it: scheme amqp or amqps, a host (and port), and nothing else — no
// credentials (each fleet gets its own) and no vhost path (each fleet has
// its own vhost).
func ParseAMQPURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("AMQP URL %q: %v", Redact(s), err)
	}
	switch {
	case u.Scheme != "amqp" && u.Scheme != "amqps":
		return nil, fmt.Errorf("AMQP URL %q: scheme must be amqp or amqps", Redact(s))
	case u.Host == "":
		return nil, fmt.Errorf("AMQP URL %q: no host", Redact(s))
	case u.User != nil:
		return nil, fmt.Errorf("AMQP URL %q: must not carry credentials (each fleet gets its own user)", Redact(s))
	case u.Path != "" && u.Path != "/":
		return nil, fmt.Errorf("AMQP URL %q: must not name a vhost (each fleet has its own vhost)", s)
	case u.RawQuery != "" || u.Fragment != "":
		return nil, fmt.Errorf("AMQP URL %q: must not have a query or fragment", s)
	}
	return u, nil
}

// VhostURI returns amqp[s]://user:password@host:port/<vhost, path-escaped>
// for the broker at amqpURL (see ParseAMQPURL). The vhost "/" becomes
// "%2F"; user and password are escaped as URL user info.
func VhostURI(amqpURL, user, password, vhost string) (string, error) {
	u, err := ParseAMQPURL(amqpURL)
	if err != nil {
		return "", err
	}
	u.User = url.UserPassword(user, password)
	u.Path, u.RawPath = "/"+vhost, "/"+url.PathEscape(vhost)
	return u.String(), nil
}

// Redact returns s with the password of its user info replaced by "xxxxx",
// for messages and logs. Strings that do not parse are returned with
// everything between "://" and the last "@" hidden.
func Redact(s string) string {
	u, err := url.Parse(s)
	if err == nil {
		return u.Redacted()
	}
	if i, j := strings.Index(s, "://"), strings.LastIndex(s, "@"); i >= 0 && j > i {
		return s[:i+3] + "xxxxx" + s[j:]
	}
	return s
}

// Dial opens an AMQP connection to uri (amqp://user:pass@host:port/vhost,
// as VhostURI makes). The TCP connect and handshake are bounded by ctx and
// DefaultDialTimeout. Errors name the host and vhost, never the password;
// a refused login or vhost is recognisable with IsAccessRefused.
func Dial(ctx context.Context, uri string) (*amqp.Connection, error) {
	cfgURI, err := amqp.ParseURI(uri)
	if err != nil {
		return nil, fmt.Errorf("AMQP URI %s: %v", Redact(uri), err)
	}
	timeout := DefaultDialTimeout
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl); d < timeout {
			timeout = d
		}
	}
	if timeout <= 0 {
		return nil, fmt.Errorf("AMQP dial %s: %w", Redact(uri), context.DeadlineExceeded)
	}
	c, err := amqp.DialConfig(uri, amqp.Config{
		Heartbeat: 10 * time.Second,
		Locale:    "en_US",
		Dial: func(network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: timeout}
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// Bound the handshake; amqp091 clears the deadline once the
			// connection is open.
			if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
				conn.Close()
				return nil, err
			}
			return conn, nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("AMQP dial %s:%d vhost %q as %q: %w", cfgURI.Host, cfgURI.Port, cfgURI.Vhost, cfgURI.Username, err)
	}
	return c, nil
}

// IsAccessRefused reports whether err is the broker refusing a login or a
// vhost: AMQP reply 403 ACCESS_REFUSED (bad credentials, or a resource the
// user has no permission on) or 530 NOT_ALLOWED (RabbitMQ's answer to
// connection.open on a vhost the user has no permission on).
func IsAccessRefused(err error) bool {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return ae.Code == amqp.AccessRefused || ae.Code == amqp.NotAllowed
	}
	return false
}

// QueueDepth returns the exact number of ready messages in queue, and its
// consumer count, with queue.declare passive on a throwaway channel (a
// missing queue makes the broker close the channel, which must then not be
// reused). A missing queue yields an error wrapping ErrQueueMissing.
func QueueDepth(conn *amqp.Connection, queue string) (messages, consumers int, err error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, 0, fmt.Errorf("AMQP channel: %w", err)
	}
	q, err := ch.QueueDeclarePassive(queue, false, false, false, false, nil)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return 0, 0, fmt.Errorf("queue %q: %w", queue, ErrQueueMissing)
		}
		_ = ch.Close()
		return 0, 0, fmt.Errorf("queue %q: %w", queue, err)
	}
	_ = ch.Close()
	return q.Messages, q.Consumers, nil
}

// DeclareDurableQueue declares queue as durable, not auto-deleted, not
// exclusive (fleetd's agent.<member>.inbox shape, docs/fleetd.md), on a
// throwaway channel. Declaring an existing queue with the same arguments
// is a no-op.
func DeclareDurableQueue(conn *amqp.Connection, queue string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("AMQP channel: %w", err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare queue %q: %w", queue, err)
	}
	return nil
}

// InboxQueue is the name of a member's inbox queue, agent.<member>.inbox
// (docs/fleetd.md "Behaviours that shape fleetmgr": queues have no fleet
// namespace).
func InboxQueue(member string) string { return "agent." + member + ".inbox" }
