// Command baton lists, inspects and force-releases baton's locks,
// semaphores and elections in Redis.
//
// Usage:
//
//	baton [-addr host:port[,host:port...] | -addr redis[s]://[user[:password]@]host[:port][/db]]
//	      [-user USER] [-password PASSWORD] [-tls] [-tls-ca FILE] [-tls-insecure]
//	      [-sentinel-master NAME] [-prefix baton] [-timeout 5s] VERB ...
//
// Verbs:
//
//	ls [-match GLOB] [-kind KIND]          one line per name and kind: state, token,
//	                                       soonest lease left, queue length, holders, instances
//	                                       (states: held, cached, pending, free, foreign)
//	show NAME                              every kind found under NAME: holders (member,
//	                                       instance, token, lease), an election's value, the queue
//	release -force NAME                    take the lock from its holder (see below)
//	release -force -member MEMBER NAME     take a semaphore's permit from MEMBER (<session>.<slot>)
//	release -force -kind election NAME     take an election's leadership from its leader
//	                                       (-member <session>.e<slot>: only from that member)
//
// A name may be a lock, a semaphore and an election at once: each kind has
// keys of its own. The instance of a holder or a queued session is the
// Options.Instance of its client ("hostname:pid" by default), "?" when
// Redis has no record of it.
//
// release without -force refuses: it evicts a live holder, which goes on
// working until it notices (a lock's holder at once with baton's held-key
// tracking; else, and always for permits and leaderships, at its next
// renewal, within a third of its lease), and whose writes are then refused
// only by a resource that checks fencing tokens. With -force the lock,
// permit or leadership goes to the first live queued session, as the
// holder's own release would give it (an election's observers are told of
// the new leader), or becomes free; tokens keep rising. A free name is
// left as it is (exit 3), and so is a key holding a value baton did not
// write (exit 1). A -member that does not hold is refused (exit 3), and
// nothing changes.
//
// Redis Cluster is found from -addr as rueidis finds it; -sentinel-master
// makes -addr the sentinels' addresses.
//
// Logging in: -user and -password, or the user:password of an -addr URL,
// or for the password alone the environment variable REDISCLI_AUTH, as for
// redis-cli. A flag given on the command line wins over the URL, and a
// password from either wins over REDISCLI_AUTH. TLS is on with -tls or a
// rediss:// URL; the certificate is checked against the system's CAs, or
// only those of -tls-ca FILE, and against the host dialed, unless
// -tls-insecure. With -sentinel-master, TLS applies to the sentinels too;
// the user and password to the master only.
//
// Exit status: 0 success (for release: something was released), 1 a Redis
// error (failing to connect or to log in included) or a foreign value, 2
// bad usage (a malformed -addr or -member, an unreadable -tls-ca file
// included; one line on stderr, then "run 'baton help'"), 3 release found
// nothing to release (the name is not held, nobody leads the election, or
// -member does not hold), with one line on stderr saying so.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/batonlock/baton/admin"
	"github.com/redis/rueidis"
)

// Exit statuses.
const (
	exitOK      = 0
	exitRedis   = 1 // Redis failed or refused, or the key holds a foreign value
	exitUsage   = 2
	exitNothing = 3 // release found nothing to release: the name is free, nobody leads, or -member does not hold
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: baton [flags] VERB ...

verbs:
  ls [-match GLOB] [-kind KIND]       list locks, semaphores and elections (GLOB as
                                      in Redis SCAN MATCH; "*" spans "/")
  show NAME                           show every kind found under NAME: holders,
                                      instances, tokens, leases, queue
  release -force NAME                 take the lock from its holder: the first
                                      queued session gets it, or it becomes free
  release -force -member MEMBER NAME  take a semaphore's permit from MEMBER
  release -force -kind election NAME  take an election's leadership from its
                                      leader (or from -member MEMBER only)

connecting and logging in (precedence: a flag on the command line, then
the -addr URL, then $REDISCLI_AUTH for the password):
  -addr HOST:PORT[,HOST:PORT...]          a node, cluster nodes, or sentinels
  -addr redis://[USER[:PASSWORD]@]HOST[:PORT][/DB][?addr=HOST:PORT...]
                                          percent-encode USER and PASSWORD
                                          (@ as %40, : as %3A, % as %25)
  -addr rediss://...                      the same over TLS
  -user USER -password PASSWORD           an ACL user; -password alone is the
                                          "default" user's (requirepass)
  REDISCLI_AUTH=PASSWORD baton ...        the password, out of the process list
  -tls [-tls-ca ca.pem | -tls-insecure]   TLS, trusting the system's CAs, or
                                          only ca.pem's, or not verifying

exit status: 0 success (release: something was released), 1 a Redis
error (connecting and logging in included) or a foreign value, 2 bad
usage, 3 release found nothing to release (the name is not held, nobody
leads, or -member does not hold)

flags:
`

// config is what the global flags say.
type config struct {
	redis    rueidis.ClientOption // where Redis is and how to log in, as connFlags.resolve says
	prefix   string
	timeout  time.Duration
	out, err io.Writer
}

// run is the command: args are those after the program name. It returns
// the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cfg := config{out: stdout, err: stderr}
	fs := flag.NewFlagSet("baton", flag.ContinueOnError)
	var conn connFlags
	conn.register(fs)
	fs.StringVar(&cfg.prefix, "prefix", "baton", "the key prefix of the locks (baton.Options.KeyPrefix)")
	fs.DurationVar(&cfg.timeout, "timeout", 5*time.Second, "bound on connecting and on each Redis round of the verb")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	if err := quietParse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return exitOK
		}
		return cfg.usageError(err.Error())
	}
	explicit := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = true })
	var err error
	if cfg.redis, err = conn.resolve(explicit, os.LookupEnv); err != nil {
		return cfg.usageError(err.Error())
	}
	switch {
	case cfg.timeout <= 0:
		return cfg.usageError("-timeout must be positive")
	case strings.ContainsAny(cfg.prefix, "{}"):
		return cfg.usageError("-prefix must not contain '{' or '}'")
	case fs.NArg() == 0:
		return cfg.usageError("missing verb")
	}
	verb, rest := fs.Arg(0), fs.Args()[1:]
	var do func(a *admin.Admin) int
	var code int
	switch verb {
	case "ls":
		do, code = cfg.parseLs(rest)
	case "show":
		do, code = cfg.parseShow(rest)
	case "release":
		do, code = cfg.parseRelease(rest)
	case "help":
		fs.SetOutput(stdout)
		fs.Usage()
		return exitOK
	default:
		return cfg.usageError(fmt.Sprintf("unknown verb %q", verb))
	}
	if do == nil {
		return code
	}
	a, closeFn, err := cfg.connect()
	if err != nil {
		fmt.Fprintf(stderr, "baton: %v\n", err)
		return cfg.exitCode(err)
	}
	defer closeFn()
	return do(a)
}

// usageError reports bad usage in one line, with a pointer to the help.
func (cfg *config) usageError(msg string) int {
	fmt.Fprintf(cfg.err, "baton: %s (%s)\n", msg, helpPointer)
	return exitUsage
}

// helpPointer ends every usage error: the help is long, the error one line.
const helpPointer = "run 'baton help'"

// quietParse parses args with fs, which prints nothing: the caller reports
// an error in one line, and prints the usage itself for -h.
func quietParse(fs *flag.FlagSet, args []string) error {
	out := fs.Output()
	usage := fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	defer func() { fs.SetOutput(out); fs.Usage = usage }()
	return fs.Parse(args)
}

// connect makes the rueidis client and the Admin on it.
func (cfg *config) connect() (*admin.Admin, func(), error) {
	opt := cfg.redis
	// Nothing here is read twice: no client-side cache.
	opt.DisableCache = true
	opt.ConnWriteTimeout = cfg.timeout
	opt.Dialer.Timeout = cfg.timeout
	if opt.Sentinel.MasterSet != "" {
		opt.Sentinel.Dialer.Timeout = cfg.timeout
		opt.Sentinel.TLSConfig = opt.TLSConfig
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, nil, connectErr(err, opt, cfg.timeout)
	}
	a, err := admin.New(rc, cfg.prefix)
	if err != nil {
		rc.Close()
		return nil, nil, err
	}
	return a, rc.Close, nil
}

// ctx bounds one Redis round of a verb.
func (cfg *config) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), cfg.timeout)
}

// exitCode maps an error of admin to an exit status: a name or pattern
// admin refuses is bad usage, anything else came from Redis.
func (cfg *config) exitCode(err error) int {
	if errors.Is(err, admin.ErrInvalidName) || errors.Is(err, admin.ErrInvalidPattern) || errors.Is(err, admin.ErrInvalidPrefix) ||
		errors.Is(err, admin.ErrInvalidMember) {
		return exitUsage
	}
	if errors.Is(err, admin.ErrNotHolder) {
		return exitNothing
	}
	return exitRedis
}

// fail reports err in one line, with the pointer to the help for bad
// usage and what to check when Redis refused the user a permission, and
// returns its exit status.
func (cfg *config) fail(err error) int {
	code := cfg.exitCode(err)
	switch h := permHint(err, cfg.redis, cfg.prefix); {
	case code == exitUsage:
		fmt.Fprintf(cfg.err, "baton: %v (%s)\n", err, helpPointer)
	case h != "":
		fmt.Fprintf(cfg.err, "baton: %v (%s)\n", err, h)
	default:
		fmt.Fprintf(cfg.err, "baton: %v\n", err)
	}
	return code
}
