package reconciler

// Kubernetes events about objects, for the humans running `kubectl describe`. The host
// aggregates repeats of the same (object, type, reason), so recording one on every reconcile
// costs little; a guest may record events about any object it may read, at its event rate.

// EventType is Normal or Warning, in the contract's order.
type EventType uint8

// The event types.
const (
	EventNormal EventType = iota
	EventWarning
)

// Event is an event about an object.
type Event struct {
	Regarding ObjectRef
	Type      EventType
	Reason    string // UpperCamelCase, e.g. `Synced`, `BackendFailed`
	Message   string
}

// RecordEvent records an event and reports whether the host accepted it, e.g. `denied` when
// the guest may not read Regarding, `unavailable` beyond its event rate.
func RecordEvent(event Event) error {
	return host().recordEvent(event)
}

// NormalEvent records a Normal event, best effort: a refusal is logged at warn level and does
// not fail the reconcile (use [RecordEvent] to handle it).
func NormalEvent(regarding ObjectRef, reason, message string) {
	bestEffort(Event{Regarding: regarding, Type: EventNormal, Reason: reason, Message: message})
}

// WarningEvent records a Warning event, best effort, as [NormalEvent].
func WarningEvent(regarding ObjectRef, reason, message string) {
	bestEffort(Event{Regarding: regarding, Type: EventWarning, Reason: reason, Message: message})
}

func bestEffort(event Event) {
	if err := RecordEvent(event); err != nil {
		LogWarnf("could not record event %s on %s: %v", event.Reason, event.Regarding, err)
	}
}
