package ratefields

import (
	"strings"
	"testing"
	"time"

	"github.com/slidelog/slidelog"
)

func TestCheckRules(t *testing.T) {
	rate := slidelog.Limit{Events: 10, Window: time.Minute}
	many := make([]slidelog.Limit, slidelog.MaxLimits+1)
	for i := range many {
		many[i] = slidelog.Limit{Events: 1, Window: time.Duration(i+1) * time.Second}
	}
	for _, c := range []struct {
		rules []RuleSpec
		want  string // "" for none
	}{
		{[]RuleSpec{{Name: "perkey", HasKey: true, Limits: []slidelog.Limit{rate}}, {Name: "customer.day", HasKey: true, Limits: []slidelog.Limit{rate, slidelog.Daily(5, time.UTC)}}}, ""},
		{[]RuleSpec{{Name: "", HasKey: true, Limits: []slidelog.Limit{rate}}}, `pkg: Options.Rules[0]: the name "": empty`},
		{[]RuleSpec{{Name: "a b", HasKey: true, Limits: []slidelog.Limit{rate}}}, "byte 0x20 at 1"},
		{[]RuleSpec{{Name: "a", HasKey: true, Limits: []slidelog.Limit{rate}}, {Name: "a", HasKey: true, Limits: []slidelog.Limit{rate}}}, `[0] and [1] are both named "a"`},
		{[]RuleSpec{{Name: "a", Limits: []slidelog.Limit{rate}}}, `Options.Rules[0] ("a") has no Key`},
		{[]RuleSpec{{Name: "a", HasKey: true}}, "has no limit"},
		{[]RuleSpec{{Name: "a", HasKey: true, Limits: []slidelog.Limit{{Events: 0, Window: time.Second}}}}, "Limits[0]: "},
		{[]RuleSpec{{Name: "a", HasKey: true, Limits: []slidelog.Limit{rate, {Events: 5, Window: time.Minute}}}}, "would share a log"},
		{[]RuleSpec{{Name: "a", HasKey: true, Limits: []slidelog.Limit{slidelog.Daily(5, time.UTC), slidelog.Daily(9, time.UTC)}}}, "would share a log"},
		{[]RuleSpec{{Name: "a", HasKey: true, Limits: many}}, "more than one AllowEach takes"},
	} {
		err := CheckRules("pkg", c.rules)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v, want none", c.rules, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "pkg: ")):
			t.Errorf("%+v: %v, want %q", c.rules, err, c.want)
		}
	}
}

func TestDenierOwnSmallest(t *testing.T) {
	denied := func(rem int) slidelog.Result { return slidelog.Result{Remaining: rem, RetryAfter: time.Minute} }
	// the first rule without room for 2 events, though a later one has fewer left
	if d := Denier([]slidelog.Result{denied(5), denied(1), denied(0)}, 2); d != 1 {
		t.Errorf("Denier: %d, want 1", d)
	}
	// none without room (a Decider outside slidelog): the fewest left, the first of those
	if d := Denier([]slidelog.Result{{Allowed: true, Remaining: 4}, {Allowed: true, Remaining: 2}, {Allowed: true, Remaining: 2}}, 1); d != 1 {
		t.Errorf("Denier of admissions: %d, want 1", d)
	}
	if r := Own(denied(5), 2); !r.Allowed || r.RetryAfter != 0 || r.Remaining != 5 {
		t.Errorf("Own of a rule with room: %+v", r)
	}
	if r := Own(denied(1), 2); r.Allowed || r.RetryAfter != time.Minute {
		t.Errorf("Own of the rule that denied: %+v", r)
	}
	small := slidelog.Limit{Events: 3, Window: time.Hour}
	if l := Smallest([]slidelog.Limit{{Events: 9, Window: time.Second}, small, {Events: 3, Window: time.Minute}}); l != small {
		t.Errorf("Smallest: %v, want %v", l, small)
	}
}
