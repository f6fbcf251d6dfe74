package baton

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// The bounds New checks on Options, and NewSession on SessionOptions.

// TestHostileOptionsOutOfRange covers the bounds input_test.go does not.
func TestHostileOptionsOutOfRange(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		opt   Options
		field string // "" when valid
	}{
		{"cohort 1025", Options{CohortLimit: 1025}, "CohortLimit"},
		{"cohort 1024", Options{CohortLimit: 1024}, ""},
		{"cohort 1", Options{CohortLimit: 1}, ""},
		{"closing brace in prefix", Options{KeyPrefix: "a}"}, "KeyPrefix"},
		{"lease just below min", Options{LeaseTTL: MinLeaseTTL - 1}, "LeaseTTL"},
		{"lease min", Options{LeaseTTL: MinLeaseTTL}, ""},
		{"lease 24h", Options{LeaseTTL: 24 * time.Hour}, ""},
		{"lease just above 24h", Options{LeaseTTL: 24*time.Hour + 1}, "LeaseTTL"},
		{"negative replicas", Options{MinReplicas: -1}, "MinReplicas"},
		{"negative replica timeout", Options{ReplicaTimeout: -1}, "ReplicaTimeout"},
		{"replica timeout above lease/3", Options{LeaseTTL: time.Second, ReplicaTimeout: 400 * time.Millisecond}, "ReplicaTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.Redis = srv.Option()
			c, err := New(tc.opt)
			if tc.field == "" {
				if err != nil {
					t.Fatalf("New rejected a valid option: %v", err)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("New accepted it")
			}
			if !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q should match ErrInvalidOptions and name %s", err, tc.field)
			}
		})
	}
	c := newClient(t, srv, Options{LeaseTTL: 2 * time.Second})
	for _, d := range []time.Duration{-time.Second, time.Millisecond, MinLeaseTTL - 1, 24*time.Hour + 1} {
		if s, err := c.NewSession(SessionOptions{LeaseTTL: d}); !errors.Is(err, ErrInvalidOptions) || !strings.Contains(err.Error(), "SessionOptions.LeaseTTL") {
			if s != nil {
				s.Close()
			}
			t.Errorf("NewSession(LeaseTTL %v): %v, want ErrInvalidOptions naming SessionOptions.LeaseTTL", d, err)
		}
	}
	s, err := c.NewSession(SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.LeaseTTL() != 2*time.Second {
		t.Fatalf("default session lease %v, want the client's 2s", s.LeaseTTL())
	}
}
