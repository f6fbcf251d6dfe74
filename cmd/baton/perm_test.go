package main

import (
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
)

// TestLsWithoutScanNamesTheRule: as the README's library user, which
// lacks SCAN, ls fails in one line naming the user and +scan (not a bare
// NOPERM), show works, and ls works once the listing line is sent.
func TestLsWithoutScanNamesTheRule(t *testing.T) {
	srv := redistest.Start(t)
	line, user, password := locktest.ReadmeACL(t, "../../README.md", "<!-- acl -->")
	srv.Do(t, line...)
	c := locktest.NewBaton(t, srv.Option(), 2*time.Second)
	name := locktest.UniqueName(t)
	l := locktest.Lock(t, c, name)
	env := []string{authEnv + "=" + password}
	args := []string{"-addr", srv.Addr(), "-user", user}

	r := runBatonEnv(t, env, append(args, "ls")...)
	if r.code != exitRedis {
		t.Errorf("ls without +scan: exit %d, want %d", r.code, exitRedis)
	}
	if lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n"); len(lines) != 1 {
		t.Errorf("ls without +scan: %d lines on stderr, want one", len(lines))
	}
	for _, want := range []string{"NOPERM", `user "` + user + `" lacks +scan`, "ACL SETUSER " + user + " +scan", "show NAME needs no SCAN"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("ls without +scan: stderr %q does not say %q", r.stderr, want)
		}
	}
	if r := runBatonEnv(t, env, append(args, "show", name)...); r.code != exitOK || !strings.Contains(r.stdout, "state:") {
		t.Errorf("show as the library's user: exit %d, stdout %q", r.code, r.stdout)
	}
	list, _, _ := locktest.ReadmeACL(t, "../../README.md", "<!-- acl-list -->")
	srv.Do(t, list...)
	r = runBatonEnv(t, env, append(args, "ls")...)
	if row := lsRows(t, r.stdout)[name]; r.code != exitOK || row == nil || row[1] != "held" {
		t.Errorf("ls with +scan: exit %d, row %q; want %s held", r.code, row, name)
	}
	locktest.Unlock(t, l)
}

// TestPermHintNamesRule: the hints for Redis's NOPERM replies to a
// command, a key and a channel name the rule and the user.
func TestPermHintNamesRule(t *testing.T) {
	srv := redistest.Start(t)
	srv.Do(t, "ACL", "SETUSER", "narrow", "on", ">pw", "resetkeys", "~other:*", "resetchannels", "-@all", "+get", "+publish")
	o := srv.Option()
	o.Username, o.Password = "narrow", "pw"
	rc := locktest.NewRueidis(t, o)
	ctx := locktest.CtxTimeout(t, locktest.Bound)
	for _, tc := range []struct {
		what string
		err  error
		want string
	}{
		{"command", rc.Do(ctx, rc.B().Time().Build()).Error(), `user "narrow" lacks +time: ACL SETUSER narrow +time`},
		{"key", rc.Do(ctx, rc.B().Get().Key("baton:{x}").Build()).Error(), "~baton:*"},
		{"channel", rc.Do(ctx, rc.B().Publish().Channel("baton:c:x").Message("m").Build()).Error(), "&baton:c:*"},
	} {
		if h := permHint(tc.err, o, "baton"); !strings.Contains(h, tc.want) {
			t.Errorf("%s: %v: hint %q, want %q", tc.what, tc.err, h, tc.want)
		}
	}
	if h := permHint(nil, o, "baton"); h != "" {
		t.Errorf("hint for no error: %q", h)
	}
}
