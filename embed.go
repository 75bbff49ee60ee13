package slidelog

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

// scriptSrc is the decision script; see script.lua for its KEYS, ARGV and reply.
//
//go:embed script.lua
var scriptSrc string

// script runs with EVALSHA and falls back to EVAL on NOSCRIPT, so a restarted
// or flushed server costs one extra round trip, never an error.
var script = redis.NewScript(scriptSrc)

// allowAllSrc is the same decision over several limits (AllowAll).
//
//go:embed allowall.lua
var allowAllSrc string

var allowAllScript = redis.NewScript(allowAllSrc)

// resetSrc forgets every log of a key (Reset).
//
//go:embed reset.lua
var resetSrc string

var resetScript = redis.NewScript(resetSrc)
