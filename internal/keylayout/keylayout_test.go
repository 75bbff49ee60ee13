package keylayout

import "testing"

// The slots CLUSTER KEYSLOT gave on Redis 7.0 for these keys.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789": 12739, "foo": 12182, "somekey": 11058, "foo{hash_tag}": 2515,
		"slidelog:{user}42": 5474, "a{}b": 13694, "{}": 15257, "x{": 3596,
		"slidelog:hot": 1393, "{a}{b}": 15495,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}

// Every slot has a tag, and the tag hashes to it.
func TestTagOf(t *testing.T) {
	for s := range 16384 {
		tag := TagOf(s)
		if tag == "" || len(tag) > 3 || Slot("{"+tag+"}") != s {
			t.Fatalf("TagOf(%d) = %q (slot %d)", s, tag, Slot("{"+tag+"}"))
		}
	}
}

// The names docs/operations.md ("Key layout") gives, one of each kind of K.
func TestLayoutNames(t *testing.T) {
	for _, c := range []struct{ prefix, key, start string }{
		{"slidelog:", "acct", "slidelog:{slidelog:acct}:"},
		{"slidelog:", "user:{42}", "slidelog:{42}user:{42}:"},
		{"slidelog:", "}x", "slidelog:{0JI}}x:"},
		{"{rl}:", "acct", "{rl}:{rl}acct:"},
	} {
		start := Start(c.prefix, c.key)
		if start != c.start || Single(c.prefix, c.key) != c.prefix+c.key ||
			Index(start) != c.start+"windows" || Inflight(start) != c.start+"inflight" {
			t.Errorf("prefix %q key %q: start %q, want %q", c.prefix, c.key, start, c.start)
		}
	}
}

// A quota's name says what it counts, and only a quota's name does.
func TestQuota(t *testing.T) {
	start := Start("slidelog:", "acct")
	for _, c := range []struct {
		name, period string
		anchor       int
		zone         string
	}{
		{Daily(start, "Europe/Berlin"), "day", 0, "Europe/Berlin"},
		{Monthly(start, 31, "UTC"), "month", 31, "UTC"},
		{Monthly(start, 1, "America/Argentina/Buenos_Aires"), "month", 1, "America/Argentina/Buenos_Aires"},
	} {
		period, anchor, zone, ok := Quota(start, c.name)
		if !ok || period != c.period || anchor != c.anchor || zone != c.zone {
			t.Errorf("Quota(%q) = %q, %d, %q, %v; want %q, %d, %q", c.name, period, anchor, zone, ok, c.period, c.anchor, c.zone)
		}
	}
	for _, name := range []string{
		Periods(start), Index(start), Inflight(start), start + "60000000", start + "day:",
		start + "month:x:UTC", start + "month:01:UTC", start + "month:1:", start + "month:1",
		Daily(Start("slidelog:", "other"), "UTC"),
	} {
		if period, anchor, zone, ok := Quota(start, name); ok {
			t.Errorf("Quota(%q) = %q, %d, %q: want no quota", name, period, anchor, zone)
		}
	}
	if got := Periods(start); got != "slidelog:{slidelog:acct}:periods" {
		t.Errorf("Periods = %q", got)
	}
}
