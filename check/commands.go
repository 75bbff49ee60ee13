package check

// Run's checks of the commands slidelog sends: a script that calls TIME
// (EVALSHA, NOSCRIPT then EVAL), and the ACL permissions of every command.

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// checkScript is the script Run runs: slidelog's scripts take their
// clock from TIME.
var checkScript = redis.NewScript("-- slidelog check: may a script call TIME?\nreturn redis.call('TIME')")

// aclCommands are the commands slidelog sends, each with arguments that
// make ACL DRYRUN accept it; "KEY" stands for a key under the prefix.
var aclCommands = [][]any{
	{"EVALSHA", checkScript.Hash(), "1", "KEY"},
	{"EVAL", "return 1", "1", "KEY"},
	{"ZADD", "KEY", "1", "m"},
	{"ZCARD", "KEY"},
	{"ZRANGE", "KEY", "0", "-1"},
	{"ZCOUNT", "KEY", "0", "1"},
	{"ZREMRANGEBYSCORE", "KEY", "0", "1"},
	{"PEXPIREAT", "KEY", "1"},
	{"ZSCORE", "KEY", "m"},
	{"ZREM", "KEY", "m"},
	{"DEL", "KEY"},
	{"GETRANGE", "KEY", "0", "1"},
	{"SETRANGE", "KEY", "0", "x"},
	{"SET", "KEY", "x"},
	{"STRLEN", "KEY"},
	{"ZRANGEBYSCORE", "KEY", "0", "1"},
	{"TIME"},
}

// Commands are the names of the commands slidelog sends whose ACL
// permissions Run verifies (ACL DRYRUN, on a key under the prefix), in the
// order it asks: EVALSHA and EVAL, by which go-redis runs every script,
// then every command slidelog's scripts call. With Options.Replicas, Run
// also verifies WAIT, which the library sends itself, outside any script.
// A root test (TestCheckVerifiesTheScriptsCommands) holds the list to
// the commands the scripts' sources call: a command added to a script is
// one Run must verify.
func Commands() []string {
	names := make([]string, len(aclCommands))
	for i, c := range aclCommands {
		names[i] = c[0].(string)
	}
	return names
}

// script runs checkScript by EVALSHA; on NOSCRIPT by EVAL, and then again
// by EVALSHA, as go-redis' Script.Run does with slidelog's scripts. On
// Redis 6, lua-replicate-commands no (yes by default; gone in Redis 7,
// which always replicates a script's effects) makes every write after TIME
// in a script fail: checkScript writes nothing, so the setting is read.
func (s *serverCheck) script(ctx context.Context) {
	fail := func(how string, err error) {
		if s.refused(err) {
			s.add(SeverityProblem, "script", "a script calling TIME failed (%s): %s; slidelog decides in Lua scripts that take their clock from TIME", how, why(err))
		}
	}
	how := "EVALSHA works and a script may call TIME"
	err := checkScript.EvalSha(ctx, s.node, nil).Err()
	if redis.HasErrorPrefix(err, "NOSCRIPT") {
		if err = checkScript.Eval(ctx, s.node, nil).Err(); err != nil {
			fail("EVAL after NOSCRIPT", err)
			return
		}
		if err = checkScript.EvalSha(ctx, s.node, nil).Err(); err != nil {
			fail("EVALSHA after EVAL", err)
			return
		}
		how = "EVALSHA, NOSCRIPT then EVAL, and TIME in a script work"
	} else if err != nil {
		fail("EVALSHA", err)
		return
	}
	if s.config["lua-replicate-commands"] == "no" {
		s.add(SeverityProblem, "script", "%s, but lua-replicate-commands is no: Redis 6 then refuses a script's writes after TIME (Write commands not allowed after non deterministic commands), and slidelog's scripts write after TIME: every admission fails; set lua-replicate-commands yes (the default)", how)
		return
	}
	s.add(SeverityInfo, "script", "%s", how)
}

// acl asks ACL DRYRUN (Redis 7 and later) whether the connection's user
// may run each command slidelog sends on a key under the prefix.
func (s *serverCheck) acl(ctx context.Context) {
	if s.major > 0 && s.major < 7 {
		s.add(SeverityWarning, "acl", "could not check ACL permissions: ACL DRYRUN needs Redis 7 or later")
		return
	}
	user, err := s.node.Do(ctx, "ACL", "WHOAMI").Text()
	if err != nil {
		if s.refused(err) {
			s.add(SeverityWarning, "acl", "could not check ACL permissions: ACL WHOAMI refused: %s", why(err))
		}
		return
	}
	key := s.prefix + "check"
	var denied []string
	commands := aclCommands
	if s.acks > 0 {
		commands = append(commands[:len(commands):len(commands)], []any{"WAIT", "1", "1"})
	}
	for _, c := range commands {
		args := []any{"ACL", "DRYRUN", user}
		for _, a := range c {
			if a == "KEY" {
				a = key
			}
			args = append(args, a)
		}
		answer, err := s.node.Do(ctx, args...).Text()
		if err != nil {
			if s.refused(err) {
				s.add(SeverityWarning, "acl", "could not check ACL permissions: ACL DRYRUN refused: %s", why(err))
			}
			return
		}
		if answer != "OK" {
			denied = append(denied, fmt.Sprintf("%s (%s)", c[0], why(errors.New(answer))))
		}
	}
	if len(denied) > 0 {
		s.add(SeverityProblem, "acl", "user %s may not run what slidelog sends on %s: %s", user, key, strings.Join(denied, "; "))
		return
	}
	s.add(SeverityInfo, "acl", "user %s may run every command slidelog sends on %s*", user, s.prefix)
}
