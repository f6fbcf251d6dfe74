package baton

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/redistest"
)

// TestCheckCommandsDerived: the commands Check asks about, over every
// deployment, are exactly those TestACLLineDerived derives from the
// sources (the scripts, the Go code, what rueidis sends): a command a
// script or the code starts to send fails this test until Check knows
// when it is needed.
func TestCheckCommandsDerived(t *testing.T) {
	library, _ := deriveACL(t)
	asked := map[string]bool{}
	for _, b := range []bool{false, true} {
		for _, d := range []deployment{{cluster: b, redis8: b}, {sentinel: b}, {tracking: b}, {replicas: b}} {
			for _, cmd := range commandsFor(d) {
				asked[cmd] = true
			}
		}
	}
	compareACL(t, "Check", asked, library)
	if plain := commandsFor(deployment{}); slices.ContainsFunc(plain, func(c string) bool {
		return c == "spublish" || c == "ssubscribe" || c == "wait" || c == "client|tracking" || c == "role"
	}) {
		t.Errorf("a standalone client without tracking is asked about %q", plain)
	}
}

// checkUser creates the README's ACL user on srv with its line changed by
// edit (words removed or replaced), and returns a client logged in as it.
func checkUser(t *testing.T, srv *redistest.Server, edit func([]string) []string) *Client {
	t.Helper()
	line := parseACL(t, readmeBlock(t, aclMarker))
	srv.Do(t, "ACL", "DELUSER", line.user)
	argv := edit(slices.Clone(line.argv))
	if err := srv.Do(t, argv...).Error(); err != nil {
		t.Fatalf("%q: %v", argv, err)
	}
	o := srv.Option()
	o.Username, o.Password = line.user, line.password
	return newClientOn(t, Options{Redis: o, LeaseTTL: time.Second})
}

func without(words ...string) func([]string) []string {
	return func(argv []string) []string {
		return slices.DeleteFunc(argv, func(w string) bool { return slices.Contains(words, w) })
	}
}

func replacing(old, new string) func([]string) []string {
	return func(argv []string) []string {
		for i, w := range argv {
			if w == old {
				argv[i] = new
			}
		}
		return argv
	}
}

// TestCheckPassesAsREADMEUser: as the README's ACL user, Check finds
// nothing missing, and leaves no key behind.
func TestCheckPassesAsREADMEUser(t *testing.T) {
	srv := redistest.Start(t)
	c := checkUser(t, srv, func(a []string) []string { return a })
	if err := c.Check(ctxTimeout(t, 10*time.Second)); err != nil {
		t.Fatalf("Check as the README's user: %v", err)
	}
	if ks := keysWritten(t, srv); len(ks) > 0 {
		t.Errorf("Check left keys %q", ks)
	}
	if d := aclDenials(t, srv); len(d) > 0 {
		t.Errorf("Check was denied: %q", d)
	}
}

// TestCheckNamesMissingRule: with one rule of the README's line removed
// or narrowed, Check fails with ErrNoPermission naming that rule, and
// nothing the line still allows; it leaves no key behind.
func TestCheckNamesMissingRule(t *testing.T) {
	srv := redistest.Start(t)
	for _, tc := range []struct {
		name  string
		edit  func([]string) []string
		after []string // ACL SETUSER arguments sent after New (New needs what they take away)
		want  []string
	}{
		{"time", without("+time"), nil, []string{"+time"}},
		{"publish", without("+publish"), nil, []string{"+publish"}},
		{"evalsha", without("+evalsha"), nil, []string{"+evalsha"}},
		{"eval", without("+eval"), nil, []string{"+eval"}},
		{"eval and evalsha", without("+eval", "+evalsha"), nil, []string{"+eval", "+evalsha"}},
		{"several", without("+hgetall", "+lrem", "+pexpire"), nil, []string{"+hgetall", "+lrem", "+pexpire"}},
		{"keys narrowed", replacing("~baton:*", "~baton:{*"), nil, []string{"~baton:*", "key baton:s:{baton-check}"}},
		{"keys read-only", replacing("~baton:*", "%R~baton:*"), nil, []string{"~baton:*", "key baton:{baton-check}"}},
		{"election channel", without("&baton:e:*"), nil, []string{"&baton:e:*", "channel baton:e:{baton-check}:ev"}},
		{"client channel", func(a []string) []string { return a }, []string{"resetchannels", "&baton:g:*", "&baton:e:*"}, []string{"&baton:c:*", "channel baton:c:"}},
		{"subscribe", func(a []string) []string { return a }, []string{"-subscribe"}, []string{"+subscribe"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := checkUser(t, srv, tc.edit)
			if tc.after != nil {
				line := parseACL(t, readmeBlock(t, aclMarker))
				if err := srv.Do(t, append([]string{"ACL", "SETUSER", line.user}, tc.after...)...).Error(); err != nil {
					t.Fatal(err)
				}
			}
			err := c.Check(ctxTimeout(t, 10*time.Second))
			if !errors.Is(err, ErrNoPermission) {
				t.Fatalf("Check: %v, want ErrNoPermission", err)
			}
			t.Logf("Check: %v", err)
			for _, w := range append(tc.want, `user "baton"`, srv.Addr()) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Check's error does not name %q", w)
				}
			}
			for _, r := range namedRules(err) {
				if !slices.ContainsFunc(tc.want, func(w string) bool { return strings.HasPrefix(w, r) }) {
					t.Errorf("Check names %s, which the user has", r)
				}
			}
			if ks := keysWritten(t, srv); len(ks) > 0 {
				t.Errorf("Check left keys %q", ks)
			}
		})
	}
}

// TestCheckOnClosedClient: Check after Close returns ErrClosed.
func TestCheckOnClosedClient(t *testing.T) {
	srv := redistest.Start(t)
	c, err := New(Options{Redis: srv.Option()})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := c.Check(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Check after Close: %v, want ErrClosed", err)
	}
}

// lacked matches the list of rules Check's error names: "lacks <rule>,
// <rule> (for ...), ... (ACL SETUSER ...)".
var lacked = regexp.MustCompile(` at \S+ lacks (.*?) \(ACL SETUSER`)

// namedRules returns the rules err names.
func namedRules(err error) []string {
	m := lacked.FindStringSubmatch(err.Error())
	if m == nil {
		return nil
	}
	var out []string
	for _, part := range strings.Split(m[1], ", ") {
		out = append(out, strings.Fields(part)[0])
	}
	return out
}
