package baton

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// TestObserveEndsOnPermanentError: an Election's Observe that Redis
// refuses for good (an ACL user without HGETALL, which the leader read
// needs, or without the election's announce channel) warns through the
// Logger, naming the election and the error, tells the Observer
// (ObserveFailed) and closes its channel, within seconds, not at its
// ctx's end.
func TestObserveEndsOnPermanentError(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name, rule, says string
	}{
		{"leader read", "+hgetall", "HGETALL"},
		{"announce channel", "&baton:e:*", "NOPERM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ro := readmeUserWithout(t, srv, "observer-"+strings.ReplaceAll(tc.name, " ", "-"), tc.rule)
			h := &lineCounter{}
			r := newRecorder()
			c := newUserClient(t, srv, ro, Options{LeaseTTL: time.Second, Logger: slog.New(h), Observer: r})
			name := uniqueName(t)
			e, err := c.Election(name)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			start := time.Now()
			ch := e.Observe(ctx)
			timeout := time.After(10 * time.Second)
		read:
			for {
				select {
				case v, ok := <-ch:
					if !ok {
						break read
					}
					t.Errorf("Observe sent %+v, though Redis refuses it", v)
				case <-timeout:
					t.Fatalf("Observe's channel still open after 10 s (its ctx has 30 s): it retries a permanent error")
				}
			}
			t.Logf("Observe's channel closed after %v", time.Since(start))
			text, _ := h.text()
			if !strings.Contains(text, "WARN") || !strings.Contains(text, name) || !strings.Contains(text, tc.says) {
				t.Errorf("no warning naming %q and %s; the log:\n%s", name, tc.says, text)
			}
			evs := r.of(ObserveFailed, name)
			if len(evs) != 1 || evs[0].Primitive != PrimitiveElection || evs[0].Err == nil || !strings.Contains(evs[0].Err.Error(), tc.says) {
				t.Errorf("ObserveFailed events of %q: %+v, want one of an election, with an error saying %s", name, evs, tc.says)
			}
		})
	}
}
