// Command slidelog shows, serves and measures the slidelog rate limiter.
//
//	slidelog demo        several simulated instances share one limit (embedded Redis by default)
//	slidelog serve       an HTTP service guarded by slidelog's middleware
//	slidelog inspect     a key's events with their ages, its TTL, the next decision
//	slidelog check       whether a Redis keeps slidelog's events safely
//	slidelog bench       decisions/s, latency and cost, side by side with the alternatives
//	slidelog rls         a rate limit service for Envoy (envoyproxy/ratelimit's configuration)
//	slidelog healthcheck whether a service's health URL answers 200 (a container's HEALTHCHECK)
//	slidelog version     the module version and VCS revision it was built from
//
// Run "slidelog COMMAND --help" for a command's flags. Run as "ratelimit"
// (the image's /bin/ratelimit, the command Istio's and Envoy Gateway's
// deployments of envoyproxy/ratelimit give), it is "slidelog rls
// --ratelimit-env": the rate limit service, set by envoyproxy/ratelimit's
// environment variables.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = []command{
	{"demo", "several simulated service instances share one exact limit", runDemo},
	{"serve", "an HTTP service guarded by the middleware", runServe},
	{"inspect", "show a key's events, ages, TTL and the next decision", runInspect},
	{"check", "check that a Redis keeps slidelog's events safely", runCheck},
	{"bench", "measure decisions/s, latency and cost against the alternatives", runBench},
	{"rls", "a rate limit service for Envoy, on envoyproxy/ratelimit's configuration", runRLS},
	{"healthcheck", "exit 0 if a service's health URL answers 200 (a container's HEALTHCHECK)", runHealthcheck},
}

func main() {
	ctx, stop := signalContext()
	defer stop()
	os.Exit(run(ctx, argsFor(os.Args[0], os.Args[1:]), os.Stdout, os.Stderr))
}

// argsFor is the command line to run for a binary invoked as argv0 with
// args: as "ratelimit" (envoyproxy/ratelimit's /bin/ratelimit), rls with
// envoyproxy/ratelimit's environment variables, unless args name a
// command ("/bin/ratelimit healthcheck").
func argsFor(argv0 string, args []string) []string {
	if filepath.Base(argv0) != "ratelimit" {
		return args
	}
	if len(args) > 0 {
		switch args[0] {
		case "help", "version":
			return args
		}
		for _, c := range commands {
			if c.name == args[0] {
				return args
			}
		}
	}
	return append([]string{"rls", "--ratelimit-env"}, args...)
}

// signalError is the cause of the context signalContext ends: the signal.
type signalError struct{ sig os.Signal }

func (e signalError) Error() string { return "signal " + e.sig.String() }

// signalContext is a context that ends on the first SIGINT or SIGTERM,
// with signalError as its cause (context.Cause). A second signal is left
// to its default action: it ends the process at once.
func signalContext() (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			signal.Reset(os.Interrupt, syscall.SIGTERM)
			cancel(signalError{s})
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel(context.Canceled)
	}
}

// quietRedis keeps go-redis from logging: its pool prints a line for every
// failed dial, and the command reports the error itself, once.
var quietRedis sync.Once

type discardLogger struct{}

func (discardLogger) Printf(context.Context, string, ...any) {}

// run runs the command args name and returns the exit code: 0, 1 when the
// command failed, 2 when it was called wrongly.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	quietRedis.Do(func() { redis.SetLogger(discardLogger{}) })
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		usage(stdout)
		return 0
	case "version", "--version", "-version":
		if len(args) == 2 && (args[1] == "-h" || args[1] == "--help" || args[1] == "-help") {
			fmt.Fprintln(stdout, "usage: slidelog version\n\nPrints the module version and the VCS revision it was built from.")
			return 0
		}
		if len(args) > 1 {
			fmt.Fprintf(stderr, "slidelog %s: unexpected arguments: %q\n", args[0], args[1:])
			return 2
		}
		fmt.Fprintln(stdout, buildVersion())
		return 0
	}
	for _, c := range commands {
		if c.name == args[0] {
			err := recovered(func() error { return c.run(ctx, args[1:], stdout, stderr) })
			var u usageError
			var reported exitError
			switch {
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.As(err, &reported):
				return reported.code
			case errors.As(err, &u):
				fmt.Fprintf(stderr, "slidelog %s: %v; see slidelog %s --help\n", c.name, u.err, c.name)
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
	width := len("version")
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s %s\n", width, c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-*s %s\n", width, "version", "print the version and the VCS revision it was built from (also --version)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "slidelog COMMAND --help" for a command's flags.`)
}

// usageError: the command was called wrongly (a flag or a variable that
// does not parse, a missing argument). Exit code 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// recovered runs f and returns its error, or its panic as an error: a
// reply that makes go-redis panic (a bulk length of 2^63-1 from a broken
// proxy) is a failure of the command, exit 1, never a crash. The
// goroutines the commands start themselves run under it too.
func recovered(f func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v (a reply no Redis sends, or a bug)", p)
		}
	}()
	return f()
}

// exitError: the command failed and has said why itself (serve, in its
// log); run exits with code and prints nothing more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// usagef is a usageError.
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// parse parses a command's flags and returns its positional arguments:
// the one named arg, or none when arg is "". Flags and arguments may come
// in any order ("inspect KEY --redis URL"); "--" ends the flags, and what
// follows it is arguments (a KEY that begins with "-").
// --help prints the usage to stdout (flag.ErrHelp); a flag that does not
// parse is a usageError of one line; so is a variable of env, the command's
// flag defaults, that does not parse, unless its flag was given.
func parse(fs *flag.FlagSet, args []string, arg string, env envDefaults, stdout io.Writer) ([]string, error) {
	fs.SetOutput(io.Discard) // the error is reported once, by run
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(stdout)
				fs.Usage()
				return nil, err
			}
			return nil, usageError{err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		// flag stops at the first argument, or after a "--" it consumed.
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	switch {
	case arg == "" && len(positional) > 0:
		return nil, usagef("unexpected arguments: %q", positional)
	case arg != "" && len(positional) == 0:
		return nil, usagef("%s is missing", arg)
	case arg != "" && len(positional) > 1:
		return nil, usagef("want one %s, got %q", arg, positional)
	}
	return positional, env.check(fs)
}

// redisFlag registers --redis, defaulting to $REDIS_URL.
func redisFlag(fs *flag.FlagSet) *string {
	return fs.String("redis", os.Getenv("REDIS_URL"),
		"Redis `URL` (redis://host:6379/0, rediss://…) or host:port; default $REDIS_URL, and when empty an embedded Redis is started")
}

// parseRedis reads --redis: a URL, or host:port.
func parseRedis(url string) (*redis.Options, error) {
	if !strings.Contains(url, "://") {
		if _, _, err := net.SplitHostPort(url); err != nil {
			return nil, usagef("--redis %q: want a URL (redis://host:6379/0) or host:port", url)
		}
		return &redis.Options{Addr: url, ContextTimeoutEnabled: true}, nil
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, usagef("--redis: %w", err)
	}
	opts.ContextTimeoutEnabled = true
	return opts, nil
}

// redisOptions returns client options for url, or starts an embedded Redis
// (miniredis, its TIME on the real clock) when url is empty. Its keys do not
// expire (miniredis counts a TTL down only when told the time moved, for
// every key alike, which would expire keys set since early and forget live
// events): an admission still drops its log's expired events, and the data
// lives as long as the process. stop ends what it started.
func redisOptions(url string) (opts *redis.Options, embedded bool, stop func(), err error) {
	if url != "" {
		opts, err = parseRedis(url)
		if err != nil {
			return nil, false, nil, err
		}
		return opts, false, func() {}, nil
	}
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		return nil, false, nil, fmt.Errorf("embedded redis: %w", err)
	}
	return &redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: true}, true, mr.Close, nil
}
