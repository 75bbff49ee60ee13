package envoyrls

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v2"

	"github.com/slidelog/slidelog"
)

// The configuration is envoyproxy/ratelimit's YAML (its src/config), read
// with the same YAML library (gopkg.in/yaml.v2) and the same checks: a file
// it refuses is refused here, with its message. Two extensions, which it
// would refuse as unknown keys:
//
//   - window: a duration (90s, 36h) in place of unit: a rolling window of
//     any length;
//   - rate_limits: a list of rate_limit, all decided at once (AllowAll) on
//     the descriptor's one key: admitted only if every one of them admits.
//
//   - calendar: {time_zone: Europe/Berlin, anchor_day: 15} on a day or
//     month unit: a calendar quota (slidelog.Daily, slidelog.Monthly)
//     instead of a rolling window: a day from its midnight in time_zone
//     (default UTC), a billing month from anchor_day (1-31, default 1,
//     clamped to a shorter month's last day); duration_until_reset ends at
//     the period's end.
//
//   - usage_mode: true on a descriptor: its hits are usage reported after
//     the fact (an Envoy rate limit action with apply_on_stream_done, its
//     hits_addend the response's token count), recorded whatever the
//     limit holds (slidelog's Charge) and never denied; a hits_addend of
//     0 (the request's check) still looks without recording.

// Units are rolling windows of envoyproxy/ratelimit's lengths.
var unitWindow = map[rlsv3.RateLimitResponse_RateLimit_Unit]time.Duration{
	rlsv3.RateLimitResponse_RateLimit_SECOND: time.Second,
	rlsv3.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	rlsv3.RateLimitResponse_RateLimit_HOUR:   time.Hour,
	rlsv3.RateLimitResponse_RateLimit_DAY:    24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_WEEK:   7 * 24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_MONTH:  30 * 24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_YEAR:   365 * 24 * time.Hour,
}

// validKeys are envoyproxy/ratelimit's, and the two extensions.
var validKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
	"quota_mode": true, "name": true, "replaces": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true, "metadata": true,
	// extensions
	"window": true, "rate_limits": true, "calendar": true, "time_zone": true, "anchor_day": true,
	"usage_mode": true,
}

type yamlCalendar struct {
	TimeZone  string `yaml:"time_zone"`
	AnchorDay int    `yaml:"anchor_day"`
}

type yamlReplaces struct {
	Name string
}

type yamlRateLimit struct {
	RequestsPerUnit uint32 `yaml:"requests_per_unit"`
	Unit            string
	Window          string
	Unlimited       bool `yaml:"unlimited"`
	Name            string
	Replaces        []yamlReplaces
	Calendar        *yamlCalendar
}

type yamlDescriptor struct {
	Key            string
	Value          string
	RateLimit      *yamlRateLimit  `yaml:"rate_limit"`
	RateLimits     []yamlRateLimit `yaml:"rate_limits"`
	Descriptors    []yamlDescriptor
	ShadowMode     bool `yaml:"shadow_mode"`
	QuotaMode      bool `yaml:"quota_mode"`
	UsageMode      bool `yaml:"usage_mode"`
	DetailedMetric bool `yaml:"detailed_metric"`
	ValueToMetric  bool `yaml:"value_to_metric"`
	ShareThreshold bool `yaml:"share_threshold"`
	Metadata       map[string]interface{}
}

type yamlRoot struct {
	Domain      string
	Descriptors []yamlDescriptor
}

// A Rule is the limit of one descriptor of the configuration.
type Rule struct {
	FullKey   string           // domain.key_value.key2: the rule's place, its metrics' name
	Limits    []slidelog.Limit // one, or several (rate_limits); none when Unlimited
	Units     []rlsv3.RateLimitResponse_RateLimit_Unit
	Names     []string // each limit's name (rate_limit.name)
	Unlimited bool
	Shadow    bool // shadow_mode
	Quota     bool // quota_mode
	Usage     bool // usage_mode: a hit is usage reported after the fact, recorded (Charge), never denied
	Detailed  bool // detailed_metric
	Replaces  []string
}

// a wildcard is a descriptor key whose value holds '*'.
type wildcard struct {
	key   string   // the descriptor's key_value, "path_/api/*"
	parts []string // split on '*'
}

type node struct {
	children      map[string]*node // by key_value, or key when the value is empty
	wildcards     []wildcard       // in the file's order
	rule          *Rule
	valueToMetric bool
	share         bool   // share_threshold
	pattern       string // share_threshold: the key_value pattern
}

// Config is a loaded configuration: its domains, and the files it came from.
type Config struct {
	domains map[string]*node
	files   []string
	dump    []string // one line per rule, for /rlconfig
}

// Domains lists the configuration's domains, sorted.
func (c *Config) Domains() []string {
	var ds []string
	for d := range c.domains {
		ds = append(ds, d)
	}
	sort.Strings(ds)
	return ds
}

// Files lists the files the configuration was read from.
func (c *Config) Files() []string { return append([]string(nil), c.files...) }

// String is the configuration in force, a line per rule, as
// envoyproxy/ratelimit's /rlconfig prints it.
func (c *Config) String() string {
	return strings.Join(c.dump, "")
}

// ConfigError is a configuration that cannot be loaded: the file, and why.
type ConfigError struct {
	File string
	Err  string
}

func (e *ConfigError) Error() string { return e.File + ": " + e.Err }

// ParseConfig reads configuration files given as name and content (a
// domain each), in order. A domain may appear in one file only.
func ParseConfig(files ...File) (*Config, error) {
	c := &Config{domains: map[string]*node{}}
	for _, f := range files {
		root, err := parseYAML(f.Name, f.Data)
		if err != nil {
			return nil, err
		}
		if err := c.add(f.Name, root); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// add loads root, the domain of the file (or xDS resource) name.
func (c *Config) add(name string, root *yamlRoot) error {
	if root.Domain == "" {
		return &ConfigError{name, "config file cannot have empty domain"}
	}
	if _, ok := c.domains[root.Domain]; ok {
		return &ConfigError{name, fmt.Sprintf("duplicate domain '%s' in config file", root.Domain)}
	}
	d := &node{children: map[string]*node{}}
	if err := d.load(c, name, root.Domain+".", root.Descriptors); err != nil {
		return err
	}
	c.domains[root.Domain] = d
	c.files = append(c.files, name)
	return nil
}

// File is a configuration file's name and content.
type File struct {
	Name string
	Data []byte
}

// ReadFiles reads path: a YAML file, or a directory whose *.yaml and *.yml
// files (not those whose name starts with '.') are each a domain, in name
// order.
func ReadFiles(path string) ([]File, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	names := []string{path}
	if fi.IsDir() {
		names, err = configNames(path)
		if err != nil {
			return nil, err
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("%s: no *.yaml file", path)
		}
	}
	files := make([]File, 0, len(names))
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			return nil, err
		}
		files = append(files, File{n, b})
	}
	return files, nil
}

// configNames lists dir's configuration files, sorted.
func configNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") || !strings.HasSuffix(n, ".yaml") && !strings.HasSuffix(n, ".yml") {
			continue
		}
		p := filepath.Join(dir, n)
		if fi, err := os.Stat(p); err != nil || fi.IsDir() { // follows symlinks (a Kubernetes ConfigMap's)
			continue
		}
		names = append(names, p)
	}
	sort.Strings(names)
	return names, nil
}

// LoadConfig reads and parses path (ReadFiles, ParseConfig).
func LoadConfig(path string) (*Config, error) {
	files, err := ReadFiles(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig(files...)
}

func parseYAML(name string, data []byte) (*yamlRoot, error) {
	var any map[interface{}]interface{}
	if err := yaml.Unmarshal(data, &any); err != nil {
		return nil, &ConfigError{name, "error loading config file: " + err.Error()}
	}
	if err := validateKeys(name, any); err != nil {
		return nil, err
	}
	var root yamlRoot
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, &ConfigError{name, "error loading config file: " + err.Error()}
	}
	return &root, nil
}

// validateKeys is envoyproxy/ratelimit's validateYamlKeys.
func validateKeys(name string, m map[interface{}]interface{}) error {
	for k, v := range m {
		ks, ok := k.(string)
		if !ok {
			return &ConfigError{name, fmt.Sprintf("config error, key is not of type string: %v", k)}
		}
		if !validKeys[ks] {
			return &ConfigError{name, fmt.Sprintf("config error, unknown key '%s'", ks)}
		}
		if ks == "metadata" {
			continue
		}
		switch v := v.(type) {
		case []interface{}:
			for _, e := range v {
				em, ok := e.(map[interface{}]interface{})
				if !ok {
					return &ConfigError{name, fmt.Sprintf("config error, yaml file contains list of type other than map: %v", e)}
				}
				if err := validateKeys(name, em); err != nil {
					return err
				}
			}
		case map[interface{}]interface{}:
			if err := validateKeys(name, v); err != nil {
				return err
			}
		case string, int, bool, nil:
		default:
			return &ConfigError{name, "error checking config"}
		}
	}
	return nil
}

// load is envoyproxy/ratelimit's loadDescriptors.
func (n *node) load(c *Config, file, parentKey string, descriptors []yamlDescriptor) error {
	for _, dc := range descriptors {
		if dc.Key == "" {
			return &ConfigError{file, "descriptor has empty key"}
		}
		finalKey := dc.Key
		if dc.Value != "" {
			finalKey += "_" + dc.Value
		}
		fullKey := parentKey + finalKey
		if _, ok := n.children[finalKey]; ok {
			return &ConfigError{file, fmt.Sprintf("duplicate descriptor composite key '%s'", fullKey)}
		}
		rule, err := loadRule(file, fullKey, dc)
		if err != nil {
			return err
		}
		if dc.ShareThreshold && !strings.Contains(finalKey, "*") {
			return &ConfigError{file, fmt.Sprintf("share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", finalKey)}
		}
		child := &node{children: map[string]*node{}, rule: rule, valueToMetric: dc.ValueToMetric, share: dc.ShareThreshold}
		if dc.ShareThreshold {
			child.pattern = finalKey
		}
		if strings.Contains(finalKey, "*") {
			n.wildcards = append(n.wildcards, wildcard{finalKey, strings.Split(finalKey, "*")})
		}
		if rule != nil {
			c.dump = append(c.dump, dumpRule(rule))
		}
		if err := child.load(c, file, fullKey+".", dc.Descriptors); err != nil {
			return err
		}
		n.children[finalKey] = child
	}
	return nil
}

// loadRule is the rule of dc, or nil when it has no rate_limit.
func loadRule(file, fullKey string, dc yamlDescriptor) (*Rule, error) {
	if dc.RateLimit == nil && len(dc.RateLimits) == 0 {
		return nil, nil
	}
	if dc.RateLimit != nil && len(dc.RateLimits) > 0 {
		return nil, &ConfigError{file, fmt.Sprintf("descriptor '%s' has both rate_limit and rate_limits: use one", fullKey)}
	}
	r := &Rule{FullKey: fullKey, Shadow: dc.ShadowMode, Quota: dc.QuotaMode, Usage: dc.UsageMode, Detailed: dc.DetailedMetric}
	list := dc.RateLimits
	if dc.RateLimit != nil {
		list = []yamlRateLimit{*dc.RateLimit}
	}
	if len(list) > slidelog.MaxLimits {
		return nil, &ConfigError{file, fmt.Sprintf("descriptor '%s' has %d rate_limits, more than %d", fullKey, len(list), slidelog.MaxLimits)}
	}
	for _, rl := range list {
		unitValue, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(rl.Unit)]
		unit := rlsv3.RateLimitResponse_RateLimit_Unit(unitValue)
		validUnit := ok && unit != rlsv3.RateLimitResponse_RateLimit_UNKNOWN
		if rl.Unlimited {
			if validUnit || rl.Window != "" {
				return nil, &ConfigError{file, "should not specify rate limit unit when unlimited"}
			}
			if len(list) > 1 {
				return nil, &ConfigError{file, fmt.Sprintf("descriptor '%s': unlimited in a rate_limits list", fullKey)}
			}
			r.Unlimited = true
		}
		var window time.Duration
		switch {
		case rl.Unlimited:
		case rl.Window != "":
			if rl.Unit != "" {
				return nil, &ConfigError{file, fmt.Sprintf("descriptor '%s': window %q and unit %q: give one", fullKey, rl.Window, rl.Unit)}
			}
			w, err := time.ParseDuration(rl.Window)
			if err != nil {
				return nil, &ConfigError{file, fmt.Sprintf("descriptor '%s': invalid window %q: %v", fullKey, rl.Window, err)}
			}
			window = w
			unit = unitOf(w)
		case !validUnit:
			return nil, &ConfigError{file, fmt.Sprintf("invalid rate limit unit '%s'", rl.Unit)}
		default:
			window = unitWindow[unit]
		}
		for _, rep := range rl.Replaces {
			if rep.Name == "" {
				return nil, &ConfigError{file, "should not have an empty replaces entry"}
			}
			if rep.Name == rl.Name {
				return nil, &ConfigError{file, "replaces should not contain name of same descriptor"}
			}
			r.Replaces = append(r.Replaces, rep.Name)
		}
		r.Names = append(r.Names, rl.Name)
		if rl.Unlimited {
			continue
		}
		lim := slidelog.Limit{Events: int(rl.RequestsPerUnit), Window: window}
		if rl.Calendar != nil {
			quota, err := calendarLimit(file, fullKey, unit, rl)
			if err != nil {
				return nil, err
			}
			lim = quota
		} else if lim.Events > slidelog.MaxEvents {
			return nil, &ConfigError{file, fmt.Sprintf("descriptor '%s': requests_per_unit %d is more than %d, the most a window keeps", fullKey, lim.Events, slidelog.MaxEvents)}
		} else if err := (slidelog.Limit{Events: max(lim.Events, 1), Window: window}).Validate(); err != nil {
			return nil, &ConfigError{file, fmt.Sprintf("descriptor '%s': window %v: %v", fullKey, window, err)}
		}
		for _, prev := range r.Limits {
			if prev.Window == lim.Window && !prev.Calendar() && !lim.Calendar() {
				return nil, &ConfigError{file, fmt.Sprintf("descriptor '%s': two rate_limits with the window %v", fullKey, window)}
			}
			if prev.Calendar() && lim.Calendar() && samePeriods(prev, lim) {
				return nil, &ConfigError{file, fmt.Sprintf("descriptor '%s': two calendar rate_limits of the same periods", fullKey)}
			}
		}
		r.Limits = append(r.Limits, lim)
		r.Units = append(r.Units, unit)
	}
	return r, nil
}

// calendarLimit is rl's calendar quota (rl.Calendar set): Daily on a day
// unit, Monthly on a month unit; anything else is refused, at load.
func calendarLimit(file, fullKey string, unit rlsv3.RateLimitResponse_RateLimit_Unit, rl yamlRateLimit) (slidelog.Limit, error) {
	c := rl.Calendar
	zone := c.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return slidelog.Limit{}, &ConfigError{file, fmt.Sprintf("descriptor '%s': calendar time_zone %q: %v", fullKey, zone, err)}
	}
	events := max(int(rl.RequestsPerUnit), 1)
	var lim slidelog.Limit
	switch {
	case rl.Window != "":
		return slidelog.Limit{}, &ConfigError{file, fmt.Sprintf("descriptor '%s': calendar takes a unit (day or month), not a window", fullKey)}
	case unit == rlsv3.RateLimitResponse_RateLimit_DAY:
		if c.AnchorDay != 0 {
			return slidelog.Limit{}, &ConfigError{file, fmt.Sprintf("descriptor '%s': calendar anchor_day is for a month unit", fullKey)}
		}
		lim = slidelog.Daily(events, loc)
	case unit == rlsv3.RateLimitResponse_RateLimit_MONTH:
		anchor := c.AnchorDay
		if anchor == 0 {
			anchor = 1
		}
		lim = slidelog.Monthly(events, anchor, loc)
	default:
		return slidelog.Limit{}, &ConfigError{file, fmt.Sprintf("descriptor '%s': calendar takes a day or month unit, not %s", fullKey, strings.ToLower(unit.String()))}
	}
	if err := lim.Validate(); err != nil {
		return slidelog.Limit{}, &ConfigError{file, fmt.Sprintf("descriptor '%s': calendar: %v", fullKey, err)}
	}
	lim.Events = int(rl.RequestsPerUnit)
	return lim, nil
}

// samePeriods reports whether two calendar quotas count the same periods.
func samePeriods(a, b slidelog.Limit) bool {
	a.Events, b.Events = 0, 0
	return a.String() == b.String()
}

// unitOf is the unit whose length is w, or UNKNOWN.
func unitOf(w time.Duration) rlsv3.RateLimitResponse_RateLimit_Unit {
	for u, d := range unitWindow {
		if d == w {
			return u
		}
	}
	return rlsv3.RateLimitResponse_RateLimit_UNKNOWN
}

func dumpRule(r *Rule) string {
	if r.Unlimited {
		return fmt.Sprintf("%s: unlimited, shadow_mode: %t, quota_mode: %t\n", r.FullKey, r.Shadow, r.Quota)
	}
	var parts []string
	for i, l := range r.Limits {
		s := fmt.Sprintf("unit=%s requests_per_unit=%d", r.Units[i], l.Events)
		if l.Calendar() {
			s = fmt.Sprintf("unit=%s requests_per_unit=%d calendar=%q", r.Units[i], l.Events, l.String())
		} else if r.Units[i] == rlsv3.RateLimitResponse_RateLimit_UNKNOWN {
			s = fmt.Sprintf("window=%v requests_per_unit=%d", l.Window, l.Events)
		}
		parts = append(parts, s)
	}
	usage := ""
	if r.Usage {
		usage = ", usage_mode: true"
	}
	return fmt.Sprintf("%s: %s, shadow_mode: %t, quota_mode: %t%s\n", r.FullKey, strings.Join(parts, "; "), r.Shadow, r.Quota, usage)
}

// wildcardMatch is envoyproxy/ratelimit's: each '*' matches any run of
// bytes, the parts in order.
func wildcardMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	if !strings.HasPrefix(value, parts[0]) || !strings.HasSuffix(value, parts[len(parts)-1]) {
		return false
	}
	fixed := 0
	for _, p := range parts {
		fixed += len(p)
	}
	if len(value) < fixed {
		return false
	}
	rest := value[len(parts[0]):]
	if last := parts[len(parts)-1]; last != "" {
		rest = rest[:len(rest)-len(last)]
	}
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// errNoConfig: no configuration was ever loaded.
var errNoConfig = errors.New("no rate limit configuration loaded")
