package broker_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fleetmgr/fleetmgr/broker"
)

// TestTopicPermissionsProbe: 200 means supported (RabbitMQ), 404 means
// not (LavinMQ 1.0), anything else is an error; SetTopicPermission sends
// the documented body to the documented path.
func TestTopicPermissionsProbe(t *testing.T) {
	var got struct {
		path string
		body broker.TopicPermission
	}
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut {
			got.path = r.URL.EscapedPath()
			_ = json.NewDecoder(r.Body).Decode(&got.body)
			w.WriteHeader(http.StatusCreated)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte("[]"))
	}))
	defer srv.Close()
	a, err := broker.NewAdmin(srv.URL, "admin", "pw", broker.AdminOptions{RetryMax: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for st, want := range map[int]bool{http.StatusOK: true, http.StatusNotFound: false} {
		status = st
		if ok, err := a.TopicPermissionsSupported(ctx); ok != want || err != nil {
			t.Errorf("status %d: %v %v", st, ok, err)
		}
	}
	status = http.StatusUnauthorized
	if _, err := a.TopicPermissionsSupported(ctx); !broker.IsAuth(err) {
		t.Errorf("401: %v", err)
	}
	tp := broker.TopicPermission{Exchange: "fleet.roster", Write: `^roster\.a(\..*)?$`, Read: ".*"}
	if err := a.SetTopicPermission(ctx, "fed/v", "federation-a", tp); err != nil {
		t.Fatal(err)
	}
	if got.path != "/api/topic-permissions/fed%2Fv/federation-a" || got.body != tp {
		t.Fatalf("PUT %s %+v", got.path, got.body)
	}
	if a.User() != "admin" {
		t.Fatalf("User() = %q", a.User())
	}
}
