package envoyrls_test

import (
	"strings"
	"testing"

	"github.com/slidelog/slidelog/contrib/envoyrls"
)

// What envoyproxy/ratelimit refuses is refused, with its message.
func TestConfigRefused(t *testing.T) {
	for _, c := range []struct{ yml, want string }{
		{"descriptors: []", "config file cannot have empty domain"},
		{"domain: d\ndescriptors:\n  - value: v", "descriptor has empty key"},
		{"domain: d\ndescriptors:\n  - key: k\n  - key: k", "duplicate descriptor composite key 'd.k'"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}", "invalid rate limit unit 'fortnight'"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {requests_per_unit: 1}", "invalid rate limit unit ''"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: second}", "should not specify rate limit unit when unlimited"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: ''}]}", "should not have an empty replaces entry"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: a, unit: second, requests_per_unit: 1, replaces: [{name: a}]}", "replaces should not contain name of same descriptor"},
		{"domain: d\ndescriptors:\n  - key: k\n    share_threshold: true", "share_threshold can only be used with wildcard values"},
		{"domain: d\ndescriptors:\n  - key: k\n    bogus: 1", "config error, unknown key 'bogus'"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1.5}", "error checking config"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1, calendar: {time_zone: UTC}}", "calendar takes a day or month unit, not hour"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, calendar: {time_zone: Mars/Olympus}}", "calendar time_zone"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, calendar: {anchor_day: 3}}", "anchor_day is for a month unit"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 1, calendar: {anchor_day: 32}}", "calendar:"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: 24h, requests_per_unit: 1, calendar: {}}", "not a window"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: 90s, unit: second, requests_per_unit: 1}", "give one"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {window: 90x, requests_per_unit: 1}", "invalid window"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1073741825}", "descriptor 'd.k': requests_per_unit 1073741825 is more than 1073741824, the most a window keeps"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limits: [{unit: second, requests_per_unit: 1}, {window: 90s, requests_per_unit: 4294967295}]", "descriptor 'd.k': requests_per_unit 4294967295 is more than 1073741824"},
		{"domain: d\ndescriptors: [", "error loading config file"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: -1}", "error loading config file"},
	} {
		_, err := envoyrls.ParseConfig(envoyrls.File{Name: "f.yaml", Data: []byte(c.yml)})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "f.yaml: ") {
			t.Errorf("%q: %v, want f.yaml: ...%s", c.yml, err, c.want)
		}
	}
	_, err := envoyrls.ParseConfig(envoyrls.File{Name: "a.yaml", Data: []byte("domain: d")}, envoyrls.File{Name: "b.yaml", Data: []byte("domain: d")})
	if err == nil || err.Error() != "b.yaml: duplicate domain 'd' in config file" {
		t.Errorf("duplicate domain: %v", err)
	}
}

// What envoyproxy/ratelimit accepts is accepted, metadata and all.
func TestConfigAccepted(t *testing.T) {
	cfg, err := envoyrls.ParseConfig(envoyrls.File{Name: "f.yaml", Data: []byte(`
domain: d
descriptors:
  - key: k
    value: "a*"
    share_threshold: true
    value_to_metric: true
    quota_mode: false
    detailed_metric: true
    metadata:
      owner: {team: x}
    rate_limit: {unit: YEAR, requests_per_unit: 0}
  - key: k2
    descriptors:
      - key: k3
        rate_limit: {unit: week, requests_per_unit: 5}
  - key: k4
    rate_limit: {unit: year, requests_per_unit: 1073741824}
`)})
	if err != nil {
		t.Fatal(err)
	}
	want := "d.k_a*: unit=YEAR requests_per_unit=0, shadow_mode: false, quota_mode: false\n" +
		"d.k2.k3: unit=WEEK requests_per_unit=5, shadow_mode: false, quota_mode: false\n" +
		"d.k4: unit=YEAR requests_per_unit=1073741824, shadow_mode: false, quota_mode: false\n"
	if cfg.String() != want {
		t.Errorf("dump:\n%s\nwant:\n%s", cfg, want)
	}
}
