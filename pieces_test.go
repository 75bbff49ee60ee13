//go:build measure

// What the pieces of a script cost Redis, counted by callgrind on a real
// redis-server: go test -tags measure -run TestScriptPieces -v .
// (a measurement run by hand, about a minute; docs/performance.md quotes
// it). Each variant is a small script run by EVALSHA from one client; the
// differences between variants are what a piece costs, and they are why
// clock.lua and script.lua are written as they are.

package slidelog

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog/internal/redisserver"
)

func TestScriptPieces(t *testing.T) {
	cg, err := redisserver.StartCallgrind()
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Stop()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: cg.Addr})
	defer func() { _ = rdb.Close() }()
	for i := range 100 {
		if err := rdb.ZAdd(ctx, "z", redis.Z{Score: float64(i), Member: i}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Every variant is clock.lua (TIME, now and nows), a ZCARD and a reply
	// of one string, and adds one piece.
	const count = "local count = call('ZCARD', KEYS[1])\n"
	const reply = "return '0 ' .. nows .. ' 100'"
	variants := []struct{ piece, src string }{
		{"base: clock.lua, a ZCARD, a constant count", clockLua + count + reply},
		{"+ now again from nows: tonumber(nows) (clock.lua's way)",
			clockLua + count + "local again = tonumber(nows)\n" + reply},
		{"+ now again from TIME's fields: two tonumber, a product and a sum (the earlier scripts' way)",
			clockLua + count + "local again = tonumber(time[1]) * 1000000 + tonumber(time[2])\n" + reply},
		{"the count printed by '..' (%.14g, the earlier scripts' way)",
			clockLua + count + "return '0 ' .. nows .. ' ' .. count"},
		{"the count printed by string.format('%d') (script.lua's way)",
			clockLua + count + "return '0 ' .. nows .. ' ' .. string.format('%d', count)"},
		{"+ 20 Lua operations (x = x + 1) and a local",
			clockLua + count + "local x = 0\n" +
				strings.Repeat("x = x + 1\n", 20) + reply},
		{"+ a local function over now (a closure made by every call)",
			clockLua + count + "local function f(w) return now + w end\n" + reply},
	}
	const warm, calls = 200, 3000
	t.Logf("redis-server under callgrind, one client, %d calls per variant after %d of warm-up", calls, warm)
	var base int64
	for i, v := range variants {
		s := redis.NewScript(v.src)
		for range warm {
			if err := s.Run(ctx, rdb, []string{"z"}).Err(); err != nil {
				t.Fatalf("%s: %v", v.piece, err)
			}
		}
		if err := cg.Zero(ctx); err != nil {
			t.Fatal(err)
		}
		for range calls {
			if err := s.Run(ctx, rdb, []string{"z"}).Err(); err != nil {
				t.Fatalf("%s: %v", v.piece, err)
			}
		}
		total, err := cg.Count(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if total <= 0 {
			t.Fatalf("%s: no instructions counted", v.piece)
		}
		per := total / calls
		if i == 0 {
			base = per
		}
		t.Logf("| %s | %d | %+d |", v.piece, per, per-base)
	}
}
