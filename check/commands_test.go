package check

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/redistest"
)

// Users whose ACL refuses commands: what the check itself may not run is
// a warning saying what could not be checked (the policy is then read
// from INFO); what slidelog needs and may not run is a problem.
func TestCheckACL(t *testing.T) {
	ctx := context.Background()
	addr := redistest.Start(t, redistest.Safe()...)
	admin := redistest.Client(t, addr)
	for user, rules := range map[string][]string{
		"managed": {"~slidelog:*", "+@all", "-config", "-acl"},
		"nothing": {"+@connection"},
		"nozadd":  {"~slidelog:*", "+@all", "-zadd"},
		"other":   {"~other:*", "+@all"},
	} {
		if err := admin.Do(ctx, append([]any{"ACL", "SETUSER", user, "on", ">pw"}, toAny(rules)...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("managed", func(t *testing.T) {
		r := runCheck(t, redistest.Client(t, addr, "managed", "pw"))
		if !r.OK() {
			t.Errorf("problems %v", r.Problems())
		}
		one(t, r, "maxmemory-policy", SeverityInfo, "maxmemory-policy noeviction (read from INFO)")
		one(t, r, "persistence", SeverityWarning, "appendonly yes; could not check appendfsync: CONFIG GET refused: NOPERM")
		one(t, r, "acl", SeverityWarning, "could not check ACL permissions: ACL WHOAMI refused: NOPERM")
		one(t, r, "script", SeverityInfo)
	})
	t.Run("nothing", func(t *testing.T) {
		r := runCheck(t, redistest.Client(t, addr, "nothing", "pw"))
		for _, c := range []string{"server", "maxmemory-policy", "persistence", "replication", "acl"} {
			one(t, r, c, SeverityWarning, "could not check", "NOPERM")
		}
		one(t, r, "script", SeverityProblem, "(EVALSHA)", "NOPERM", "'evalsha'")
		if len(r.Problems()) != 1 {
			t.Errorf("problems %v, want the script's alone", r.Problems())
		}
	})
	t.Run("nozadd", func(t *testing.T) {
		r := runCheck(t, redistest.Client(t, addr, "nozadd", "pw"))
		f := one(t, r, "acl", SeverityProblem, "user nozadd may not run what slidelog sends on slidelog:check: ZADD (", "'zadd'")
		if strings.Count(f.Text, "(") != 1 || len(r.Problems()) != 1 {
			t.Errorf("problems %v, want ZADD alone", r.Problems())
		}
	})
	t.Run("other prefix", func(t *testing.T) {
		r := runCheck(t, redistest.Client(t, addr, "other", "pw"), Options{Prefix: "other:"})
		if !r.OK() {
			t.Errorf("problems %v", r.Problems())
		}
		one(t, r, "acl", SeverityInfo, "user other may run every command slidelog sends on other:*")
	})
	t.Run("other keys", func(t *testing.T) {
		r := runCheck(t, redistest.Client(t, addr, "other", "pw"))
		f := one(t, r, "acl", SeverityProblem, "user other may not run", "'slidelog:check' key")
		for _, c := range []string{"EVALSHA", "EVAL", "ZADD", "ZCARD", "ZRANGE", "ZCOUNT", "ZREMRANGEBYSCORE", "PEXPIREAT", "ZSCORE", "ZREM", "DEL"} {
			if !strings.Contains(f.Text, c+" (") {
				t.Errorf("%s is not named", c)
			}
		}
		if strings.Contains(f.Text, "TIME") {
			t.Errorf("TIME (no key) is named")
		}
	})
}

// On Redis 6, lua-replicate-commands no makes a script's writes after TIME
// fail ("Write commands not allowed after non deterministic commands"):
// a problem. Redis 7 has no such setting (CONFIG GET answers nothing).
func TestCheckLuaReplicateCommands(t *testing.T) {
	for _, c := range []struct {
		setting string // CONFIG GET lua-replicate-commands' answer; "": none
		sev     Severity
		want    string
	}{
		{"no", SeverityProblem, "EVALSHA, NOSCRIPT then EVAL, and TIME in a script work, but lua-replicate-commands is no: Redis 6 then refuses a script's writes after TIME (Write commands not allowed after non deterministic commands), and slidelog's scripts write after TIME: every admission fails; set lua-replicate-commands yes (the default)"},
		{"yes", SeverityInfo, "EVALSHA, NOSCRIPT then EVAL, and TIME in a script work"},
		{"", SeverityInfo, "EVALSHA, NOSCRIPT then EVAL, and TIME in a script work"},
	} {
		t.Run(c.setting, func(t *testing.T) {
			rdb := redistest.Client(t, redistest.Start(t, redistest.Safe()...))
			rdb.AddHook(serverAnswers(func(cmd redis.Cmder) {
				switch {
				case isCmd(cmd, "info") && cmd.Err() == nil:
					s := cmd.(*redis.StringCmd)
					s.SetVal(regexp.MustCompile(`redis_version:[^\r\n]*`).ReplaceAllString(s.Val(), "redis_version:6.0.16"))
				case isCmd(cmd, "config", "get", "lua-replicate-commands") && c.setting != "":
					cmd.(*redis.MapStringStringCmd).SetVal(map[string]string{"lua-replicate-commands": c.setting})
				}
			}))
			r := runCheck(t, rdb)
			f := one(t, r, "script", c.sev)
			if f.Text != c.want {
				t.Errorf("script: %q, want %q", f.Text, c.want)
			}
			if r.OK() != (c.sev != SeverityProblem) || len(r.Problems()) > 1 {
				t.Errorf("problems %v", r.Problems())
			}
			one(t, r, "acl", SeverityWarning, "ACL DRYRUN needs Redis 7 or later")
		})
	}
}

// Commands names the commands the ACL check asks about, in its order:
// EVALSHA and EVAL first (how go-redis runs a script), and WAIT, which only
// Options.Replicas adds, not among them. A copy: the caller may change it.
// That they are the commands the scripts call is the root's
// TestCheckVerifiesTheScriptsCommands, which reads the scripts' sources.
func TestCheckCommands(t *testing.T) {
	got := Commands()
	if len(got) != len(aclCommands) || got[0] != "EVALSHA" || got[1] != "EVAL" || slices.Contains(got, "WAIT") {
		t.Errorf("Commands() = %v", got)
	}
	for i, c := range aclCommands {
		if got[i] != c[0] {
			t.Errorf("Commands()[%d] = %s, want %s", i, got[i], c[0])
		}
	}
	got[0] = "changed"
	if Commands()[0] != "EVALSHA" {
		t.Error("Commands() shares its slice")
	}
}
