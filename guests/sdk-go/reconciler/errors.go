package reconciler

import (
	"fmt"
)

// ErrorKind is the contract's name for why a host call failed (the cases of the WIT `error`
// variant).
type ErrorKind string

// The kinds of [HostError], in the contract's words.
const (
	// The guest's grant does not cover the call; the text names what is missing.
	Denied ErrorKind = "denied"
	// A write hit an object that does not exist (reads return nothing instead).
	NotFound ErrorKind = "not-found"
	// The object changed since it was read (HTTP 409).
	Conflict ErrorKind = "conflict"
	// The request was rejected as invalid; the text starts with the field.
	Invalid ErrorKind = "invalid"
	// A dependency is down or overloaded, or the guest exceeded one of its rates.
	Unavailable ErrorKind = "unavailable"
	// Anything else.
	Other ErrorKind = "other"
)

// HostError is how every host call fails: the kind and the host's text, which says what and
// where. Host calls return it as an error; find it in an error's chain with [AsHostError]
// (`if e, ok := reconciler.AsHostError(err); ok && e.Kind == reconciler.Conflict`), or
// compare kinds with [errors.Is] and the Err* values (`errors.Is(err, reconciler.ErrNotFound)`).
type HostError struct {
	Kind    ErrorKind
	Message string
}

// Error reads like the contract, `kind: message`, e.g. `denied: no read grant for v1/Secret`.
func (e *HostError) Error() string { return string(e.Kind) + ": " + e.Message }

// Transient reports whether a retry of the same call could succeed: `conflict` (the object
// moved on; a retry reads the new version), `unavailable` (backoff helps) and `other` (unknown
// cause; retrying is the safe default). `invalid`, `denied` and `not-found` would fail the same
// way again until the object or the configuration changes.
func (e *HostError) Transient() bool {
	return e.Kind == Conflict || e.Kind == Unavailable || e.Kind == Other
}

// Is matches a [HostError] without a message of the same kind, so that [errors.Is] compares
// kinds: `errors.Is(err, reconciler.ErrConflict)`.
func (e *HostError) Is(target error) bool {
	kind, ok := target.(*HostError)
	return ok && kind.Message == "" && kind.Kind == e.Kind
}

// One value per [ErrorKind], for [errors.Is].
var (
	ErrDenied      = &HostError{Kind: Denied}
	ErrNotFound    = &HostError{Kind: NotFound}
	ErrConflict    = &HostError{Kind: Conflict}
	ErrInvalid     = &HostError{Kind: Invalid}
	ErrUnavailable = &HostError{Kind: Unavailable}
	ErrOther       = &HostError{Kind: Other}
)

// ReconcileError marks an error as transient (retried with per-key exponential backoff, 5 ms
// doubling to 1000 s) or permanent (not retried until the object, or a watched secondary,
// changes again). Make one with [Transient], [Permanent] or their f forms.
type ReconcileError struct {
	Permanent bool
	Err       error
}

// Error is the wrapped error's text: the message the host records on the key.
func (e *ReconcileError) Error() string { return e.Err.Error() }

// Unwrap gives the wrapped error to [errors.Is] and [errors.As].
func (e *ReconcileError) Unwrap() error { return e.Err }

// Transient marks err as worth retrying with backoff; nil stays nil.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &ReconcileError{Err: err}
}

// Permanent marks err as not worth retrying until the object changes; nil stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &ReconcileError{Permanent: true, Err: err}
}

// Transientf is [Transient] of [fmt.Errorf]: `%w` wraps, e.g. a [HostError].
func Transientf(format string, args ...any) error {
	return &ReconcileError{Err: fmt.Errorf(format, args...)}
}

// Permanentf is [Permanent] of [fmt.Errorf]: `%w` wraps, e.g. a [HostError].
func Permanentf(format string, args ...any) error {
	return &ReconcileError{Permanent: true, Err: fmt.Errorf(format, args...)}
}

// AsHostError is the first [HostError] in err's chain, as [errors.As] finds it, but without
// errors.As's reflection, which adds ~55 KB to a Go guest.
func AsHostError(err error) (*HostError, bool) {
	var found *HostError
	walk(err, func(e error) bool {
		found, _ = e.(*HostError)
		return found != nil
	})
	return found, found != nil
}

// classify decides what the host hears of an error a reconcile returned: the first
// [ReconcileError] in its chain says whether it is permanent; failing that, the first
// [HostError] decides by its kind ([HostError.Transient]); any other error is transient, since
// its cause is unknown. The message is always err.Error(), wrapping included.
func classify(err error) (permanent bool, message string) {
	var host *HostError
	marked := walk(err, func(e error) bool {
		switch e := e.(type) {
		case *ReconcileError:
			permanent = e.Permanent
			return true
		case *HostError:
			if host == nil {
				host = e
			}
		}
		return false
	})
	if !marked && host != nil {
		permanent = !host.Transient()
	}
	return permanent, err.Error()
}

// walk calls visit on err and every error it wraps (`Unwrap() error` and `Unwrap() []error`,
// depth first, as errors.As goes) until visit returns true, and reports whether it did.
func walk(err error, visit func(error) bool) bool {
	for err != nil {
		if visit(err) {
			return true
		}
		switch wrapper := err.(type) {
		case interface{ Unwrap() error }:
			err = wrapper.Unwrap()
		case interface{ Unwrap() []error }:
			for _, inner := range wrapper.Unwrap() {
				if walk(inner, visit) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}
