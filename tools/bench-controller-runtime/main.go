// The controller-runtime baseline of the controller benchmark (host/benches/controller.rs): the
// controller a kubebuilder user would write instead of a guest — a manager, a cache, a
// reconciler for Widgets with MaxConcurrentReconciles workers, Status().Update — running the
// bench guest's status logic (guests/testing/bench/src/logic.rs), the same as the client-go
// baseline (tools/bench-client-go). Its work queue is controller-runtime's priority queue
// (the default since v0.23, set explicitly here): events from the initial list go in at low
// priority, so changes made meanwhile overtake the backlog.
//
// Usage: KUBECONFIG=... bench-controller-runtime -namespace NS [-workers 4] [-fifo]
// Prints "synced" on stdout once the cache has synced, then works until killed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"go.uber.org/zap/zapcore"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

var groupVersion = schema.GroupVersion{Group: "test.reconciler.dev", Version: "v1"}

// Widget is the bench's kind (guests/testing/widget/crd.yaml), with the fields the bench fills.
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

// The deep copies controller-gen would generate.
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

// desiredStatus is logic.rs's status_patch: observed generation, item count, a Ready condition.
func desiredStatus(w *Widget) *WidgetStatus {
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

// reconciler writes the desired status of the Widget it is given, from the cache.
type reconciler struct{ client client.Client }

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var widget Widget
	if err := r.client.Get(ctx, req.NamespacedName, &widget); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	widget.Status = desiredStatus(&widget)
	return ctrl.Result{}, r.client.Status().Update(ctx, &widget)
}

func main() {
	namespace := flag.String("namespace", "", "namespace to watch")
	workers := flag.Int("workers", 4, "MaxConcurrentReconciles")
	fifo := flag.Bool("fifo", false, "client-go's FIFO work queue instead of the priority queue")
	flag.Parse()
	// Errors only, to stderr: the bench reads stdout.
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	log := ctrl.Log.WithName("bench")

	scheme := runtime.NewScheme()
	scheme.AddKnownTypes(groupVersion, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(scheme, groupVersion)

	config := ctrl.GetConfigOrDie()
	// As the client-go baseline: the limiter must not be what is measured.
	config.QPS, config.Burst = 500, 1000
	options := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}
	if *namespace != "" {
		options.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}}
	}
	mgr, err := ctrl.NewManager(config, options)
	if err != nil {
		log.Error(err, "manager")
		os.Exit(1)
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&Widget{}).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: *workers,
			UsePriorityQueue:        ptr.To(!*fifo),
		}).
		Complete(&reconciler{client: mgr.GetClient()})
	if err != nil {
		log.Error(err, "controller")
		os.Exit(1)
	}
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		// The Widget informer, the controller's own; blocks until it has synced.
		if _, err := mgr.GetCache().GetInformer(ctx, &Widget{}); err != nil {
			return err
		}
		fmt.Println("synced")
		<-ctx.Done()
		return nil
	}))
	if err != nil {
		log.Error(err, "runnable")
		os.Exit(1)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		log.Error(err, "run")
		os.Exit(1)
	}
}
