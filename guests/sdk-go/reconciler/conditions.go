package reconciler

import "time"

// Condition is a `metav1.Condition`, the shape of `status.conditions` that `kubectl wait` and
// humans expect. Keep them with [SetCondition]: one entry per type, LastTransitionTime moving
// only when the status flips.
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"` // ConditionTrue, ConditionFalse or ConditionUnknown
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime"` // RFC 3339, whole seconds, UTC: see Now
	Reason             string `json:"reason"`             // UpperCamelCase, e.g. `Synced`
	Message            string `json:"message"`
}

// The values of [Condition.Status].
const (
	ConditionTrue    = "True"
	ConditionFalse   = "False"
	ConditionUnknown = "Unknown"
)

// Now is the current time as a `metav1.Time` is written: RFC 3339 in UTC, truncated to whole
// seconds as the API server stores it (`2026-01-02T03:04:05Z`), so that a condition read back
// compares equal to the one written. The clock is the host's `wasi:clocks/wall-clock`, which
// every guest has.
func Now() string {
	return time.Now().UTC().Format(time.RFC3339)
}

// NewCondition is a condition stamped with [Now]; set ObservedGeneration on the result if the
// guest tracks it.
func NewCondition(conditionType string, status bool, reason, message string) Condition {
	value := ConditionFalse
	if status {
		value = ConditionTrue
	}
	return Condition{Type: conditionType, Status: value, Reason: reason, Message: message, LastTransitionTime: Now()}
}

// FindCondition is the condition of conditionType, or nil.
func FindCondition(conditions []Condition, conditionType string) *Condition {
	for i := range conditions {
		if conditions[i].Type == conditionType {
			return &conditions[i]
		}
	}
	return nil
}

// IsConditionTrue reports whether the condition of conditionType is present with status True.
func IsConditionTrue(conditions []Condition, conditionType string) bool {
	found := FindCondition(conditions, conditionType)
	return found != nil && found.Status == ConditionTrue
}

// SetCondition adds condition, or updates the one of the same type in place, like
// apimachinery's `meta.SetStatusCondition`: LastTransitionTime is taken from condition (or
// [Now] when it is empty) only when the status changes; reason, message and observed
// generation always follow condition.
//
// It reports whether anything changed, so a guest can skip a status write (and an event) when
// nothing did.
func SetCondition(conditions *[]Condition, condition Condition) bool {
	if condition.LastTransitionTime == "" {
		condition.LastTransitionTime = Now()
	}
	existing := FindCondition(*conditions, condition.Type)
	if existing == nil {
		*conditions = append(*conditions, condition)
		return true
	}
	changed := false
	if existing.Status != condition.Status {
		existing.Status = condition.Status
		existing.LastTransitionTime = condition.LastTransitionTime
		changed = true
	}
	if existing.Reason != condition.Reason {
		existing.Reason = condition.Reason
		changed = true
	}
	if existing.Message != condition.Message {
		existing.Message = condition.Message
		changed = true
	}
	if existing.ObservedGeneration != condition.ObservedGeneration {
		existing.ObservedGeneration = condition.ObservedGeneration
		changed = true
	}
	return changed
}
