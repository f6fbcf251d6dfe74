package baton

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// A Redis error that time does not mend (an ACL that refuses a command a
// script calls) fails Lock, TryLock, Acquire and Campaign at once, with
// an error that names the command and wraps the *rueidis.RedisError;
// only passing states (a dropped connection, LOADING, READONLY, ...) are
// retried until the caller's ctx ends.

// readmeUserWithout creates on srv the README's ACL user, named user,
// without the rules drop (words of its line: "+time", "&baton:e:*"), and
// returns client options that log in as it.
func readmeUserWithout(t *testing.T, srv *redistest.Server, user string, drop ...string) rueidisOption {
	t.Helper()
	line := parseACL(t, readmeBlock(t, aclMarker))
	argv := slices.Clone(line.argv)
	argv[2] = user
	argv = slices.DeleteFunc(argv, func(w string) bool {
		return slices.ContainsFunc(drop, func(rule string) bool { return strings.EqualFold(w, rule) })
	})
	if len(argv) != len(line.argv)-len(drop) {
		t.Fatalf("the README's ACL line %q does not have all of %q", line.argv, drop)
	}
	if err := srv.Do(t, argv...).Error(); err != nil {
		t.Fatalf("%s: %v", strings.Join(argv, " "), err)
	}
	return redisOpt(func(o *rueidisOption) { o.Username, o.Password = user, line.password })
}

// wantPermanent fails unless err (returned after took) came at once, wraps
// a *rueidis.RedisError and names the command cmd.
func wantPermanent(t *testing.T, what string, err error, took time.Duration, cmd string) {
	t.Helper()
	var re *rueidis.RedisError
	switch {
	case err == nil:
		t.Fatalf("%s succeeded as a user without +%s", what, strings.ToLower(cmd))
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrClosed):
		t.Fatalf("%s: %v after %v: retried until its end, not failed at once", what, err, took)
	case !errors.As(err, &re):
		t.Fatalf("%s: %v: errors.As finds no *rueidis.RedisError", what, err)
	case !strings.Contains(err.Error(), cmd):
		t.Fatalf("%s: %v: the error does not name %s", what, err, cmd)
	case took > 5*time.Second:
		t.Fatalf("%s took %v to fail", what, took)
	}
}

// timed runs f and returns its error and how long it took.
func timed(f func() error) (error, time.Duration) {
	start := time.Now()
	err := f()
	return err, time.Since(start)
}

// TestScriptCommandRefusedByACLFailsAtOnce: as a user whose ACL lacks a
// command a script calls (TIME for a lock, HSET for a semaphore, PUBLISH
// for an election's announcement), Lock, TryLock, Acquire and Campaign
// with 30 s to go fail within seconds, naming the command, and so does a
// Lock without a deadline.
func TestScriptCommandRefusedByACLFailsAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	cases := []struct {
		name, cmd string
		acquire   func(ctx context.Context, c *Client, name string) error
	}{
		{"lock", "TIME", func(ctx context.Context, c *Client, name string) error {
			_, err := c.Lock(ctx, name)
			return err
		}},
		{"trylock", "TIME", func(ctx context.Context, c *Client, name string) error {
			_, err := c.TryLock(ctx, name)
			return err
		}},
		{"semaphore", "HSET", func(ctx context.Context, c *Client, name string) error {
			m, err := c.Semaphore(name, 2)
			if err == nil {
				_, err = m.Acquire(ctx)
			}
			return err
		}},
		{"election", "PUBLISH", func(ctx context.Context, c *Client, name string) error {
			e, err := c.Election(name)
			if err == nil {
				_, err = e.Campaign(ctx, "v")
			}
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ro := readmeUserWithout(t, srv, "no"+strings.ToLower(tc.cmd)+"-"+tc.name, "+"+strings.ToLower(tc.cmd))
			c := newUserClient(t, srv, ro, Options{LeaseTTL: time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err, took := timed(func() error { return tc.acquire(ctx, c, uniqueName(t)) })
			wantPermanent(t, tc.name, err, took, tc.cmd)
		})
	}
	t.Run("lock without deadline", func(t *testing.T) {
		ro := readmeUserWithout(t, srv, "notime-nodeadline", "+time")
		c := newUserClient(t, srv, ro, Options{LeaseTTL: time.Second})
		name := uniqueName(t)
		got := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := c.Lock(context.Background(), name)
			got <- err
		}()
		select {
		case err := <-got:
			wantPermanent(t, "Lock without a deadline", err, time.Since(start), "TIME")
		case <-time.After(10 * time.Second):
			c.Close() // ends the Lock, for goleak
			<-got
			t.Fatal("Lock without a deadline still retried after 10 s")
		}
	})
}
