package reconciler

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// register is Register for one test.
func register(t *testing.T, r ReconcileFunc) {
	t.Helper()
	Register(NewManifest("greeter", widget.Kind), r)
	t.Cleanup(func() { manifest, reconcile = Manifest{}, nil })
}

func TestRunCallsTheRegisteredReconcile(t *testing.T) {
	UseFakeHost(t)
	register(t, func(req *Request) (Action, error) {
		return Action{RequeueAfter: time.Second}, errors.New(req.Ref.Name)
	})
	if registered().Name != "greeter" {
		t.Errorf("manifest %+v", registered())
	}
	action, err := run(NewRequest(widget, `{}`))
	if action.RequeueAfter != time.Second || err == nil || err.Error() != "w1" {
		t.Errorf("got %+v, %v", action, err)
	}
}

func TestRegisterTakesOneGuest(t *testing.T) {
	register(t, func(*Request) (Action, error) { return Action{}, nil })
	defer func() {
		if message, _ := recover().(string); !strings.Contains(message, "called twice") {
			t.Errorf("got %q", message)
		}
	}()
	Register(NewManifest("other", widget.Kind), func(*Request) (Action, error) { return Action{}, nil })
}

func TestWithoutARegisteredGuestTheManifestPanicsSayingWhatToDo(t *testing.T) {
	defer func() {
		message, _ := recover().(string)
		if !strings.Contains(message, "call reconciler.Register(manifest, reconcile) from an init function") {
			t.Errorf("panic %q", message)
		}
	}()
	registered()
}

func TestRequeueAfterIsRoundedUpToMillisecondsAndZeroWaitsForAChange(t *testing.T) {
	cases := map[time.Duration]struct {
		ms      uint64
		requeue bool
	}{
		0: {0, false}, -time.Second: {0, false}, 1500 * time.Microsecond: {2, true}, 3 * time.Second: {3000, true},
	}
	for after, want := range cases {
		ms, requeue := Action{RequeueAfter: after}.requeueAfterMs()
		if ms != want.ms || requeue != want.requeue {
			t.Errorf("%v: got (%d, %t), want %+v", after, ms, requeue, want)
		}
	}
}
