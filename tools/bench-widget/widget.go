// Package benchwidget is the controller benchmark's kind for its Go baselines
// (tools/bench-client-go, tools/bench-controller-runtime): the Widget type as the bench fills it
// (guests/testing/widget/crd.yaml), the deep copies code generation would write, and the bench
// guest's status logic (guests/testing/bench/src/logic.rs), so both baselines run the same code.
package benchwidget

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion of the Widget kind.
var GroupVersion = schema.GroupVersion{Group: "test.reconciler.dev", Version: "v1"}

// AddToScheme registers Widget and WidgetList.
func AddToScheme(scheme *runtime.Scheme) {
	scheme.AddKnownTypes(GroupVersion, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(scheme, GroupVersion)
}

// Widget is the bench's kind, with the fields the bench fills.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec    `json:"spec"`
	Status            *WidgetStatus `json:"status,omitempty"`
}

type WidgetSpec struct {
	Items   []string `json:"items,omitempty"`
	Message string   `json:"message,omitempty"`
}

// WidgetStatus is what logic.rs writes.
type WidgetStatus struct {
	ObservedGeneration int64       `json:"observedGeneration"`
	Items              int         `json:"items"`
	Conditions         []Condition `json:"conditions"`
}

type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason"`
	Message            string `json:"message"`
	ObservedGeneration int64  `json:"observedGeneration"`
}

type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}

func (in *Widget) DeepCopy() *Widget {
	out := &Widget{TypeMeta: in.TypeMeta}
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Message = in.Spec.Message
	out.Spec.Items = append([]string(nil), in.Spec.Items...)
	if in.Status != nil {
		status := *in.Status
		status.Conditions = append([]Condition(nil), in.Status.Conditions...)
		out.Status = &status
	}
	return out
}

func (in *Widget) DeepCopyObject() runtime.Object { return in.DeepCopy() }

func (in *WidgetList) DeepCopyObject() runtime.Object {
	out := &WidgetList{TypeMeta: in.TypeMeta}
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	out.Items = make([]Widget, len(in.Items))
	for i := range in.Items {
		out.Items[i] = *in.Items[i].DeepCopy()
	}
	return out
}

// DesiredStatus is logic.rs's status_patch: observed generation, item count, a Ready condition.
func DesiredStatus(w *Widget) *WidgetStatus {
	items := len(w.Spec.Items)
	return &WidgetStatus{
		ObservedGeneration: w.Generation,
		Items:              items,
		Conditions: []Condition{{
			Type:               "Ready",
			Status:             "True",
			Reason:             "Synced",
			Message:            fmt.Sprintf("%s has %d items", w.Name, items),
			ObservedGeneration: w.Generation,
		}},
	}
}
