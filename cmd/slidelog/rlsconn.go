package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// serverCert is a certificate and key read from files, read again when
// either file changes (a Kubernetes secret or cert-manager renewing it): a
// TLS handshake looks at the files' sizes and modification times, and a
// pair that does not load leaves the last good one in use, logged.
type serverCert struct {
	certFile, keyFile string
	log               *slog.Logger

	mu     sync.Mutex
	stamp  string
	cert   *tls.Certificate
	failed string // the stamp whose load failed, logged once
}

// newServerCert loads the pair, or fails: the service does not start
// without its certificate.
func newServerCert(certFile, keyFile string, log *slog.Logger) (*serverCert, error) {
	c := &serverCert{certFile: certFile, keyFile: keyFile, log: log}
	if _, err := c.get(nil); err != nil {
		return nil, err
	}
	return c, nil
}

func fileStamp(names ...string) string {
	var b strings.Builder
	for _, n := range names {
		if fi, err := os.Stat(n); err == nil {
			fmt.Fprintf(&b, "%d:%d;", fi.Size(), fi.ModTime().UnixNano())
		} else {
			b.WriteString("-;")
		}
	}
	return b.String()
}

func (c *serverCert) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	stamp := fileStamp(c.certFile, c.keyFile)
	c.mu.Lock()
	defer c.mu.Unlock()
	if stamp == c.stamp || stamp == c.failed {
		return c.cert, nil
	}
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		if c.cert == nil {
			return nil, fmt.Errorf("TLS certificate %s, key %s: %w", c.certFile, c.keyFile, err)
		}
		c.failed = stamp
		c.log.Error("TLS certificate not reloaded: the last good one stays in use", "cert", c.certFile, "key", c.keyFile, "err", err)
		return c.cert, nil
	}
	if c.cert != nil {
		c.log.Info("TLS certificate reloaded", "cert", c.certFile)
	}
	c.cert, c.stamp, c.failed = &pair, stamp, ""
	return c.cert, nil
}

// grpcServerTLS is the gRPC server's TLS: its certificate (reloaded when
// its files change), and with clientCA mutual TLS: a client must present a
// certificate of that CA, carrying clientSAN among its names when that is
// not empty (envoyproxy/ratelimit's GRPC_CLIENT_TLS_CACERT and _SAN).
func grpcServerTLS(certFile, keyFile, clientCA, clientSAN string, log *slog.Logger) (*tls.Config, error) {
	cert, err := newServerCert(certFile, keyFile, log)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cert.get}
	if clientCA == "" {
		return cfg, nil
	}
	pool, err := readPool(x509.NewCertPool(), clientCA)
	if err != nil {
		return nil, err
	}
	cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	if clientSAN != "" {
		cfg.VerifyPeerCertificate = func(_ [][]byte, chains [][]*x509.Certificate) error {
			for _, chain := range chains {
				if len(chain) > 0 && chain[0].VerifyHostname(clientSAN) == nil {
					return nil
				}
			}
			return fmt.Errorf("the client's certificate does not name %q", clientSAN)
		}
	}
	return cfg, nil
}

// readPool adds the PEM certificates of file to pool.
func readPool(pool *x509.CertPool, file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate in it", file)
	}
	return pool, nil
}

// redisTLS is the TLS of the connections to Redis that REDIS_TLS* ask
// for: the system's roots and REDIS_TLS_CACERT's, a client certificate,
// and with REDIS_TLS_SKIP_HOSTNAME_VERIFICATION the chain checked but not
// the server's name.
func redisTLS(r ratelimitRedis) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if r.cert != "" {
		pair, err := tls.LoadX509KeyPair(r.cert, r.key)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	if r.ca != "" {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if cfg.RootCAs, err = readPool(pool, r.ca); err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CACERT: %w", err)
		}
	}
	if r.skipVerify {
		cfg.InsecureSkipVerify = true // the chain is verified below, the name is not
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("redis sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: cfg.RootCAs, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	}
	return cfg, nil
}

// splitAuth reads REDIS_AUTH's forms: password, or user:password.
func splitAuth(auth string) (user, password string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

// ratelimitRedisClient is the client of the Redis that REDIS_* name: SINGLE
// (REDIS_URL a host:port, a socket's path with REDIS_SOCKET_TYPE=unix, or
// a redis:// or rediss:// URL), SENTINEL (NAME,HOST:PORT,...) or CLUSTER
// (HOST:PORT,...). shown is the address to log, without credentials.
func ratelimitRedisClient(r ratelimitRedis) (rdb redis.UniversalClient, shown string, err error) {
	var tlsConfig *tls.Config
	if r.tls {
		if tlsConfig, err = redisTLS(r); err != nil {
			return nil, "", usageError{err}
		}
	}
	user, password := splitAuth(r.auth)
	parts := strings.Split(r.url, ",")
	switch r.typ {
	case "sentinel":
		o := &redis.FailoverOptions{MasterName: parts[0], SentinelAddrs: parts[1:], Username: user, Password: password, TLSConfig: tlsConfig}
		o.SentinelUsername, o.SentinelPassword = splitAuth(r.sentinelAuth)
		o.ContextTimeoutEnabled, o.MaxRetries, o.PoolSize = true, 1, r.poolSize
		if r.timeoutSet {
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = r.timeout, r.timeout, r.timeout
		}
		return redis.NewFailoverClient(o), "sentinel " + r.url, nil
	case "cluster":
		o := &redis.ClusterOptions{Addrs: parts, Username: user, Password: password, TLSConfig: tlsConfig}
		o.ContextTimeoutEnabled, o.MaxRetries, o.PoolSize = true, 1, r.poolSize
		if r.timeoutSet {
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout = r.timeout, r.timeout, r.timeout
		}
		return redis.NewClusterClient(o), "cluster " + r.url, nil
	}
	var o *redis.Options
	if strings.Contains(r.url, "://") {
		if o, err = redis.ParseURL(r.url); err != nil {
			return nil, "", usagef("REDIS_URL: %w", err)
		}
		if o.TLSConfig != nil && tlsConfig != nil {
			tlsConfig.ServerName = o.TLSConfig.ServerName
		}
		if tlsConfig == nil {
			tlsConfig = o.TLSConfig // rediss://
		}
	} else {
		o = &redis.Options{Network: r.socketType, Addr: r.url}
	}
	o.TLSConfig = tlsConfig
	if r.auth != "" {
		o.Username, o.Password = user, password
	}
	o.ContextTimeoutEnabled, o.MaxRetries = true, 1
	if r.poolSize > 0 {
		o.PoolSize = r.poolSize
	}
	if r.timeoutSet {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = r.timeout, r.timeout, r.timeout
	}
	return redis.NewClient(o), o.Network + " " + o.Addr, nil
}

// xdsClientTLS is the TLS of the connection to the xDS server that
// CONFIG_GRPC_XDS_* ask for, as envoyproxy/ratelimit makes it: the
// system's roots and CONFIG_GRPC_XDS_SERVER_TLS_CACERT's, a client
// certificate (CONFIG_GRPC_XDS_CLIENT_TLS_CERT and _KEY), the server's
// name to verify (CONFIG_GRPC_XDS_SERVER_TLS_SAN; else the URL's host).
// nil without CONFIG_GRPC_XDS_SERVER_USE_TLS.
func xdsClientTLS(x *ratelimitXDS) (*tls.Config, error) {
	if !x.tls {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: x.san}
	if x.ca != "" {
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if cfg.RootCAs, err = readPool(roots, x.ca); err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_SERVER_TLS_CACERT: %w", err)
		}
	}
	if x.cert != "" {
		pair, err := tls.LoadX509KeyPair(x.cert, x.key)
		if err != nil {
			return nil, fmt.Errorf("CONFIG_GRPC_XDS_CLIENT_TLS_CERT, _KEY: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}
