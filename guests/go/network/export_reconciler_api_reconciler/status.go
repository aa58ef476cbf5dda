package export_reconciler_api_reconciler

// The Network's `status`, and what the guest must do to the backend to reach the spec.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"wit_component/reconciler"
	backend "wit_component/reconciler/networkbackend"
)

// ready is the condition every Network carries.
const ready = "Ready"

// Status is `status` as the CRD defines it. Fields other writers may add are left alone,
// because the guest writes with a merge patch.
type Status struct {
	Conditions         []reconciler.Condition `json:"conditions,omitempty"`
	ObservedGeneration *int64                 `json:"observedGeneration,omitempty"`
	InterfaceName      *string                `json:"interfaceName,omitempty"`
	ActualCidr         *string                `json:"actualCidr,omitempty"`
	ActualGateway      *string                `json:"actualGateway,omitempty"`
}

// parseStatus reads a status; a condition needs a valid `lastTransitionTime`, its other
// fields default to empty, as the API types have it. Times are rewritten as reconciler.Now
// writes them.
func parseStatus(raw json.RawMessage) (*Status, error) {
	var status Status
	if err := json.Unmarshal(raw, &status); err != nil {
		return nil, err
	}
	for i := range status.Conditions {
		at := status.Conditions[i].LastTransitionTime
		if at == "" {
			return nil, errors.New("missing field `lastTransitionTime`")
		}
		parsed, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return nil, fmt.Errorf("lastTransitionTime %q: %v", at, err)
		}
		status.Conditions[i].LastTransitionTime = parsed.UTC().Format(time.RFC3339)
	}
	return &status, nil
}

func (s Status) clone() Status {
	s.Conditions = append([]reconciler.Condition(nil), s.Conditions...)
	return s
}

// setReady sets `Ready` (keeping its `lastTransitionTime` unless the status flips) and records
// that this generation was looked at.
func (s *Status) setReady(generation *int64, isReady bool, reason, message string) {
	condition := reconciler.NewCondition(ready, isReady, reason, message)
	if generation != nil {
		condition.ObservedGeneration = *generation
	}
	reconciler.SetCondition(&s.Conditions, condition)
	s.ObservedGeneration = generation
}

// setActual copies what the backend reports.
func (s *Status) setActual(actual backend.Status) {
	s.InterfaceName, s.ActualCidr, s.ActualGateway = &actual.InterfaceName, &actual.CIDR, &actual.Gateway
}

// plan compares the desired spec with the backend's state: nil when the network does not
// exist, else every difference (empty: in sync). Addresses are compared as parsed values, so
// `fd00:0::1` and `fd00::1` are the same; text the backend reports that does not parse counts
// as drift.
func plan(desired validSpec, actual *backend.Status) []string {
	if actual == nil {
		return nil
	}
	drift := []string{}
	if cidr, err := netip.ParsePrefix(actual.CIDR); err != nil || cidr != desired.cidr {
		drift = append(drift, fmt.Sprintf("cidr is %s instead of %s", actual.CIDR, desired.cidr))
	}
	if gateway, err := netip.ParseAddr(actual.Gateway); err != nil || gateway != desired.gateway {
		drift = append(drift, fmt.Sprintf("gateway is %s instead of %s", actual.Gateway, desired.gateway))
	}
	if !actual.Up {
		drift = append(drift, fmt.Sprintf("interface %s is down", actual.InterfaceName))
	}
	return drift
}
