package baton

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// newErr returns New's error with o, failing t if New succeeds, and how
// long New took.
func newErr(t *testing.T, o rueidis.ClientOption) (error, time.Duration) {
	t.Helper()
	start := time.Now()
	c, err := New(Options{Redis: o})
	d := time.Since(start)
	if err == nil {
		c.Close()
		t.Fatal("New succeeded")
	}
	t.Logf("New after %v: %v", d, err)
	return err, d
}

func wantIn(t *testing.T, err error, words ...string) {
	t.Helper()
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
}

// TestNewTLSToPlainPortSaysSoQuickly: TLS to a port that speaks plain
// Redis fails well before the 5 s dial timeout, saying the port is plain
// and to remove TLSConfig.
func TestNewTLSToPlainPortSaysSoQuickly(t *testing.T) {
	srv := redistest.Start(t)
	o := rueidis.ClientOption{InitAddress: []string{srv.Addr()}, TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12}}
	err, d := newErr(t, o)
	wantIn(t, err, srv.Addr()+" over TLS", "this port speaks plain Redis", "remove Options.Redis.TLSConfig")
	if d > 3*time.Second {
		t.Errorf("New took %v to fail: the handshake hung toward the %v dial timeout", d, rueidis.DefaultDialTimeout)
	}
}

// TestNewPlainToTLSPortSaysSetTLSConfig: plain text to a TLS-only port
// names TLSConfig instead of only "connection reset by peer".
func TestNewPlainToTLSPortSaysSetTLSConfig(t *testing.T) {
	srv := redistest.StartTLS(t)
	err, _ := newErr(t, rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	wantIn(t, err, srv.Addr(), "this port speaks TLS: set Options.Redis.TLSConfig")
}

// TestNewWrongPasswordNamesUser: a refused login names the user (an ACL
// user, or "default" for a password alone), on a plain and a TLS server,
// and never the password; a server that requires a password and got none
// says to set one.
func TestNewWrongPasswordNamesUser(t *testing.T) {
	const secret = "s3cret-not-this"
	for _, tc := range []struct {
		name string
		srv  *redistest.Server
	}{
		{"plain", redistest.Start(t)},
		{"tls", redistest.StartTLS(t)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, args := range [][]string{
				{"ACL", "SETUSER", "alice", "on", ">pw", "~baton:*", "&baton:*", "+@all"},
				{"ACL", "SETUSER", "default", "resetpass", ">right"}, // requirepass
			} {
				if err := tc.srv.Do(t, args...).Error(); err != nil {
					t.Fatalf("%q: %v", args, err)
				}
			}
			o := tc.srv.Option()
			o.Username, o.Password = "alice", secret
			err, _ := newErr(t, o)
			wantIn(t, err, `user "alice"`, "WRONGPASS", "Options.Redis.Username and Password", tc.srv.Addr())
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error shows the password: %v", err)
			}
			if tc.name == "tls" {
				wantIn(t, err, "over TLS")
			}
			o.Username = ""
			err, _ = newErr(t, o)
			wantIn(t, err, `user "default"`, "WRONGPASS")
			o.Password = ""
			err, _ = newErr(t, o)
			wantIn(t, err, "requires a password", "Options.Redis.Password")
		})
	}
}

// TestNewOverTLSAsACLUser: the happy path the errors above guard: TLS, an
// ACL user and its password.
func TestNewOverTLSAsACLUser(t *testing.T) {
	srv := redistest.StartTLS(t)
	line := parseACL(t, readmeBlock(t, aclMarker))
	aclApply(t, []*redistest.Server{srv}, line)
	o := srv.Option()
	o.Username, o.Password = line.user, line.password
	c, err := New(Options{Redis: o, LeaseTTL: time.Second})
	if err != nil {
		t.Fatalf("New over TLS as the README's user: %v", err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, uniqueName(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil && !errors.Is(err, ErrLockLost) {
		t.Fatal(err)
	}
}
