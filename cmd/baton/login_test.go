package main

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/locktest"
	"github.com/batonlock/baton/internal/redistest"
	"github.com/redis/rueidis"
)

// The credentials requireAuth sets: aclPW holds what a URL must
// percent-encode. wrongPW is never right: no output may show it.
const (
	defaultPW = "default-pw"
	aclUser   = "alice"
	aclPW     = "p@ss:w/rd?#%"
	wrongPW   = "wrong-pw-5b1f"
)

// redisURL is scheme://user:password@host, encoded as a user would: with
// user and password empty, no user information; with password empty, the
// user alone.
func redisURL(scheme, user, password, host string) string {
	u := &url.URL{Scheme: scheme, Host: host}
	switch {
	case password != "":
		u.User = url.UserPassword(user, password)
	case user != "":
		u.User = url.User(user)
	}
	return u.String()
}

// requireAuth gives srv's default user the password defaultPW, as
// --requirepass does, and adds the ACL user aclUser with aclPW; it returns
// the options that log in as the default user. The password is set once the
// server is up because redistest probes it without logging in; the harness
// connection, logged in before, stays so.
func requireAuth(t *testing.T, srv *redistest.Server) rueidis.ClientOption {
	t.Helper()
	for _, cmd := range [][]string{
		{"ACL", "SETUSER", aclUser, "reset", "on", ">" + aclPW, "~*", "&*", "+@all"},
		{"CONFIG", "SET", "requirepass", defaultPW},
	} {
		if err := srv.Do(t, cmd...).Error(); err != nil {
			t.Fatalf("%s: %v", strings.Join(cmd[:2], " "), err)
		}
	}
	opt := srv.Option()
	opt.Password = defaultPW
	return opt
}

// heldLock takes a lock through opt, held until the test ends, and returns
// its name.
func heldLock(t *testing.T, opt rueidis.ClientOption) string {
	t.Helper()
	c := locktest.NewBaton(t, opt, 10*time.Second)
	name := locktest.UniqueName(t)
	locktest.Lock(t, c, name)
	return name
}

// loginCase is one run of `baton ARGS ls` with ENV: it must list name as
// held, or fail with code and a stderr holding each of want.
type loginCase struct {
	name string
	env  []string
	args []string
	code int
	want []string
}

func (tc loginCase) run(t *testing.T, name string) {
	t.Run(tc.name, func(t *testing.T) {
		r := runBatonEnv(t, tc.env, append(tc.args, "ls")...)
		if r.code != tc.code {
			t.Fatalf("exit %d, want %d; stderr: %s", r.code, tc.code, r.stderr)
		}
		if strings.Contains(r.stdout+r.stderr, wrongPW) {
			t.Errorf("the output shows the password %q", wrongPW)
		}
		if tc.code != 0 {
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q does not say %q", r.stderr, w)
				}
			}
			return
		}
		if row := lsRows(t, r.stdout)[name]; row == nil || row[1] != "held" {
			t.Errorf("ls: %q is %q, want held", name, row)
		}
	})
}

// TestLoginPassword: a server that requires a password is reached as its
// default user and as an ACL user, by flags, REDISCLI_AUTH and URL, and
// a flag wins over the URL, which wins over REDISCLI_AUTH.
func TestLoginPassword(t *testing.T) {
	srv := redistest.Start(t)
	name := heldLock(t, requireAuth(t, srv))
	addr := srv.Addr()
	alice := redisURL("redis", aclUser, aclPW, addr)
	env := func(pw string) []string { return []string{authEnv + "=" + pw} }
	for _, tc := range []loginCase{
		{name: "-password", args: []string{"-addr", addr, "-password", defaultPW}},
		{name: "-user -password", args: []string{"-addr", addr, "-user", aclUser, "-password", aclPW}},
		{name: "REDISCLI_AUTH", env: env(defaultPW), args: []string{"-addr", addr}},
		{name: "-user REDISCLI_AUTH", env: env(aclPW), args: []string{"-addr", addr, "-user", aclUser}},
		{name: "URL", args: []string{"-addr", alice}},
		{name: "URL default user", args: []string{"-addr", redisURL("redis", "", defaultPW, addr)}},
		{name: "URL user REDISCLI_AUTH", env: env(aclPW), args: []string{"-addr", redisURL("redis", aclUser, "", addr)}},
		{name: "URL db 0", args: []string{"-addr", alice + "/0"}},
		{name: "-password over URL", args: []string{"-addr", redisURL("redis", aclUser, wrongPW, addr), "-password", aclPW}},
		{name: "-user over URL", args: []string{"-addr", redisURL("redis", "nobody", aclPW, addr), "-user", aclUser}},
		{name: "URL over REDISCLI_AUTH", env: env(wrongPW), args: []string{"-addr", alice}},
		{name: "-password over REDISCLI_AUTH", env: env(wrongPW), args: []string{"-addr", addr, "-password", defaultPW}},
	} {
		tc.run(t, name)
	}

	// The URL's database is the one listed: the lock is in 0.
	r := runBaton(t, "-addr", alice+"/1", "ls")
	if rows := lsRows(t, r.stdout); r.code != 0 || len(rows) != 0 {
		t.Errorf("ls in db 1: exit %d, %d names; want none", r.code, len(rows))
	}
}

// TestLoginVerbs: every verb works logged in through a URL.
func TestLoginVerbs(t *testing.T) {
	srv := redistest.Start(t)
	name := heldLock(t, requireAuth(t, srv))
	addr := redisURL("redis", aclUser, aclPW, srv.Addr())
	if r := runBaton(t, "-addr", addr, "show", name); r.code != 0 || !strings.Contains(r.stdout, "held") {
		t.Errorf("show: exit %d, %q; want held", r.code, r.stdout)
	}
	if r := runBaton(t, "-addr", addr, "release", "-force", name); r.code != 0 || !strings.Contains(r.stdout, "took "+name) {
		t.Errorf("release -force: exit %d, %q; want took %s", r.code, r.stdout, name)
	}
}

// TestLoginRefused: wrong or missing credentials exit 1, as any failure to
// reach Redis does, saying where, as whom and what to check.
func TestLoginRefused(t *testing.T) {
	srv := redistest.Start(t)
	name := heldLock(t, requireAuth(t, srv))
	// A database other than 0 needs SELECT, which this user may not run.
	if err := srv.Do(t, "ACL", "SETUSER", "noselect", "on", ">"+aclPW, "~*", "&*", "+@all", "-select").Error(); err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr()
	check := "check -user and -password, or REDISCLI_AUTH, or the user:password in the -addr URL"
	for _, tc := range []loginCase{
		{name: "no password", args: []string{"-addr", addr}, code: exitRedis,
			want: []string{"connect to " + addr + ": NOAUTH", "the server requires a password: give -password", authEnv}},
		{name: "wrong -password", args: []string{"-addr", addr, "-password", wrongPW}, code: exitRedis,
			want: []string{"connect to " + addr + ` as user "default": WRONGPASS`, check}},
		{name: "wrong REDISCLI_AUTH", env: []string{authEnv + "=" + wrongPW}, args: []string{"-addr", addr, "-user", aclUser}, code: exitRedis,
			want: []string{"connect to " + addr + ` as user "alice": WRONGPASS`, check}},
		{name: "wrong URL password", args: []string{"-addr", redisURL("redis", aclUser, wrongPW, addr)}, code: exitRedis,
			want: []string{"connect to " + addr + ` as user "alice": WRONGPASS`, check}},
		{name: "unknown user", args: []string{"-addr", addr, "-user", "nobody", "-password", aclPW}, code: exitRedis,
			want: []string{`as user "nobody": WRONGPASS`}},
		{name: "SELECT denied", args: []string{"-addr", redisURL("redis", "noselect", aclPW, addr) + "/1"}, code: exitRedis,
			want: []string{"connect to " + addr + ` as user "noselect": NOPERM`, "select", "check its ACL rules"}},
		{name: "user without password", args: []string{"-addr", addr, "-user", aclUser}, code: exitUsage,
			want: []string{`baton: user "alice" needs a password: give -password, set REDISCLI_AUTH`}},
	} {
		tc.run(t, name)
	}
}

// TestLoginTLS: a TLS-only server that requires a password is reached with
// -tls or rediss://, trusting its CA by -tls-ca or not verifying; without
// its CA, with another CA or in plain text it is not, and the message says
// what to give.
func TestLoginTLS(t *testing.T) {
	srv := redistest.StartTLS(t)
	name := heldLock(t, requireAuth(t, srv))
	other := redistest.StartTLS(t) // its CA did not sign srv's certificate
	addr := srv.Addr()
	_, port, _ := net.SplitHostPort(addr)
	env := []string{authEnv + "=" + defaultPW}
	untrusted := []string{"connect to " + addr + ` as user "default" over TLS: tls: failed to verify certificate`,
		"signed by unknown authority", "give that CA's certificate with -tls-ca FILE, or skip verification with -tls-insecure"}
	plain := []string{"connect to " + addr + ` as user "default": `, "if it takes TLS connections only, add -tls or use a rediss:// URL"}
	for _, tc := range []loginCase{
		{name: "-tls -tls-ca", env: env, args: []string{"-addr", addr, "-tls", "-tls-ca", srv.CAFile}},
		{name: "rediss -tls-ca", args: []string{"-addr", redisURL("rediss", aclUser, aclPW, addr), "-tls-ca", srv.CAFile}},
		{name: "rediss host name", env: env, args: []string{"-addr", "rediss://localhost:" + port, "-tls-ca", srv.CAFile}},
		{name: "-tls-insecure", env: env, args: []string{"-addr", addr, "-tls", "-tls-insecure"}},
		{name: "rediss -tls-insecure", env: env, args: []string{"-addr", "rediss://" + addr, "-tls-insecure"}},
		{name: "rediss skip_verify", env: env, args: []string{"-addr", "rediss://" + addr + "?skip_verify=true"}},
		{name: "-tls over redis URL", env: env, args: []string{"-addr", "redis://" + addr, "-tls", "-tls-ca", srv.CAFile}},

		{name: "-tls without CA", env: env, args: []string{"-addr", addr, "-tls"}, code: exitRedis, want: untrusted},
		{name: "rediss without CA", env: env, args: []string{"-addr", "rediss://" + addr}, code: exitRedis, want: untrusted},
		{name: "another CA", env: env, args: []string{"-addr", addr, "-tls", "-tls-ca", other.CAFile}, code: exitRedis, want: untrusted},
		{name: "plain", env: env, args: []string{"-addr", addr}, code: exitRedis, want: plain},
		{name: "-tls=false over rediss", env: env, args: []string{"-addr", "rediss://" + addr, "-tls=false"}, code: exitRedis, want: plain},
	} {
		tc.run(t, name)
	}
}

// TestLoginTLSToPlain: a plain server reads a TLS hello as the start of a
// command and waits for the rest, so the command waits out -timeout and
// says that TLS may be what is wrong.
func TestLoginTLSToPlain(t *testing.T) {
	srv := redistest.Start(t)
	r := runBaton(t, "-addr", "rediss://"+srv.Addr(), "-timeout", "1s", "ls")
	if r.code != exitRedis {
		t.Fatalf("exit %d, want %d", r.code, exitRedis)
	}
	for _, want := range []string{"connect to " + srv.Addr() + " over TLS: ", "no answer within -timeout 1s: if the server takes plain connections, drop -tls"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q does not say %q", r.stderr, want)
		}
	}
}

// TestLoginUsage: a malformed address, TLS options without TLS and an
// unusable CA file are bad usage, reported before connecting, and a URL's
// password is not shown.
func TestLoginUsage(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "key.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no port", []string{"-addr", "localhost"}, `-addr "localhost": missing port in address (want host:port`},
		{"credentials without URL", []string{"-addr", "u:" + wrongPW + "@h:1"}, `-addr "xxxxx@h:1": user information needs a URL: redis://USER:PASSWORD@HOST:PORT, or -user and -password`},
		{"bad port", []string{"-addr", "h:http"}, `-addr "h:http": port "http" is not a number`},
		{"URL bad port", []string{"-addr", "redis://u:" + wrongPW + "@h:x"}, `-addr redis://u:xxxxx@h:x: invalid port ":x" after host`},
		{"URL scheme", []string{"-addr", "http://u:" + wrongPW + "@h:1"}, `-addr http://u:xxxxx@h:1: scheme "http": want redis:// or rediss://`},
		{"URL list", []string{"-addr", "redis://a:1,b:2"}, "a URL names one host: add the others as ?addr=host:port"},
		{"URL parameter", []string{"-addr", "redis://u:" + wrongPW + "@h:1?dial_timeout=1s"}, `-addr redis://u:xxxxx@h:1?dial_timeout=1s: URL parameter "dial_timeout" is not supported`},
		{"URL db", []string{"-addr", "redis://h:1/x"}, `invalid database number: "x"`},
		{"URL path", []string{"-addr", "redis://h:1/0/1"}, "invalid URL path: /0/1"},
		{"URL unencoded /", []string{"-addr", "redis://u:12/" + wrongPW + "@h:1"}, "-addr redis://u:xxxxx@h:1: the user or password holds '/', '?' or '#': percent-encode them"},
		{"URL unencoded ?", []string{"-addr", "redis://u:x?" + wrongPW + "@h:1"}, "-addr redis://u:xxxxx@h:1: the user or password holds '/', '?' or '#'"},
		{"URL bad escape", []string{"-addr", "redis://u:%zz" + wrongPW + "@h:1"}, "-addr redis://u:xxxxx@h:1: a '%' that starts no valid escape: write % itself as %25"},
		{"-tls-ca without TLS", []string{"-tls-ca", notPEM}, "-tls-ca is given but TLS is off: add -tls, or use a rediss:// URL"},
		{"-tls-insecure without TLS", []string{"-tls-insecure"}, "-tls-insecure is given but TLS is off"},
		{"-tls-ca missing", []string{"-tls", "-tls-ca", missing}, "-tls-ca: open " + missing + ": no such file"},
		{"-tls-ca not PEM", []string{"-tls", "-tls-ca", notPEM}, "-tls-ca " + notPEM + ": no PEM certificate in it"},
		{"-tls-ca -tls-insecure", []string{"-tls", "-tls-insecure", "-tls-ca", notPEM}, "-tls-ca and -tls-insecure (or the URL's skip_verify) conflict"},
		{"-tls-ca skip_verify", []string{"-addr", "rediss://h:1?skip_verify", "-tls-ca", notPEM}, "-tls-ca and -tls-insecure (or the URL's skip_verify) conflict"},
		{"URL user without password", []string{"-addr", "redis://alice@h:1"}, `user "alice" needs a password`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runBaton(t, append(tc.args, "ls")...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want %d", r.code, exitUsage)
			}
			if first, _, _ := strings.Cut(r.stderr, "\n"); !strings.HasPrefix(first, "baton: ") || !strings.Contains(first, tc.want) {
				t.Errorf("stderr begins %q, want baton: ...%s...", first, tc.want)
			}
			if strings.Contains(r.stderr, wrongPW) {
				t.Errorf("stderr shows the password %q", wrongPW)
			}
		})
	}
}

func TestLoginHelp(t *testing.T) {
	r := runBaton(t, "help")
	for _, want := range []string{"precedence: a flag on the command line, then\nthe -addr URL, then $REDISCLI_AUTH", "REDISCLI_AUTH", "rediss://", "-tls-ca", "-tls-insecure", "-user", "-password"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("help does not say %q", want)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:pw@h:x":          "redis://u:xxxxx@h:x",
		"redis://:pw@h:x/0":         "redis://:xxxxx@h:x/0",
		"redis://u:p@w:d@h:x":       "redis://u:xxxxx@h:x",
		"redis://u@h:x":             "redis://u@h:x",
		"redis://u:p/w@h:x":         "redis://u:xxxxx@h:x",
		"redis://u:12/w@h:1":        "redis://u:xxxxx@h:1",
		"redis://u:p@h:1?addr=h2:1": "redis://u:xxxxx@h:1?addr=h2:1",
		"redis://h:1":               "redis://h:1",
		"not a url":                 "not a url",
		"rediss://user:pw@[::1]:x/": "rediss://user:xxxxx@[::1]:x/",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
