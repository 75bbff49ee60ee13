//go:build measure

// What the pieces of a script cost Redis, counted by callgrind on a real
// redis-server: go test -tags measure -run TestScriptPieces -v .
// (a measurement run by hand, about a minute; docs/performance.md quotes
// it). Each variant is a small script run by EVALSHA from one client; the
// differences between variants are what a piece costs, and they are why
// clock.lua and script.lua are written as they are.

package slidelog_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/slidelog/slidelog"
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
	if err := rdb.Set(ctx, "s", strings.Repeat("x", 289+7000), 0).Err(); err != nil {
		t.Fatal(err)
	}
	// "t": 100 events at times of today's size (16 digits of µs), whose
	// scores Redis prints in a WITHSCORES reply
	for i := range 100 {
		if err := rdb.ZAdd(ctx, "t", redis.Z{Score: float64(1764612345123456 + 1000*i), Member: fmt.Sprintf("%08d", i)}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Every variant is clock.lua (TIME, now and nows), a ZCARD and a reply
	// of one string, and adds one piece.
	clockLua, compactLua := slidelog.ScriptSources["clock.lua"], slidelog.ScriptSources["compact.lua"]
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
		// a full log's denial reads its oldest and newest events' times: a
		// score Redis prints (%.17g on 7.0) costs as much as the read
		{"+ ZRANGE 't' 0 0 WITHSCORES (the oldest event's time)",
			clockLua + count + "local o = call('ZRANGE', 't', '0', '0', 'WITHSCORES')[2]\n" + reply},
		{"+ ZRANGE 't' 0 0 (its member, no score)",
			clockLua + count + "local o = call('ZRANGE', 't', '0', '0')[1]\n" + reply},
		{"+ ZRANGE 't' -1 -1 WITHSCORES (the newest event's time)",
			clockLua + count + "local o = call('ZRANGE', 't', '-1', '-1', 'WITHSCORES')[2]\n" + reply},
		{"+ ZRANGE 't' 0 0 WITHSCORES in RESP3 (redis.setresp(3): the score comes as a Lua number)",
			clockLua + "redis.setresp(3)\n" + count + "local o = call('ZRANGE', 't', '0', '0', 'WITHSCORES')[1][2].double\n" + reply},
		// what no exact denial can go below, beside what the plain script's
		// denial costs: the plain script (cmd/slidelog's referenceScript,
		// bench's reference, on "t" for KEYS[1]: ZREMRANGEBYSCORE, ZCARD,
		// the client's clock and its four arguments) denying on "t"'s 100
		// events, which its cutoff keeps (checked after the variants)
		{"an exact denial's floor: clock.lua, a ZCARD, the oldest's and the newest's times, the reply",
			clockLua + count + "local o = call('ZRANGE', 't', '0', '0', 'WITHSCORES')[2]\n" +
				"local w = call('ZRANGE', 't', '-1', '-1', 'WITHSCORES')[2]\n" +
				"return '0 ' .. nows .. ' 100 ' .. o .. ' ' .. w"},
		{"the plain script's denial (no clock.lua, its own ZCARD on 't', 4 arguments)",
			"local now = tonumber(ARGV[1]); local windowSize = tonumber(ARGV[2]); local limit = tonumber(ARGV[3]); local member = ARGV[4]\n" +
				"local windowStart = now - windowSize\n" +
				"redis.call('ZREMRANGEBYSCORE', 't', '-inf', windowStart)\n" +
				"local count = tonumber(redis.call('ZCARD', 't'))\n" +
				"if count < limit then redis.call('ZADD', 't', now, member); redis.call('PEXPIRE', 't', windowSize + 1000); return 1 else return 0 end"},
		{"+ ZCOUNT 't' -inf cutoff",
			clockLua + count + "local o = call('ZCOUNT', 't', '-inf', '1764612345000000')\n" + reply},
		// the compact log's pieces (compact.lua), on a string "s" of 289 +
		// 7 000 bytes
		{"+ GETRANGE of a compact log's header (289 bytes)",
			clockLua + count + "local h = call('GETRANGE', 's', '0', '288')\n" + reply},
		{"+ GETRANGE of 7 bytes",
			clockLua + count + "local h = call('GETRANGE', 's', '1000', '1006')\n" + reply},
		{"+ SETRANGE of 7 bytes",
			clockLua + count + "call('SETRANGE', 's', '1000', 'abcdefg')\n" + reply},
		{"+ SETRANGE of 278 bytes",
			clockLua + count + "call('SETRANGE', 's', '11', string.rep('x', 278))\n" + reply},
		{"+ compactLib() (its closures and table)",
			compactLua + clockLua + count + "local lib = compactLib()\n" + reply},
		{"+ struct.unpack of a header's five integers and a byte",
			clockLua + count + "local h = 'slc1' .. struct.pack('>I7I7I7I7I7B', now, now, now, now, now, 3)\nlocal C, T, F, nw, od, cur = struct.unpack('>I7I7I7I7I7B', h, 5)\n" + reply},
		{"+ struct.pack of a header's five integers and a byte",
			clockLua + count + "local h = struct.pack('>I7I7I7I7I7B', now, now, now, now, now, 3)\n" + reply},
		{"+ a table of 8 fields",
			clockLua + count + "local lg = {key = 1, C = 2, T = 3, F = 4, newest = 5, oldest = 6, cur = 7, f = 8}\n" + reply},
		{"+ compactLib() and four enc",
			compactLua + clockLua + count + "local lib = compactLib()\nlocal e = lib.enc(now) .. lib.enc(now + 1) .. lib.enc(5) .. lib.enc(7)\n" + reply},
		{"+ compactLib() and open of a header",
			compactLua + clockLua + count + "local lib = compactLib()\nlocal lg = lib.open('s', 'slc1' .. string.rep('\\0', 285))\n" + reply},
	}
	// every variant is sent the plain script's four arguments, as a lone
	// decision sends four: a time (ms) whose cutoff is before "t"'s first
	// event, a window, a limit and a member
	plainArgs := []any{1764612345000 + 1000, 1000, 100, "0f8c6a2e-5b1d-4c3e-9a7f-2d4b6e8a0c1f"}
	const warm, calls = 200, 3000
	t.Logf("redis-server under callgrind, one client, %d calls per variant after %d of warm-up", calls, warm)
	var base int64
	for i, v := range variants {
		s := redis.NewScript(v.src)
		for range warm {
			if err := s.Run(ctx, rdb, []string{"z"}, plainArgs...).Err(); err != nil {
				t.Fatalf("%s: %v", v.piece, err)
			}
		}
		if err := cg.Zero(ctx); err != nil {
			t.Fatal(err)
		}
		for range calls {
			if err := s.Run(ctx, rdb, []string{"z"}, plainArgs...).Err(); err != nil {
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
	// the plain script denied every call: it removed and added nothing
	if n, err := rdb.ZCard(ctx, "t").Result(); err != nil || n != 100 {
		t.Fatalf(`"t" holds %d events (%v), not its 100: the plain script's variant did not only deny`, n, err)
	}
}
