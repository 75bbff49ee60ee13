package main

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
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
