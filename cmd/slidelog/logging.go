package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"time"
)

// parseLogLevel reads a level as envoyproxy/ratelimit's LOG_LEVEL does
// (logrus' names, any case): trace and debug are debug, warning is warn,
// fatal and panic are error.
func parseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "trace", "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error", "fatal", "panic":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("want debug, info, warn or error")
}

// newLogger logs to w at level and above, as text or json. The JSON
// lines name the time and the message as envoyproxy/ratelimit's do
// (@timestamp, @message), for the log pipelines that read them.
func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	l, err := parseLogLevel(level)
	if err != nil {
		return nil, usagef("--log-level %q: %w", level, err)
	}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 {
				switch a.Key {
				case slog.TimeKey:
					a.Key = "@timestamp"
				case slog.MessageKey:
					a.Key = "@message"
				}
			}
			return a
		}})), nil
	}
	return nil, usagef("--log-format %q: want text or json", format)
}

// logAlways logs a line at level whatever the logger's least level: what
// rls was asked for and does not do is said even under LOG_LEVEL=error.
func logAlways(l *slog.Logger, level slog.Level, msg string, args ...any) {
	var pcs [1]uintptr
	runtime.Callers(2, pcs[:])
	r := slog.NewRecord(time.Now(), level, msg, pcs[0])
	r.Add(args...)
	_ = l.Handler().Handle(context.Background(), r)
}
