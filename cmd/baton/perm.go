package main

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/redis/rueidis"
)

// Redis refuses a command, a key or a channel to an ACL user with NOPERM,
// and names neither the user nor the rule that would allow it: permHint
// does, as the other errors of the CLI say what to check.

// noPermCommand matches Redis's NOPERM for a command: "NOPERM this user
// has no permissions to run the 'scan' command" (a subcommand: 'config|get').
var noPermCommand = regexp.MustCompile(`NOPERM .*run the '([^']+)' command`)

// permHint says which ACL rule the user opt logs in as lacks when err is
// Redis's NOPERM, "" for any other error.
func permHint(err error, opt rueidis.ClientOption, prefix string) string {
	var re *rueidis.RedisError
	if !errors.As(err, &re) || !strings.HasPrefix(re.Error(), "NOPERM") {
		return ""
	}
	user := "default"
	if opt.Username != "" {
		user = opt.Username
	}
	msg := re.Error()
	switch m := noPermCommand.FindStringSubmatch(msg); {
	case m != nil && strings.EqualFold(m[1], "scan"):
		return fmt.Sprintf("user %q lacks +scan, which ls needs to list names (SCAN sees every key name, so the library's ACL line leaves it out): "+
			"ACL SETUSER %s +scan, the README's listing line; show NAME needs no SCAN", user, user)
	case m != nil:
		return fmt.Sprintf("user %q lacks +%s: ACL SETUSER %s +%s (see the README's ACL line)", user, strings.ToLower(m[1]), user, strings.ToLower(m[1]))
	case strings.Contains(msg, "keys"):
		return fmt.Sprintf("user %q may not read or write baton's keys: give it ~%s:* (see the README's ACL line)", user, prefix)
	case strings.Contains(msg, "channel"):
		return fmt.Sprintf("user %q may not use baton's channels: give it &%s:c:* &%s:g:* &%s:e:* (see the README's ACL line)", user, prefix, prefix, prefix)
	}
	return fmt.Sprintf("user %q lacks a permission: compare its rules with the README's ACL line", user)
}
