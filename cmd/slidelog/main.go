// Command slidelog shows, serves and measures the slidelog rate limiter.
//
//	slidelog demo    several simulated instances share one limit (embedded Redis by default)
//	slidelog serve   an HTTP service guarded by slidelog's middleware
//	slidelog inspect a key's events with their ages, its TTL, the next decision
//	slidelog bench   decisions/s, latency and cost, side by side with the alternatives
//
// Run "slidelog COMMAND --help" for a command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout io.Writer) error
}

var commands = []command{
	{"demo", "several simulated service instances share one exact limit", runDemo},
	{"serve", "an HTTP service guarded by the middleware", runServe},
	{"inspect", "show a key's events, ages, TTL and the next decision", runInspect},
	{"bench", "measure decisions/s, latency and cost against the alternatives", runBench},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			err := c.run(ctx, args[1:], stdout)
			switch {
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				return 2
			case err != nil:
				fmt.Fprintf(stderr, "slidelog %s: %v\n", c.name, err)
				return 1
			}
			return 0
		}
	}
	fmt.Fprintf(stderr, "slidelog: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: slidelog COMMAND [flags]")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "slidelog COMMAND --help" for a command's flags.`)
}

// errUsage reports bad flags; the flag package has printed why.
var errUsage = errors.New("usage")

// parse parses a command's flags, printing errors and --help to stderr.
func parse(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(os.Stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "unexpected arguments: %v\n", fs.Args())
		fs.Usage()
		return errUsage
	}
	return nil
}

// redisFlag registers --redis, defaulting to $REDIS_URL.
func redisFlag(fs *flag.FlagSet) *string {
	return fs.String("redis", os.Getenv("REDIS_URL"),
		"Redis URL, e.g. redis://localhost:6379/0 (default $REDIS_URL; empty: start an embedded Redis)")
}

// redisOptions returns client options for url, or starts an embedded Redis
// (miniredis, on the real clock) when url is empty. stop ends what it started.
func redisOptions(url string) (opts *redis.Options, embedded bool, stop func(), err error) {
	if url != "" {
		opts, err = redis.ParseURL(url)
		if err != nil {
			return nil, false, nil, fmt.Errorf("--redis: %w", err)
		}
		opts.ContextTimeoutEnabled = true
		return opts, false, func() {}, nil
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return nil, false, nil, fmt.Errorf("embedded redis: %w", err)
	}
	return &redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true}, true, mr.Close, nil
}
