package baton

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// The README's Redis ACL user is one string: tests read its line from
// README.md and create the user with exactly it; no copy lives here.
// TestACLLineDerived derives what the line must allow from the sources
// (every command the Lua scripts call, every command baton's Go code
// builds, and what rueidis sends of itself), so that a script calling a new
// command fails the test until the README's line names it. The tests in
// scripts_test.go run every primitive as a user created with that line and
// demand that Redis denied it nothing; the gocron module's TestACL does the
// same for its Locker and Elector.

// The README's markers: each is followed by a fenced block of one line.
const (
	aclMarker     = "<!-- acl -->"      // the library's user
	aclListMarker = "<!-- acl-list -->" // what listing names adds (baton ls, ?scope=redis)
)

// readmeBlock returns the one line of the fenced block that follows marker
// in README.md.
func readmeBlock(t testing.TB, marker string) string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), marker)
	if !ok {
		t.Fatalf("README.md has no %s", marker)
	}
	lines := strings.Split(strings.TrimLeft(after, " \n"), "\n")
	if len(lines) < 3 || lines[0] != "```" || lines[2] != "```" {
		t.Fatalf("README.md: %s is not followed by a fenced block of one line", marker)
	}
	return lines[1]
}

// aclRules is an "ACL SETUSER" line taken apart.
type aclRules struct {
	argv           []string        // the line's words, to send as they are
	user, password string          // its user name and its ">password"
	commands       map[string]bool // its "+<command>" rules, lower case
	keys, channels []string        // its "~<pattern>" and "&<pattern>" rules
}

// parseACL takes line apart. It accepts explicit +commands only (no
// categories), so that the line can be compared with what baton sends.
func parseACL(t testing.TB, line string) aclRules {
	t.Helper()
	f := strings.Fields(line)
	if len(f) < 4 || !strings.EqualFold(f[0], "ACL") || !strings.EqualFold(f[1], "SETUSER") {
		t.Fatalf("not an ACL SETUSER line: %q", line)
	}
	r := aclRules{argv: f, user: f[2], commands: map[string]bool{}}
	for _, w := range f[3:] {
		switch {
		case w == "on" || w == "resetkeys" || w == "resetchannels" || w == "-@all":
		case strings.HasPrefix(w, ">"):
			r.password = w[1:]
		case strings.HasPrefix(w, "~"):
			r.keys = append(r.keys, w[1:])
		case strings.HasPrefix(w, "&"):
			r.channels = append(r.channels, w[1:])
		case strings.HasPrefix(w, "+") && !strings.HasPrefix(w, "+@"):
			cmd := strings.ToLower(w[1:])
			if r.commands[cmd] {
				t.Errorf("%q allows +%s twice", line, cmd)
			}
			r.commands[cmd] = true
		default:
			t.Fatalf("%q: rule %q: the tests know +<command>, ~<keys>, &<channels>, on, >password, resetkeys, resetchannels and -@all", line, w)
		}
	}
	return r
}

// rueidisSent are the commands rueidis sends of itself on baton's
// connections, and those that end subscriptions, with a command line for
// ACL DRYRUN. Rule "" needs no permission (DRYRUN passes anyway). Not here:
// CLIENT SETINFO, which rueidis sends at connect on Redis 7.2 or later and
// whose refusal it ignores (Redis 7.0 rejects the rule +client|setinfo).
var rueidisSent = []struct {
	rule string
	argv []string
	why  string
}{
	{"", []string{"HELLO", "3"}, "at connect (its AUTH logs in)"},
	{"ping", []string{"PING"}, "keep-alive of idle connections"},
	{"client|tracking", []string{"CLIENT", "TRACKING", "ON", "OPTIN", "NOLOOP"}, "at connect: client-side caching"},
	{"cluster|slots", []string{"CLUSTER", "SLOTS"}, "at New, to tell a Cluster, and its slot map on Redis 7"},
	{"cluster|shards", []string{"CLUSTER", "SHARDS"}, "the slot map on Redis 8 or later"},
	{"asking", []string{"ASKING"}, "following an ASK redirect while a slot migrates"},
	{"role", []string{"ROLE"}, "Sentinel: confirming the primary it was told of"},
	{"unsubscribe", []string{"UNSUBSCRIBE", "baton:c:x"}, "ending a subscription"},
	{"sunsubscribe", []string{"SUNSUBSCRIBE", "baton:g:{x}"}, "ending a shard subscription"},
}

// Where baton's Go code talks to Redis. Commands built in libraryGo are
// the library user's; those built in listingGo (admin's List, the CLI, the
// page) and not by the library are what listing names adds. Lua, wherever
// it is, runs as the library's user (admin's Inspect and ForceRelease are
// Client.Admin's).
var (
	libraryGo = []string{".", "internal/script", "internal/keyspace", "internal/adminscript", "gocron", "otel", "prometheus"}
	listingGo = []string{"admin", "cmd/baton", "batonhttp"}
)

// aclUses maps a command, spelled as an ACL rule, to where it is sent.
type aclUses map[string][]string

func (u aclUses) add(cmd, where string) { u[cmd] = append(u[cmd], where) }

// deriveACL returns what the library's user needs, and what listing
// names needs beyond that.
func deriveACL(t *testing.T) (library, listing aclUses) {
	library, listing = aclUses{}, aclUses{}
	lua, err := filepath.Glob("internal/script/*.lua")
	if err != nil || len(lua) == 0 {
		t.Fatalf("no scripts in internal/script: %v", err)
	}
	for _, f := range lua {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		luaCalls(t, f, string(src), library)
	}
	for _, dir := range libraryGo {
		goCalls(t, dir, library, library)
	}
	built := aclUses{}
	for _, dir := range listingGo {
		goCalls(t, dir, built, library)
	}
	for _, s := range rueidisSent {
		if s.rule != "" {
			library.add(s.rule, "rueidis ("+s.why+")")
		}
	}
	for cmd, where := range built {
		if _, ok := library[cmd]; !ok {
			listing[cmd] = where
		}
	}
	return library, listing
}

var (
	luaCall    = regexp.MustCompile(`redis\.p?call\(`)
	luaLiteral = regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z_]+)['"](?:\s*,\s*['"]([A-Za-z_-]+)['"])?`)
)

// luaCalls adds the commands of src's redis.call and redis.pcall to into,
// and fails on a call whose command is not a string literal.
func luaCalls(t *testing.T, file, src string, into aclUses) {
	t.Helper()
	for i, line := range strings.Split(src, "\n") {
		lits := luaLiteral.FindAllStringSubmatch(line, -1)
		if len(lits) != len(luaCall.FindAllString(line, -1)) {
			t.Errorf("%s:%d: a redis.call whose command is not a string literal: the test cannot tell what it needs", file, i+1)
		}
		for _, m := range lits {
			cmd := strings.ToLower(m[1])
			if aclContainers[cmd] && m[2] != "" {
				cmd += "|" + strings.ToLower(m[2])
			}
			into.add(cmd, fmt.Sprintf("%s:%d", file, i+1))
		}
	}
}

// aclContainers are the commands whose ACL rules name a subcommand.
var aclContainers = map[string]bool{"acl": true, "client": true, "cluster": true, "command": true, "config": true,
	"function": true, "latency": true, "memory": true, "module": true, "object": true, "pubsub": true,
	"script": true, "slowlog": true, "xgroup": true, "xinfo": true}

var (
	goBuilt      = regexp.MustCompile(`\.B\(\)\.([A-Z]\w*)\(`)                            // rc.B().Subscribe()
	goBuilderVar = regexp.MustCompile(`(\w+) :?= [\w.]+\.B\(\)|(\w+) rueidis\.Builder\b`) // b := rc.B(); b rueidis.Builder
	goLuaScript  = regexp.MustCompile(`rueidis\.NewLuaScript(\w*)\(`)
	goRaw        = regexp.MustCompile(`\.Arbitrary\(|cmds\.NewCompleted`)
)

// goCalls adds to into the commands the non-test Go files of dir build
// with rueidis's builder, and to lua those their Lua scripts call and send.
func goCalls(t *testing.T, dir string, into, lua aclUses) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Go files in %s: %v", dir, err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		luaCalls(t, f, src, lua)
		res := []*regexp.Regexp{goBuilt}
		seen := map[string]bool{}
		for _, m := range goBuilderVar.FindAllStringSubmatch(src, -1) {
			if v := m[1] + m[2]; !seen[v] {
				seen[v] = true
				res = append(res, regexp.MustCompile(`\b`+v+`\.([A-Z]\w*)\(`))
			}
		}
		for i, line := range strings.Split(src, "\n") {
			where := fmt.Sprintf("%s:%d", f, i+1)
			if goRaw.MatchString(line) {
				t.Errorf("%s: a command built from strings: the test cannot tell what it needs", where)
			}
			for _, re := range res {
				for _, m := range re.FindAllStringSubmatch(line, -1) {
					into.add(builderCommand(m[1]), where)
				}
			}
			for _, m := range goLuaScript.FindAllStringSubmatch(line, -1) {
				ro := ""
				if strings.HasPrefix(m[1], "ReadOnly") {
					ro = "_ro"
				}
				for _, cmd := range []string{"evalsha" + ro, "eval" + ro, "script|load"} {
					lua.add(cmd, where)
				}
			}
		}
	}
}

// builderCommand spells a rueidis builder method as an ACL rule:
// ClientCaching is client|caching, EvalshaRo evalsha_ro.
func builderCommand(method string) string {
	var words []string
	start := 0
	for i, r := range method {
		if i > 0 && unicode.IsUpper(r) {
			words = append(words, strings.ToLower(method[start:i]))
			start = i
		}
	}
	words = append(words, strings.ToLower(method[start:]))
	switch {
	case len(words) == 1:
		return words[0]
	case aclContainers[words[0]]:
		return words[0] + "|" + strings.Join(words[1:], "-")
	}
	return strings.Join(words, "_")
}

// compareACL fails for every command needed and not allowed, and every
// command allowed and not needed.
func compareACL(t *testing.T, what string, allowed map[string]bool, needed aclUses) {
	t.Helper()
	for _, cmd := range slices.Sorted(maps.Keys(needed)) {
		if !allowed[cmd] {
			where := needed[cmd]
			if len(where) > 3 {
				where = append(where[:3:3], fmt.Sprintf("%d more", len(needed[cmd])-3))
			}
			t.Errorf("%s lacks +%s, which is sent at %s", what, cmd, strings.Join(where, ", "))
		}
	}
	for _, cmd := range slices.Sorted(maps.Keys(allowed)) {
		if _, ok := needed[cmd]; !ok {
			t.Errorf("%s allows +%s, which nothing sends", what, cmd)
		}
	}
}

// TestACLLineDerived: the README's ACL line allows exactly the commands
// baton sends (the scripts', the Go code's, rueidis's own) and the keys
// under the default prefix; its listing line adds exactly what admin's
// List, the CLI and the page send beyond that, to the same user.
func TestACLLineDerived(t *testing.T) {
	library, listing := deriveACL(t)
	line := parseACL(t, readmeBlock(t, aclMarker))
	compareACL(t, "README.md's ACL line", line.commands, library)
	list := parseACL(t, readmeBlock(t, aclListMarker))
	compareACL(t, "README.md's listing line", list.commands, listing)

	if want := []string{DefaultKeyPrefix + ":*"}; !slices.Equal(line.keys, want) {
		t.Errorf("the ACL line's key patterns are %q, want %q", line.keys, want)
	}
	if !slices.Contains(line.argv, "resetkeys") || !slices.Contains(line.argv, "resetchannels") || !slices.Contains(line.argv, "-@all") {
		t.Errorf("the ACL line must start from nothing (resetkeys, resetchannels, -@all): %q", line.argv)
	}
	for _, p := range line.channels {
		if !strings.HasPrefix(p, DefaultKeyPrefix+":") || strings.IndexAny(p, "*?[\\") != len(p)-1 {
			t.Errorf("channel pattern %q: want %q followed by a kind and one final '*'", p, DefaultKeyPrefix+":")
		}
	}
	if line.user == "" || line.password == "" || list.user != line.user || list.password != "" || len(list.keys)+len(list.channels) > 0 {
		t.Errorf("the listing line %q should only add commands to the ACL line's user %q", list.argv, line.user)
	}
}
