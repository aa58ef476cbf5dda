package reconciler

import (
	"reflect"
	"testing"
	"time"
)

var network = GVK{Group: "samplecrd.k8s.io", Version: "v1", Kind: "Network"}

func TestNewManifestHasTheContractsDefaults(t *testing.T) {
	got := NewManifest("network", network)
	want := Manifest{Name: "network", Primary: network}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestTheBuilderSetsExactlyWhatWasAsked(t *testing.T) {
	configMap := GVK{Version: "v1", Kind: "ConfigMap"}
	secret := GVK{Version: "v1", Kind: "Secret"}
	got := NewManifest("network", network).
		WithNamespace("demo").
		WithLabelSelector("tier=edge").
		Owns(configMap).
		WatchesByLabel(secret, "network").
		WithFinalizer("samplecrd.k8s.io/network-backend").
		WithConcurrency(4).
		WithResync(30 * time.Second).
		WithGenerationChangedOnly()
	want := Manifest{
		Name: "network", Primary: network, Namespace: "demo", LabelSelector: "tier=edge",
		Secondary:             []SecondaryWatch{{Kind: configMap}, {Kind: secret, Label: "network"}},
		Finalizer:             "samplecrd.k8s.io/network-backend",
		Concurrency:           4,
		ResyncSeconds:         30,
		GenerationChangedOnly: true,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestManifestsBuiltFromOneBaseDoNotShareSecondaries(t *testing.T) {
	base := NewManifest("network", network).Owns(GVK{Version: "v1", Kind: "ConfigMap"})
	first := base.Owns(GVK{Version: "v1", Kind: "Secret"})
	second := base.Owns(GVK{Version: "v1", Kind: "Service"})
	if first.Secondary[1].Kind.Kind != "Secret" || second.Secondary[1].Kind.Kind != "Service" || len(base.Secondary) != 1 {
		t.Errorf("shared backing array: base %v, first %v, second %v", base.Secondary, first.Secondary, second.Secondary)
	}
}

func TestResyncIsRoundedUpToWholeSeconds(t *testing.T) {
	cases := map[time.Duration]uint32{
		30 * time.Second: 30, 1500 * time.Millisecond: 2, time.Nanosecond: 1, 0: 0, -time.Second: 0,
		1 << 62: 1<<32 - 1,
	}
	for every, want := range cases {
		if got := NewManifest("n", network).WithResync(every).ResyncSeconds; got != want {
			t.Errorf("WithResync(%v): got %d, want %d", every, got, want)
		}
	}
}
