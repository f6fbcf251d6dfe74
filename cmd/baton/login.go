package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/rueidis"
)

// authEnv holds the password when neither -password nor the -addr URL
// gives one, as for redis-cli.
const authEnv = "REDISCLI_AUTH"

// connFlags is what the flags say about where Redis is and how to log in.
// resolve merges it with the -addr URL and REDISCLI_AUTH.
type connFlags struct {
	addr, master   string
	user, password string
	tls, insecure  bool
	caFile         string
}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "127.0.0.1:6379", "Redis address: `host:port`, a comma-separated list (cluster nodes, or sentinels with -sentinel-master), "+
		"or a URL redis://[user[:password]@]host[:port][/db] (rediss:// for TLS; more nodes as ?addr=host:port)")
	fs.StringVar(&c.master, "sentinel-master", "", "the master's `name`: -addr lists sentinels")
	fs.StringVar(&c.user, "user", "", "the ACL `user` to log in as (default: the URL's user, else \"default\")")
	fs.StringVar(&c.password, "password", "", "the user's `password` (default: the URL's password, else $"+authEnv+"); visible to other local users in the process list: prefer "+authEnv)
	fs.BoolVar(&c.tls, "tls", false, "connect over TLS (default: true for a rediss:// URL)")
	fs.StringVar(&c.caFile, "tls-ca", "", "trust only the CA certificates in this PEM `file` (default: the system's CAs); needs TLS")
	fs.BoolVar(&c.insecure, "tls-insecure", false, "do not verify the server's certificate (default: the URL's skip_verify); needs TLS")
}

// resolve returns the client options the flags, the -addr URL and the
// environment give, in that order of precedence: a flag given on the
// command line wins over the URL, and a password in either wins over
// REDISCLI_AUTH. explicit holds the names of the flags given.
func (c *connFlags) resolve(explicit map[string]bool, lookupEnv func(string) (string, bool)) (rueidis.ClientOption, error) {
	opt, err := parseAddr(c.addr)
	if err != nil {
		return opt, err
	}
	// The URL's TLS settings, before the flags have their say.
	useTLS := opt.TLSConfig != nil
	insecure := useTLS && opt.TLSConfig.InsecureSkipVerify
	opt.TLSConfig = nil

	if explicit["user"] {
		opt.Username = c.user
	}
	switch {
	case explicit["password"]:
		opt.Password = c.password
	case opt.Password == "":
		if v, ok := lookupEnv(authEnv); ok {
			opt.Password = v
		}
	}
	if opt.Username != "" && opt.Password == "" {
		return opt, fmt.Errorf("user %q needs a password: give -password, set %s, or put user:password in the -addr URL "+
			"(a user with nopass accepts any)", opt.Username, authEnv)
	}
	if explicit["sentinel-master"] {
		opt.Sentinel.MasterSet = c.master
	}

	if explicit["tls"] {
		useTLS = c.tls
	}
	if explicit["tls-insecure"] {
		insecure = c.insecure
	}
	switch {
	case useTLS:
		opt.TLSConfig, err = c.tlsConfig(insecure)
	case c.caFile != "":
		err = errors.New("-tls-ca is given but TLS is off: add -tls, or use a rediss:// URL")
	case explicit["tls-insecure"] && c.insecure:
		err = errors.New("-tls-insecure is given but TLS is off: add -tls, or use a rediss:// URL")
	}
	return opt, err
}

// tlsConfig is the TLS configuration: the system's CAs or those of
// -tls-ca, or no verification. Each connection checks the certificate
// against the host it dials.
func (c *connFlags) tlsConfig(insecure bool) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: insecure}
	if c.caFile == "" {
		return cfg, nil
	}
	if insecure {
		return nil, errors.New("-tls-ca and -tls-insecure (or the URL's skip_verify) conflict: " +
			"-tls-insecure skips the verification -tls-ca is for; give one of them")
	}
	b, err := os.ReadFile(c.caFile)
	if err != nil {
		return nil, fmt.Errorf("-tls-ca: %v", err)
	}
	cfg.RootCAs = x509.NewCertPool()
	if !cfg.RootCAs.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("-tls-ca %s: no PEM certificate in it (want the CA's certificate: -----BEGIN CERTIFICATE-----)", c.caFile)
	}
	return cfg, nil
}

// urlParams are the query parameters of an -addr URL that baton honours,
// as rueidis.ParseURL reads them. Others (timeouts, retries, the client
// cache) are baton's to set, and a typo must not pass unnoticed.
var urlParams = []string{"addr", "db", "skip_verify", "master_set", "client_name", "protocol"}

// parseAddr reads -addr: a URL (anything with "://"), or a comma-separated
// list of host:port.
func parseAddr(addr string) (rueidis.ClientOption, error) {
	var opt rueidis.ClientOption
	if !strings.Contains(addr, "://") {
		for a := range strings.SplitSeq(addr, ",") {
			if a = strings.TrimSpace(a); a == "" {
				continue
			}
			if at := strings.LastIndex(a, "@"); at >= 0 {
				return opt, fmt.Errorf("-addr %q: user information needs a URL: redis://USER:PASSWORD@HOST:PORT, or -user and -password",
					"xxxxx"+a[at:])
			}
			if err := checkHostPort(a); err != nil {
				return opt, fmt.Errorf("-addr %q: %v (want host:port, [ipv6]:port, or a redis:// or rediss:// URL)", a, err)
			}
			opt.InitAddress = append(opt.InitAddress, a)
		}
		if len(opt.InitAddress) == 0 {
			return opt, errors.New("-addr is empty")
		}
		return opt, nil
	}

	// The URL may hold a password: errors show it redacted, and none may
	// quote a piece of it.
	shown := redactURL(addr)
	_, rest, _ := strings.Cut(addr, "://")
	if at := strings.LastIndex(rest, "@"); at >= 0 && strings.ContainsAny(rest[:at], "/?#") {
		return opt, fmt.Errorf("-addr %s: the user or password holds '/', '?' or '#': percent-encode them (%%2F, %%3F, %%23)", shown)
	}
	u, err := url.Parse(addr)
	if err != nil {
		var ee url.EscapeError
		switch ue := (*url.Error)(nil); {
		case errors.As(err, &ee):
			err = errors.New("a '%' that starts no valid escape: write % itself as %25")
		case errors.As(err, &ue):
			err = ue.Err
		}
		return opt, fmt.Errorf("-addr %s: %v", shown, err)
	}
	switch u.Scheme {
	case "redis", "rediss", "valkey", "valkeys":
	default:
		return opt, fmt.Errorf("-addr %s: scheme %q: want redis:// or rediss:// (TLS)", shown, u.Scheme)
	}
	if strings.Contains(u.Host, ",") {
		return opt, fmt.Errorf("-addr %s: a URL names one host: add the others as ?addr=host:port", shown)
	}
	for k := range u.Query() {
		if !slices.Contains(urlParams, k) {
			return opt, fmt.Errorf("-addr %s: URL parameter %q is not supported (baton reads %s; -timeout bounds connecting)",
				shown, k, strings.Join(urlParams, ", "))
		}
	}
	if opt, err = rueidis.ParseURL(addr); err != nil {
		return opt, fmt.Errorf("-addr %s: %s", shown, strings.TrimPrefix(err.Error(), "redis: "))
	}
	for _, a := range opt.InitAddress {
		if err := checkHostPort(a); err != nil {
			return opt, fmt.Errorf("-addr %s: address %q: %v", shown, a, err)
		}
	}
	return opt, nil
}

// checkHostPort says what is wrong with a host:port, if anything.
func checkHostPort(a string) error {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return errors.New(ae.Err)
		}
		return err
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// redactURL hides the password of an -addr URL, for error messages:
// what lies between the first ':' after "://" and the last '@'. It does
// not parse: a password with a '/' that should have been encoded would
// make url.Parse take part of it for the path, and show it.
func redactURL(s string) string {
	_, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return s
	}
	colon := strings.Index(rest[:at], ":")
	if colon < 0 {
		return s
	}
	start := len(s) - len(rest) + colon + 1
	return s[:start] + "xxxxx" + s[len(s)-len(rest)+at:]
}

// connectError is a failure to connect or to log in: where, as whom, and
// what to check.
type connectError struct {
	where string // the addresses, the user and TLS, as describe says
	err   error
	hint  string
}

func (e *connectError) Error() string {
	return fmt.Sprintf("connect to %s: %s (%s)", e.where, strings.TrimSuffix(e.err.Error(), "."), e.hint)
}

func (e *connectError) Unwrap() error { return e.err }

// describe says where opt connects and as whom, for error messages; never
// the password.
func describe(opt rueidis.ClientOption) string {
	s := strings.Join(opt.InitAddress, ",")
	if opt.Sentinel.MasterSet != "" {
		s = fmt.Sprintf("master %q via sentinels %s", opt.Sentinel.MasterSet, s)
	}
	switch {
	case opt.Username != "":
		s += fmt.Sprintf(" as user %q", opt.Username)
	case opt.Password != "":
		s += ` as user "default"`
	}
	if opt.TLSConfig != nil {
		s += " over TLS"
	}
	return s
}

// connectErr wraps an error of rueidis.NewClient with where it tried to
// connect and a hint of what to check.
func connectErr(err error, opt rueidis.ClientOption, timeout time.Duration) error {
	return &connectError{where: describe(opt), err: err, hint: hint(err, opt, timeout)}
}

// hint says what to check after err, from the most specific cause.
func hint(err error, opt rueidis.ClientOption, timeout time.Duration) string {
	if h := redisHint(err); h != "" {
		return h
	}
	if h := tlsHint(err, opt.TLSConfig != nil); h != "" {
		return h
	}
	var dns *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens there: check -addr, and that Redis is running"
	case errors.As(err, &dns):
		return "check the host name in -addr"
	case (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)) && opt.TLSConfig != nil:
		// A plain server reads the TLS hello as the start of a command and
		// waits for its end.
		return fmt.Sprintf("no answer within -timeout %v: if the server takes plain connections, drop -tls or use a redis:// URL; "+
			"else check -addr, and that no firewall drops the connection", timeout)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded):
		return fmt.Sprintf("no answer within -timeout %v: check -addr, and that no firewall drops the connection", timeout)
	case strings.Contains(err.Error(), "unknown message type"):
		return "what answered does not speak Redis's protocol: check -addr"
	}
	return "check -addr"
}

// redisHint reads the errors Redis answers when logging in.
func redisHint(err error) string {
	var re *rueidis.RedisError
	if !errors.As(err, &re) {
		return ""
	}
	msg := re.Error()
	switch {
	case strings.HasPrefix(msg, "WRONGPASS"):
		return "check -user and -password, or " + authEnv + ", or the user:password in the -addr URL"
	case strings.HasPrefix(msg, "NOAUTH"):
		return "the server requires a password: give -password, with -user for an ACL user; or set " + authEnv +
			"; or put user:password in the -addr URL"
	case strings.HasPrefix(msg, "NOPERM"):
		return "the user may not run a command baton needs to connect: check its ACL rules"
	}
	return "Redis refused: check -addr, and the server's log"
}

// tlsHint reads TLS failures, and a server that hangs up on plain text.
func tlsHint(err error, useTLS bool) string {
	var (
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
		record   tls.RecordHeaderError
	)
	switch {
	case errors.As(err, &unknown):
		return "the server's certificate is signed by a CA this machine does not trust: " +
			"give that CA's certificate with -tls-ca FILE, or skip verification with -tls-insecure"
	case errors.As(err, &hostname):
		return "the server's certificate is not for the host in -addr: connect by a name it lists, " +
			"or skip verification with -tls-insecure"
	case errors.As(err, &invalid):
		return "the server's certificate is not valid (expired?): renew it, or skip verification with -tls-insecure"
	case errors.As(err, &verify):
		return "the server's certificate failed verification: check -tls-ca"
	case errors.As(err, &record):
		return "the server does not speak TLS there: if it takes plain connections, drop -tls or use a redis:// URL"
	case useTLS:
		return ""
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		return "the server hung up: if it takes TLS connections only, add -tls or use a rediss:// URL"
	}
	return ""
}
