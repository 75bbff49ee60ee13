package envoyrls

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
)

// Reloader keeps a Server's configuration that of a path (a file, or a
// directory of *.yaml files): it looks at the files' names, sizes and
// modification times every interval, and when they changed reads them
// again. A configuration that does not load leaves the one in force, and
// its error is kept (Status) and logged.
type Reloader struct {
	path   string
	server *Server
	log    *slog.Logger

	mu       sync.Mutex
	seen     string // the fingerprint last read (good or not)
	loadedAt time.Time
	err      error // of the last load, if it was refused
	errAt    time.Time
}

// NewReloader loads path into s, or fails: a service does not start
// without a configuration.
func NewReloader(path string, s *Server, log *slog.Logger) (*Reloader, error) {
	if log == nil {
		log = slog.Default()
	}
	r := &Reloader{path: path, server: s, log: log}
	fp, _ := fingerprint(path)
	cfg, err := LoadConfig(path)
	if err != nil {
		s.metrics.ConfigLoaded(false)
		return nil, err
	}
	s.SetConfig(cfg)
	s.metrics.ConfigLoaded(true)
	r.seen, r.loadedAt = fp, time.Now()
	return r, nil
}

// Run checks the path every interval until ctx ends.
func (r *Reloader) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = r.Check() // logged, and kept for Status
		}
	}
}

// Check reloads the configuration if its files changed since the last
// look; it reports whether it loaded one, and the error of a refused one.
func (r *Reloader) Check() (loaded bool, err error) {
	fp, ferr := fingerprint(r.path)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ferr == nil && fp == r.seen {
		return false, nil
	}
	r.seen = fp
	cfg, err := LoadConfig(r.path)
	if err != nil {
		r.err, r.errAt = err, time.Now()
		r.server.metrics.ConfigLoaded(false)
		r.log.Error("configuration refused: the last good one stays in force", "path", r.path, "err", err)
		return false, err
	}
	r.server.SetConfig(cfg)
	r.server.metrics.ConfigLoaded(true)
	r.loadedAt, r.err = time.Now(), nil
	r.log.Info("configuration loaded", "path", r.path, "domains", strings.Join(cfg.Domains(), ","))
	return true, nil
}

// Status is when the configuration in force was loaded, and the error of
// the last reload if it was refused (since then).
func (r *Reloader) Status() (loadedAt, errAt time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loadedAt, r.errAt, r.err
}

// fingerprint names the path's configuration files with their sizes and
// modification times.
func fingerprint(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	names := []string{path}
	if fi.IsDir() {
		if names, err = configNames(path); err != nil {
			return "", err
		}
	}
	var b strings.Builder
	for _, n := range names {
		fi, err := os.Stat(n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s\x00%d\x00%d\n", n, fi.Size(), fi.ModTime().UnixNano())
	}
	return b.String(), nil
}
