package baton

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/keyspace"
	"github.com/batonlock/baton/internal/redistest"
)

// TestTrackingRefused: a server that refuses CLIENT TRACKING (an ACL
// without it, as some managed services have) still serves baton: New logs
// one warning that names what was refused and what it costs, and
// Client.Tracking reports false; with tracking, true and no warning.
func TestTrackingRefused(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name     string
		rules    []string
		tracking bool
	}{
		{"refused", []string{"~*", "&*", "+@all", "-client|tracking"}, false},
		{"allowed", []string{"~*", "&*", "+@all"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			var mu sync.Mutex
			log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
				mu.Lock()
				defer mu.Unlock()
				return buf.Write(p)
			}), nil))
			ro := aclUser(t, srv, "u"+tc.name, tc.rules...)
			c := newUserClient(t, srv, ro, Options{Logger: log})
			if c.Tracking() != tc.tracking {
				t.Fatalf("Tracking() %v, want %v", c.Tracking(), tc.tracking)
			}
			l, err := c.Lock(ctxTimeout(t, 5*time.Second), uniqueName(t))
			if err != nil {
				t.Fatal(err)
			}
			l.Unlock(ctxTimeout(t, 5*time.Second))
			mu.Lock()
			defer mu.Unlock()
			warned := strings.Count(buf.String(), "level=WARN")
			switch {
			case !tc.tracking && (warned != 1 || !strings.Contains(buf.String(), "CLIENT TRACKING") || !strings.Contains(buf.String(), "next renewal")):
				t.Fatalf("want one warning naming CLIENT TRACKING and its cost, got:\n%s", buf.String())
			case tc.tracking && warned != 0:
				t.Fatalf("warned with tracking on:\n%s", buf.String())
			}
		})
	}
}

// TestInstance: Options.Instance (default hostname:pid) is what Held
// reports and what Redis keeps under the client's id for operators'
// tools, written again after Redis lost it.
func TestInstance(t *testing.T) {
	srv := redistest.Start(t)
	c := newClient(t, srv, Options{Instance: "orders-7", LeaseTTL: 300 * time.Millisecond})
	d := newClient(t, srv, Options{})
	if want := ":"; !strings.Contains(d.Instance(), want) {
		t.Errorf("default Instance %q, want hostname:pid", d.Instance())
	}
	ctx := ctxTimeout(t, 10*time.Second)
	l, err := c.Lock(ctx, uniqueName(t))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if h := c.Session().Held(); len(h) != 1 || h[0].Instance != "orders-7" {
		t.Fatalf("Held %+v, want Instance orders-7", h)
	}
	key := keyspace.InstanceKey(DefaultKeyPrefix, c.id)
	if v, _ := srv.Do(t, "GET", key).ToString(); v != "orders-7" {
		t.Fatalf("%s holds %q, want orders-7", key, v)
	}
	if ttl, _ := srv.Do(t, "PTTL", key).AsInt64(); ttl <= 0 {
		t.Fatalf("%s has PTTL %d: it must expire after a crash", key, ttl)
	}
	srv.Do(t, "FLUSHALL")
	within(t, 5*time.Second, "the Instance written again after a flush", func() error {
		if v, _ := srv.Do(t, "GET", key).ToString(); v != "orders-7" {
			return errors.New("not yet")
		}
		return nil
	})
}
