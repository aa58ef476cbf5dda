// The controller-runtime baseline of the controller benchmark (host/benches/controller.rs): the
// controller a kubebuilder user would write instead of a guest — a manager, a cache, a
// reconciler for Widgets with MaxConcurrentReconciles workers, Status().Update — running the
// bench guest's status logic (guests/testing/bench/src/logic.rs), the same as the client-go
// baseline (tools/bench-client-go). Besides the workers and the client's rate, everything is left
// at controller-runtime's defaults, so its work queue is the priority queue (the default since
// v0.23): events from the initial list go in at low priority, so changes made meanwhile overtake
// the backlog.
//
// One main.go, built against each controller-runtime release the bench compares: go.mod pins
// v0.25, go.v0.23.mod v0.23 (build.sh picks one). With -read-your-writes (v0.25 on) the manager's
// client reads from its cache only once the cache has seen the client's own earlier writes: a Get
// those to the object, a List those to the kind (client.CacheOptions.
// EnableReadYourWritesConsistency, experimental).
//
// With -configmaps-metadata the controller also owns ConfigMaps with builder.OnlyMetadata:
// controller-runtime's metadata-only informer, the baseline of the host's metadata-only
// secondaries (host/benches/informers.rs).
//
// Usage: KUBECONFIG=... bench-controller-runtime -namespace NS [-workers 4] [-fifo] [-read-your-writes] [-configmaps-metadata]
// Prints "synced" on stdout once the caches have synced, then works until killed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	bw "reconciler-host.invalid/bench-widget"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// reconciler writes the desired status of the Widget it is given, from the cache.
type reconciler struct{ client client.Client }

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var widget bw.Widget
	if err := r.client.Get(ctx, req.NamespacedName, &widget); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	widget.Status = bw.DesiredStatus(&widget)
	return ctrl.Result{}, r.client.Status().Update(ctx, &widget)
}

func main() {
	namespace := flag.String("namespace", "", "namespace to watch")
	workers := flag.Int("workers", 4, "MaxConcurrentReconciles")
	fifo := flag.Bool("fifo", false, "client-go's FIFO work queue instead of the priority queue")
	consistent := flag.Bool("read-your-writes", false, "reads from the cache wait for the client's own writes (v0.25 on)")
	configMaps := flag.Bool("configmaps-metadata", false, "also own ConfigMaps, watched as metadata only")
	flag.Parse()
	// Errors only, to stderr: the bench reads stdout.
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))
	log := ctrl.Log.WithName("bench")

	scheme := runtime.NewScheme()
	bw.AddToScheme(scheme)
	if err := corev1.AddToScheme(scheme); err != nil {
		log.Error(err, "scheme")
		os.Exit(1)
	}

	options := ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	}
	if *namespace != "" {
		options.Cache = cache.Options{DefaultNamespaces: map[string]cache.Config{*namespace: {}}}
	}
	if *consistent {
		if err := readYourWrites(&options); err != nil {
			log.Error(err, "read-your-writes")
			os.Exit(2)
		}
	}
	config := ctrl.GetConfigOrDie()
	// As the client-go baseline: the limiter must not be what is measured.
	config.QPS, config.Burst = 2000, 4000
	mgr, err := ctrl.NewManager(config, options)
	if err != nil {
		log.Error(err, "manager")
		os.Exit(1)
	}
	controllerOptions := controller.Options{MaxConcurrentReconciles: *workers}
	if *fifo {
		controllerOptions.UsePriorityQueue = ptr.To(false)
	}
	b := ctrl.NewControllerManagedBy(mgr).For(&bw.Widget{}).WithOptions(controllerOptions)
	if *configMaps {
		b = b.Owns(&corev1.ConfigMap{}, builder.OnlyMetadata)
	}
	err = b.Complete(&reconciler{client: mgr.GetClient()})
	if err != nil {
		log.Error(err, "controller")
		os.Exit(1)
	}
	err = mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		// The Widget informer, the controller's own; blocks until it has synced.
		if _, err := mgr.GetCache().GetInformer(ctx, &bw.Widget{}); err != nil {
			return err
		}
		if *configMaps {
			// The metadata informer Owns started; blocks until it has synced.
			meta := &metav1.PartialObjectMetadata{}
			meta.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
			if _, err := mgr.GetCache().GetInformer(ctx, meta); err != nil {
				return err
			}
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
