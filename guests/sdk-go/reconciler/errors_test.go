package reconciler

import (
	"errors"
	"fmt"
	"testing"
)

func TestHostErrorsARetryCouldFixAreTransientAndTheRestPermanent(t *testing.T) {
	cases := map[ErrorKind]bool{
		Conflict: false, Unavailable: false, Other: false,
		Invalid: true, Denied: true, NotFound: true,
	}
	for kind, wantPermanent := range cases {
		permanent, message := classify(&HostError{Kind: kind, Message: "text"})
		if permanent != wantPermanent || message != string(kind)+": text" {
			t.Errorf("%s: got (%t, %q), want (%t, %q)", kind, permanent, message, wantPermanent, string(kind)+": text")
		}
	}
}

func TestAMarkedErrorDecidesOverTheHostErrorItWraps(t *testing.T) {
	denied := &HostError{Kind: Denied, Message: "no status write grant"}
	permanent, message := classify(Transientf("status write failed: %w", denied))
	if permanent || message != "status write failed: denied: no status write grant" {
		t.Errorf("got (%t, %q)", permanent, message)
	}
	permanent, _ = classify(Permanent(&HostError{Kind: Conflict, Message: "c"}))
	if !permanent {
		t.Error("Permanent(conflict) must stay permanent")
	}
	permanent, message = classify(fmt.Errorf("while syncing: %w", Permanentf("spec.port %d is out of range", 70000)))
	if !permanent || message != "while syncing: spec.port 70000 is out of range" {
		t.Errorf("a wrapped mark: got (%t, %q)", permanent, message)
	}
}

func TestAnErrorOfUnknownCauseIsTransient(t *testing.T) {
	if permanent, message := classify(errors.New("boom")); permanent || message != "boom" {
		t.Errorf("got (%t, %q)", permanent, message)
	}
}

func TestJoinedErrorsAreSearchedForAHostError(t *testing.T) {
	joined := errors.Join(errors.New("first"), fmt.Errorf("second: %w", &HostError{Kind: Invalid, Message: "spec"}))
	if permanent, _ := classify(joined); !permanent {
		t.Error("the invalid host error inside errors.Join must make it permanent")
	}
	found, ok := AsHostError(joined)
	if !ok || found.Kind != Invalid {
		t.Errorf("AsHostError: got (%v, %t)", found, ok)
	}
}

func TestHostErrorKindsCompareWithErrorsIsAndAsHostError(t *testing.T) {
	err := fmt.Errorf("delete: %w", &HostError{Kind: NotFound, Message: "ConfigMap ns/a"})
	if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrConflict) {
		t.Errorf("errors.Is by kind failed for %v", err)
	}
	if errors.Is(ErrNotFound, &HostError{Kind: NotFound, Message: "another"}) {
		t.Error("a HostError with a message matches only itself")
	}
	found, ok := AsHostError(err)
	if !ok || found.Error() != "not-found: ConfigMap ns/a" {
		t.Errorf("AsHostError: got (%v, %t)", found, ok)
	}
	if found, ok := AsHostError(errors.New("plain")); ok || found != nil {
		t.Errorf("a plain error holds no HostError, got %v", found)
	}
	if _, ok := AsHostError(nil); ok {
		t.Error("nil holds no HostError")
	}
}

func TestMarkingNilGivesNil(t *testing.T) {
	if Transient(nil) != nil || Permanent(nil) != nil {
		t.Error("Transient(nil) and Permanent(nil) must be nil, so that `return Action{}, Transient(err)` works")
	}
}

func TestAReconcileErrorUnwrapsToWhatItMarks(t *testing.T) {
	cause := &HostError{Kind: Unavailable, Message: "API server down"}
	if !errors.Is(Transient(cause), cause) {
		t.Error("errors.Is must see through Transient")
	}
}
