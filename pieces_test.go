//go:build measure

// What the pieces of a script cost Redis, counted by callgrind on a real
// redis-server: go test -tags measure -run TestScriptPieces -v .
// (a measurement run by hand, about a minute; docs/performance.md quotes
// it). Each variant is a small script run by EVALSHA from one client; the
// differences between variants are what a piece costs, and they are why
// clock.lua and decide.lua are written as they are.

package slidelog_test

import (
	"context"
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
	// Every variant reads TIME and a ZCARD and replies with one string.
	const clock = `local call, tonumber = redis.call, tonumber
local time = call('TIME')
local us = time[2]
if #us < 6 then
  us = string.rep('0', 6 - #us) .. us
end
local nows = time[1] .. us
`
	const count = "local count = call('ZCARD', KEYS[1])\n"
	variants := []struct{ piece, src string }{
		{"base: now a constant, the count a constant string",
			clock + "local now = 1764527041023456\n" + count + "return '0 ' .. nows .. ' 100'"},
		{"now from nows: tonumber(nows) (clock.lua)",
			clock + "local now = tonumber(nows)\n" + count + "return '0 ' .. nows .. ' 100'"},
		{"now from TIME's fields: two tonumber, a product and a sum",
			clock + "local now = tonumber(time[1]) * 1000000 + tonumber(time[2])\n" + count + "return '0 ' .. nows .. ' 100'"},
		{"the count printed by '..' (%.14g)",
			clock + "local now = 1764527041023456\n" + count + "return '0 ' .. nows .. ' ' .. count"},
		{"the count printed by string.format('%d') (decide.lua)",
			clock + "local now = 1764527041023456\n" + count + "return '0 ' .. nows .. ' ' .. string.format('%d', count)"},
		{"20 Lua operations (x = x + 1)",
			clock + "local now = 1764527041023456\n" + count + "local x = 0\n" +
				"x = x + 1 x = x + 1 x = x + 1 x = x + 1 x = x + 1 x = x + 1 x = x + 1 x = x + 1 x = x + 1 x = x + 1\n" +
				"x = x + 1 x = x + 1 x = x + 1 x = x + 1 x = x + 1 x = x + 1 x = x + 1 x = x + 1 x = x + 1 x = x + 1\n" +
				"return '0 ' .. nows .. ' 100'"},
		{"a local function over now (a closure made by every call)",
			clock + "local now = 1764527041023456\n" + count + "local function f(w) return now + w end\n" +
				"return '0 ' .. nows .. ' 100'"},
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
