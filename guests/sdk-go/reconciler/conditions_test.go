package reconciler

import (
	"regexp"
	"testing"
	"time"
)

func at(at string, c Condition) Condition {
	c.LastTransitionTime = at
	return c
}

const (
	t100 = "2026-01-01T00:01:40Z"
	t200 = "2026-01-01T00:03:20Z"
)

func TestSetConditionAddsAMissingType(t *testing.T) {
	var conditions []Condition
	if !SetCondition(&conditions, NewCondition("Ready", true, "Synced", "ok")) {
		t.Error("adding must report a change")
	}
	if !IsConditionTrue(conditions, "Ready") || IsConditionTrue(conditions, "Degraded") || FindCondition(conditions, "Degraded") != nil {
		t.Errorf("got %+v", conditions)
	}
}

func TestSetConditionKeepsTheTransitionTimeWhileTheStatusIsUnchanged(t *testing.T) {
	conditions := []Condition{at(t100, NewCondition("Ready", false, "BackendError", "down"))}
	if !SetCondition(&conditions, at(t200, NewCondition("Ready", false, "BackendError", "still down"))) {
		t.Error("the message changed")
	}
	if len(conditions) != 1 || conditions[0].LastTransitionTime != t100 || conditions[0].Message != "still down" {
		t.Errorf("got %+v", conditions)
	}
}

func TestSetConditionMovesTheTransitionTimeWhenTheStatusFlips(t *testing.T) {
	conditions := []Condition{at(t100, NewCondition("Ready", false, "BackendError", "down"))}
	if !SetCondition(&conditions, at(t200, NewCondition("Ready", true, "Synced", "up"))) {
		t.Error("the status flipped")
	}
	got := conditions[0]
	if got.LastTransitionTime != t200 || got.Status != ConditionTrue || got.Reason != "Synced" || got.Message != "up" {
		t.Errorf("got %+v", got)
	}
}

func TestSetConditionReportsNoChangeForAnIdenticalCondition(t *testing.T) {
	conditions := []Condition{at(t100, NewCondition("Ready", true, "Synced", "up"))}
	if SetCondition(&conditions, at(t200, NewCondition("Ready", true, "Synced", "up"))) {
		t.Error("nothing changed")
	}
	if conditions[0].LastTransitionTime != t100 {
		t.Errorf("got %+v", conditions[0])
	}
}

func TestSetConditionFollowsTheObservedGeneration(t *testing.T) {
	conditions := []Condition{at(t100, NewCondition("Ready", true, "Synced", "up"))}
	next := NewCondition("Ready", true, "Synced", "up")
	next.ObservedGeneration = 2
	if !SetCondition(&conditions, next) || conditions[0].ObservedGeneration != 2 || conditions[0].LastTransitionTime != t100 {
		t.Errorf("got %+v", conditions[0])
	}
}

func TestSetConditionStampsAConditionWithoutATimeWithNow(t *testing.T) {
	var conditions []Condition
	SetCondition(&conditions, Condition{Type: "Ready", Status: ConditionUnknown, Reason: "Starting"})
	if conditions[0].LastTransitionTime == "" {
		t.Errorf("got %+v", conditions[0])
	}
}

func TestNowIsWholeSecondsInUTC(t *testing.T) {
	now := Now()
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(now) {
		t.Fatalf("%q is not RFC 3339 in whole seconds, UTC", now)
	}
	parsed, err := time.Parse(time.RFC3339, now)
	if err != nil || time.Since(parsed) < 0 || time.Since(parsed) > 5*time.Second {
		t.Errorf("%q is not now (%v)", now, err)
	}
}
