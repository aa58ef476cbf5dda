package reconciler

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

var (
	mirrorKind    = GVK{Group: "mirror.reconciler.dev", Version: "v1alpha1", Kind: "Mirror"}
	configMapKind = GVK{Version: "v1", Kind: "ConfigMap"}
	namespaceKind = GVK{Version: "v1", Kind: "Namespace"}
)

// registerWatching is Register of a manifest with watches for one test; exported says whether
// the component exports `watches` (the world watching-controller).
func registerWatching(t *testing.T, m Manifest, exported bool) {
	t.Helper()
	Register(m, func(*Request) (Action, error) { return Action{}, nil })
	watchesExported = exported
	t.Cleanup(func() { manifest, reconcile, watchesExported = Manifest{}, nil, false })
}

// panicOf is the message f panicked with, or "" when it returned.
func panicOf(f func()) (message string) {
	defer func() { message, _ = recover().(string) }()
	f()
	return ""
}

func TestTheByFunctionsMakeTheContractsMappings(t *testing.T) {
	mapper := func(*Object) ([]ObjectKey, error) { return nil, nil }
	cases := []struct {
		got  WatchMapping
		want WatchMapping
	}{
		{ByOwner(), WatchMapping{}},
		{ByLabel("app"), WatchMapping{By: MapLabel, Label: "app"}},
		{ByOwnerLabels("o/ns", "o/name"), WatchMapping{By: MapOwnerLabels, NamespaceLabel: "o/ns", Label: "o/name"}},
		{ByField("spec.targetNamespaces[*]", IndexName), WatchMapping{By: MapField, Field: FieldIndex{"spec.targetNamespaces[*]", IndexName}}},
		{ByField("spec.ref", IndexNamespacedName), WatchMapping{By: MapField, Field: FieldIndex{"spec.ref", IndexNamespacedName}}},
	}
	for _, c := range cases {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("got %+v, want %+v", c.got, c.want)
		}
	}
	if byFunc := ByFunc(mapper); byFunc.By != MapFunction || byFunc.Func == nil {
		t.Errorf("ByFunc: %+v", byFunc)
	}
	// The contract's enum and variant cases, by number (the wasip1 layer converts by value).
	if MapFunction != 4 || IndexNamespacedName != 2 {
		t.Errorf("MapFunction %d, IndexNamespacedName %d", MapFunction, IndexNamespacedName)
	}
}

func TestWatchAddsWatchesWithoutSharingThemBetweenManifests(t *testing.T) {
	source := Watch{Kind: configMapKind, Mapping: ByField("spec.source", IndexName)}
	base := NewManifest("mirror", mirrorKind).Owns(configMapKind).Watch(source)
	first := base.Watch(Watch{Kind: namespaceKind, Mapping: ByField("spec.targetNamespaces[*]", IndexName)})
	second := base.Watch(Watch{Kind: configMapKind, Mapping: ByOwnerLabels("a", "b"), LabelSelector: "b"})
	if len(base.Watches) != 1 || first.Watches[1].Kind != namespaceKind || second.Watches[1].LabelSelector != "b" {
		t.Errorf("shared backing array: base %v, first %v, second %v", base.Watches, first.Watches, second.Watches)
	}
	if len(first.Secondary) != 1 || !reflect.DeepEqual(first.Watches[0], source) {
		t.Errorf("Watch changed more than Watches: %+v", first)
	}
}

func TestAManifestWithWatchesInAComponentWithoutTheExportPanicsNamingTheWorld(t *testing.T) {
	registerWatching(t, NewManifest("mirror", mirrorKind).Watch(Watch{Kind: configMapKind, Mapping: ByLabel("m")}), false)
	message := panicOf(func() { exportedManifest() })
	if !strings.Contains(message, "declares 1 Watches") || !strings.Contains(message, "`watching-controller`") {
		t.Errorf("panic %q", message)
	}
}

func TestAManifestWithWatchesLoadsWhereTheComponentExportsThem(t *testing.T) {
	registerWatching(t, NewManifest("mirror", mirrorKind).Watch(Watch{Kind: configMapKind, Mapping: ByLabel("m")}), true)
	if m := exportedManifest(); len(m.Watches) != 1 {
		t.Errorf("manifest %+v", m)
	}
	if watches := WatchesExport(); len(watches) != 1 || watches[0].Mapping.Label != "m" {
		t.Errorf("watches %+v", watches)
	}
}

func TestAManifestWithoutWatchesNeedsNoExport(t *testing.T) {
	registerWatching(t, NewManifest("greeter", widget.Kind).Owns(configMapKind), false)
	if m := exportedManifest(); m.Name != "greeter" {
		t.Errorf("manifest %+v", m)
	}
}

func TestWatchesRefusesAFunctionWatchWithoutAFunction(t *testing.T) {
	registerWatching(t, NewManifest("mirror", mirrorKind).Watch(
		Watch{Kind: configMapKind, Mapping: ByLabel("m")},
		Watch{Kind: namespaceKind, Mapping: ByFunc(nil)},
	), true)
	message := panicOf(func() { WatchesExport() })
	if !strings.Contains(message, "Watches[1] (Namespace v1) maps ByFunc(nil)") {
		t.Errorf("panic %q", message)
	}
}

func TestWatchesRefusesAMappingOutsideTheContract(t *testing.T) {
	registerWatching(t, NewManifest("mirror", mirrorKind).Watch(Watch{Kind: configMapKind, Mapping: WatchMapping{By: 9}}), true)
	if message := panicOf(func() { WatchesExport() }); !strings.Contains(message, "has no mapping 9") {
		t.Errorf("panic %q", message)
	}
}

func TestMapCallsTheFunctionsOfTheKindAndReturnsEachKeyOnce(t *testing.T) {
	fake := UseFakeHost(t)
	var seen []string
	byNamespace := func(object *Object) ([]ObjectKey, error) {
		seen = append(seen, object.JSON())
		var o struct {
			Metadata struct{ Namespace, Name string } `json:"metadata"`
		}
		if err := object.Decode(&o); err != nil {
			return nil, err
		}
		return []ObjectKey{{o.Metadata.Namespace, "m1"}, {o.Metadata.Namespace, "m2"}}, nil
	}
	also := func(*Object) ([]ObjectKey, error) { return []ObjectKey{{"demo", "m2"}, {"", "cluster-wide"}}, nil }
	never := func(*Object) ([]ObjectKey, error) { t.Error("a function of another kind was called"); return nil, nil }
	registerWatching(t, NewManifest("mirror", mirrorKind).Watch(
		Watch{Kind: configMapKind, Mapping: ByFunc(byNamespace)},
		Watch{Kind: configMapKind, Mapping: ByLabel("not-a-function")},
		Watch{Kind: namespaceKind, Mapping: ByFunc(never)},
		Watch{Kind: configMapKind, Mapping: ByFunc(also), Namespace: "demo"},
	), true)
	object := `{"metadata":{"namespace":"demo","name":"a"}}`
	got := MapExport(configMapKind, object)
	want := []ObjectKey{{"demo", "m1"}, {"demo", "m2"}, {"", "cluster-wide"}}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(seen, []string{object}) {
		t.Errorf("got %v (the function saw %v), want %v", got, seen, want)
	}
	if len(fake.Calls()) != 0 {
		t.Errorf("host calls %q", lines(fake))
	}
}

func TestMapOfAKindWithoutAFunctionWarnsAndReturnsNoKeys(t *testing.T) {
	fake := UseFakeHost(t)
	registerWatching(t, NewManifest("mirror", mirrorKind).Watch(Watch{Kind: configMapKind, Mapping: ByLabel("m")}), true)
	if got := MapExport(configMapKind, `{}`); got != nil {
		t.Errorf("got %v", got)
	}
	want := []string{"log warn: map was called for ConfigMap v1, which no ByFunc watch declares: no keys"}
	if !reflect.DeepEqual(lines(fake), want) {
		t.Errorf("calls %q", lines(fake))
	}
}

func TestAFailedMapIsLoggedAndTrapsNamingTheObject(t *testing.T) {
	fake := UseFakeHost(t)
	failing := func(*Object) ([]ObjectKey, error) { return nil, errors.New("spec.owner is missing") }
	registerWatching(t, NewManifest("mirror", mirrorKind).Watch(Watch{Kind: configMapKind, Mapping: ByFunc(failing)}), true)
	object := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"demo","name":"a"}}`
	message := panicOf(func() { MapExport(configMapKind, object) })
	want := "map ConfigMap demo/a: spec.owner is missing"
	if message != want || !reflect.DeepEqual(lines(fake), []string{"log error: " + want}) {
		t.Errorf("panic %q, calls %q", message, lines(fake))
	}
}

func TestAMapFunctionsDecodeErrorNamesTheKind(t *testing.T) {
	UseFakeHost(t)
	decoding := func(object *Object) ([]ObjectKey, error) {
		var into struct{}
		return nil, object.Decode(&into)
	}
	registerWatching(t, NewManifest("mirror", mirrorKind).Watch(Watch{Kind: configMapKind, Mapping: ByFunc(decoding)}), true)
	message := panicOf(func() { MapExport(configMapKind, `not json`) })
	if !strings.HasPrefix(message, "map ConfigMap v1: the ConfigMap to map does not decode: ") {
		t.Errorf("panic %q", message)
	}
}

func TestByIndexWatchesGoToTheIndexesExportAndTheirFunctionsComputeValues(t *testing.T) {
	listed := func(primary *Object) ([]string, error) {
		var m struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := primary.Decode(&m); err != nil {
			return nil, err
		}
		if list := m.Metadata.Annotations["list"]; list != "" {
			return strings.Split(list, ","), nil
		}
		return nil, errors.New("no list")
	}
	fake := UseFakeHost(t)
	byField := Watch{Kind: configMapKind, Mapping: ByField("spec.source", IndexName)}
	byIndex := Watch{Kind: configMapKind, Mapping: ByIndex("configmaps", IndexNamespacedName, listed), Namespace: "apps"}
	registerWatching(t, NewManifest("reloader", mirrorKind).Watch(byField, byIndex), true)
	indexesExported = true
	t.Cleanup(func() { indexesExported = false })

	if got := WatchesExport(); len(got) != 1 || got[0].Mapping.By != MapField {
		t.Errorf("watches: %+v, want the field watch alone", got)
	}
	got := IndexesExport()
	if len(got) != 1 || got[0].Mapping.Index != "configmaps" || got[0].Mapping.Field.Value != IndexNamespacedName || got[0].Namespace != "apps" {
		t.Fatalf("indexes: %+v, want the ByIndex watch", got)
	}
	primary := `{"metadata":{"name":"web","namespace":"apps","annotations":{"list":"a,b"}}}`
	if values := IndexExport("configmaps", primary); !reflect.DeepEqual(values, []string{"a", "b"}) {
		t.Errorf("values %q, want a and b", values)
	}
	if len(fake.Calls()) != 0 {
		t.Errorf("an index function called the host: %q", lines(fake))
	}
	if values := IndexExport("other", primary); values != nil {
		t.Errorf("an undeclared index gave %q", values)
	}
	message := panicOf(func() { IndexExport("configmaps", `{"metadata":{"name":"web"}}`) })
	if !strings.Contains(message, "index configmaps of") || !strings.Contains(message, "no list") {
		t.Errorf("a failing function: panic %q", message)
	}
	want := []string{`log warn: index was called for "other", which no ByIndex watch declares: no values`, "log error: " + message}
	if !reflect.DeepEqual(lines(fake), want) {
		t.Errorf("calls %q", lines(fake))
	}
	if MapIndex != 5 {
		t.Errorf("MapIndex %d follows the contract's mappings", MapIndex)
	}
}

func TestAByIndexWatchNeedsItsFunction(t *testing.T) {
	byIndex := Watch{Kind: configMapKind, Mapping: ByIndex("configmaps", IndexName, nil)}
	registerWatching(t, NewManifest("reloader", mirrorKind).Watch(byIndex), true)
	if message := panicOf(func() { IndexesExport() }); !strings.Contains(message, "ByIndex(\"configmaps\", ..., nil)") {
		t.Errorf("a nil function: panic %q", message)
	}
}

func TestAByIndexWatchNeedsTheIndexingWorld(t *testing.T) {
	values := func(*Object) ([]string, error) { return nil, nil }
	registerWatching(t, NewManifest("reloader", mirrorKind).Watch(Watch{Kind: configMapKind, Mapping: ByIndex("configmaps", IndexName, values)}), true)
	if message := panicOf(func() { exportedManifest() }); !strings.Contains(message, "indexing-controller") {
		t.Errorf("built without `indexes`: panic %q", message)
	}
}
