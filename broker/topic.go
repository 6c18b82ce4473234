package broker

import (
	"context"
	"net/http"
)

// This file holds the management API calls the federation's provisioning
// needs beyond a fleet's (docs/FEDERATION.md, "Provisioning"): narrow
// permission regexps, RabbitMQ topic permissions, and declaring exchanges,
// queues and bindings as the administrator. RabbitMQ and LavinMQ serve the
// same paths for all of them except topic permissions, which LavinMQ 1.0
// does not have (404).

// User returns the administrator user the Admin authenticates as.
func (a *Admin) User() string { return a.user }

// Permissions are a user's three permission regexps on one vhost, matched
// by the broker against resource (exchange and queue) names: configure
// (declare, delete), write (publish to an exchange, bind a queue), read
// (consume from a queue, bind from an exchange).
type Permissions struct {
	Configure string `json:"configure"`
	Write     string `json:"write"`
	Read      string `json:"read"`
}

// SetPermissionsTo sets user's permissions on vhost to p
// (PUT /api/permissions/{vhost}/{user}; 201 or 204), replacing what was
// there.
func (a *Admin) SetPermissionsTo(ctx context.Context, vhost, user string, p Permissions) error {
	_, _, err := a.do(ctx, http.MethodPut, a.endpoint("api", "permissions", vhost, user), p,
		http.StatusCreated, http.StatusNoContent)
	return err
}

// TopicPermissionsSupported reports whether the broker has RabbitMQ's
// topic permissions (GET /api/topic-permissions answers 200). A 404 (or
// 405) means it does not, as on LavinMQ 1.0; any other failure is
// returned.
func (a *Admin) TopicPermissionsSupported(ctx context.Context) (bool, error) {
	st, _, err := a.do(ctx, http.MethodGet, a.endpoint("api", "topic-permissions"), nil, http.StatusOK,
		http.StatusNotFound, http.StatusMethodNotAllowed)
	if err != nil {
		return false, err
	}
	return st == http.StatusOK, nil
}

// TopicPermission is one RabbitMQ topic permission: on a topic exchange,
// the regexps a routing key must match to publish (Write) and a binding
// key must match to bind a queue (Read). RabbitMQ applies them to topic
// exchanges only, and a user with no entry for an exchange is not
// restricted on it.
type TopicPermission struct {
	Exchange string `json:"exchange"`
	Write    string `json:"write"`
	Read     string `json:"read"`
}

// SetTopicPermission sets user's topic permission on tp.Exchange in vhost
// (PUT /api/topic-permissions/{vhost}/{user}; 201 or 204). A broker
// without topic permissions answers 404 (IsNotFound).
func (a *Admin) SetTopicPermission(ctx context.Context, vhost, user string, tp TopicPermission) error {
	_, _, err := a.do(ctx, http.MethodPut, a.endpoint("api", "topic-permissions", vhost, user), tp,
		http.StatusCreated, http.StatusNoContent)
	return err
}

// DeclareExchange declares a durable exchange of kind (direct, topic,
// fanout) in vhost (PUT /api/exchanges/{vhost}/{name}; 201 created, 204
// existed with the same properties). An existing exchange with other
// properties is an *HTTPError with status 400.
func (a *Admin) DeclareExchange(ctx context.Context, vhost, name, kind string) error {
	_, _, err := a.do(ctx, http.MethodPut, a.endpoint("api", "exchanges", vhost, name),
		map[string]any{"type": kind, "durable": true, "auto_delete": false, "internal": false, "arguments": map[string]any{}},
		http.StatusCreated, http.StatusNoContent)
	return err
}

// DeclareQueue declares a durable queue with args (x-max-length,
// x-dead-letter-exchange, …) in vhost (PUT /api/queues/{vhost}/{name};
// 201 created, 204 existed with the same arguments). An existing queue
// with other arguments is an *HTTPError with status 400: AMQP queues
// cannot change their arguments, so the caller says to delete it.
func (a *Admin) DeclareQueue(ctx context.Context, vhost, name string, args map[string]any) error {
	if args == nil {
		args = map[string]any{}
	}
	_, _, err := a.do(ctx, http.MethodPut, a.endpoint("api", "queues", vhost, name),
		map[string]any{"durable": true, "auto_delete": false, "arguments": args},
		http.StatusCreated, http.StatusNoContent)
	return err
}

// BindQueue binds queue to exchange with routing key key in vhost
// (POST /api/bindings/{vhost}/e/{exchange}/q/{queue}; 201). Binding again
// with the same key is a no-op on the broker.
func (a *Admin) BindQueue(ctx context.Context, vhost, exchange, queue, key string) error {
	_, _, err := a.do(ctx, http.MethodPost, a.endpoint("api", "bindings", vhost, "e", exchange, "q", queue),
		map[string]any{"routing_key": key, "arguments": map[string]any{}}, http.StatusCreated, http.StatusNoContent)
	return err
}
