package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

// runHealthcheck asks a service's health URL and exits 0 on 200, 1
// otherwise: a container's HEALTHCHECK in an image that has no curl.
func runHealthcheck(ctx context.Context, args []string, stdout, _ io.Writer) error {
	env := envDefaults{}
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), `usage: slidelog healthcheck [--url URL] [--timeout D]

Asks --url and exits 0 when it answers 200, 1 otherwise (a container's
HEALTHCHECK: the image has no curl). The default URL is rls' /healthcheck
on the HTTP port that envoyproxy/ratelimit's HOST and PORT name
(127.0.0.1:8080 when they are unset or a wildcard).

flags:`)
		fs.PrintDefaults()
	}
	url := fs.String("url", env.str("SLIDELOG_HEALTHCHECK_URL", defaultHealthURL(os.Getenv)), "the `URL` to ask [SLIDELOG_HEALTHCHECK_URL]")
	timeout := fs.Duration("timeout", env.duration("timeout", "SLIDELOG_HEALTHCHECK_TIMEOUT", 3*time.Second), "how long to wait for the answer [SLIDELOG_HEALTHCHECK_TIMEOUT]")
	if _, err := parse(fs, args, "", env, stdout); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return usagef("--url: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", *url, resp.Status, strings.TrimSpace(string(body)))
	}
	fmt.Fprintf(stdout, "%s: %s\n", *url, strings.TrimSpace(string(body)))
	return nil
}

// defaultHealthURL is /healthcheck on the HTTP port of rls run with
// envoyproxy/ratelimit's HOST and PORT.
func defaultHealthURL(getenv func(string) string) string {
	host, port := getenv("HOST"), getenv("PORT")
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	if port == "" {
		port = "8080"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthcheck"
}
