package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// envDefaults are the errors of environment variables that give flags
// their defaults, by flag name. A variable that does not parse is an error
// naming it (never a silent default), unless its flag was given.
type envDefaults map[string]error

// str is $env, or def when it is unset or empty.
func (e envDefaults) str(env, def string) string {
	if v := os.Getenv(env); v != "" {
		return v
	}
	return def
}

// int is $env as a whole number, or def when it is unset or empty.
func (e envDefaults) int(flagName, env string, def int) int {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		e[flagName] = fmt.Errorf("%s=%q is not a whole number (it sets --%s)", env, v, flagName)
		return def
	}
	return n
}

// duration is $env as a Go duration, or def when it is unset or empty.
func (e envDefaults) duration(flagName, env string, def time.Duration) time.Duration {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		e[flagName] = fmt.Errorf("%s=%q is not a duration such as 90s, 5m or 1h30m (it sets --%s)", env, v, flagName)
		return def
	}
	return d
}

// float is $env as a number, or def when it is unset or empty.
func (e envDefaults) float(flagName, env string, def float64) float64 {
	v := os.Getenv(env)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		e[flagName] = fmt.Errorf("%s=%q is not a number (it sets --%s)", env, v, flagName)
		return def
	}
	return f
}

// bool is $env as true or false (also 1, 0, t, f), or false when it is
// unset or empty.
func (e envDefaults) bool(flagName, env string) bool {
	v := os.Getenv(env)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		e[flagName] = fmt.Errorf("%s=%q is not true or false (it sets --%s)", env, v, flagName)
		return false
	}
	return b
}

// list is a flag of comma-separated items, each accepted by check, that may
// be given many times: every --flag adds its items. Its default comes from
// a variable, and the first --flag given drops it (an empty --flag "" drops
// it and adds nothing).
type list struct {
	items []string
	check func(string) error
	given bool
}

func (l *list) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.items, ",")
}

func (l *list) Set(v string) error {
	items, err := splitList(v, l.check)
	if err != nil {
		return err
	}
	if !l.given {
		l.items, l.given = nil, true
	}
	l.items = append(l.items, items...)
	return nil
}

// splitList is v's comma-separated items, blanks trimmed and empty ones
// left out, or the error of the first that check refuses.
func splitList(v string, check func(string) error) ([]string, error) {
	var items []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if err := check(s); err != nil {
			return nil, err
		}
		items = append(items, s)
	}
	return items, nil
}

// list is the flag of flagName with $env's items as its default (none when
// $env is unset or empty).
func (e envDefaults) list(flagName, env string, check func(string) error) *list {
	l := &list{check: check}
	v := os.Getenv(env)
	if v == "" {
		return l
	}
	items, err := splitList(v, check)
	if err != nil {
		e[flagName] = fmt.Errorf("%s=%q: %w (it sets --%s)", env, v, err, flagName)
		return l
	}
	l.items = items
	return l
}

// check returns the error of the first variable whose flag was not given.
func (e envDefaults) check(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	names := make([]string, 0, len(e))
	for name := range e {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !given[name] {
			return usageError{e[name]}
		}
	}
	return nil
}
