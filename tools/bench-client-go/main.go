// The client-go baseline of the controller benchmark (host/benches/controller.rs): the controller
// a Kubernetes user would write instead of a guest, in the shape of client-go's
// sample-controller — a shared informer with a namespace index, a lister over its cache, a
// rate-limited work queue, N workers, and UpdateStatus — running the bench guest's status logic
// (guests/testing/bench/src/logic.rs) on test.reconciler.dev/v1 Widgets.
//
// sample-controller gets its typed client, informer factory and lister from code generation;
// this file and tools/bench-widget (the Widget type, its deep copy) write the same pieces by hand
// for one kind, with a REST client for its group, which is what the generated code amounts to.
// Objects are cached as typed structs, as sample-controller caches its Foos.
//
// With -configmaps it also caches the namespace's ConfigMaps through the factory's typed
// ConfigMap informer (full objects), as a controller that owns ConfigMaps does: the baseline of
// the host's metadata-only secondaries (host/benches/informers.rs).
//
// Usage: KUBECONFIG=... bench-client-go -namespace NS [-workers 4] [-strip-managed-fields] [-configmaps]
// Prints "synced" on stdout once the caches have synced, then works until killed.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/listers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	bw "reconciler-host.invalid/bench-widget"
)

var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	bw.AddToScheme(scheme)
}

// Controller is sample-controller's Controller, for Widgets.
type Controller struct {
	client    rest.Interface
	lister    listers.ResourceIndexer[*bw.Widget]
	synced    cache.InformerSynced
	workqueue workqueue.TypedRateLimitingInterface[cache.ObjectName]
}

func NewController(client rest.Interface, factory informers.SharedInformerFactory, namespace string, stripManagedFields bool) *Controller {
	// What a generated factory's Widgets().Informer() does: one shared informer per type, made
	// through InformerFor, listing and watching with the typed client, indexed by namespace.
	// (The factory's own clientset goes unused: the Widget informer closes over its client.)
	informer := factory.InformerFor(&bw.Widget{}, func(_ kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		lw := cache.NewListWatchFromClient(client, "widgets", namespace, fields.Everything())
		informer := cache.NewSharedIndexInformer(lw, &bw.Widget{}, resync,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		if stripManagedFields {
			// Not what sample-controller does: controller-runtime's TransformStripManagedFields,
			// which the memory bench reports beside the default because the host drops them too.
			_ = informer.SetTransform(func(obj interface{}) (interface{}, error) {
				if accessor, err := meta.Accessor(obj); err == nil {
					accessor.SetManagedFields(nil)
				}
				return obj, nil
			})
		}
		return informer
	})
	c := &Controller{
		client: client,
		lister: listers.New[*bw.Widget](informer.GetIndexer(), schema.GroupResource{Group: bw.GroupVersion.Group, Resource: "widgets"}),
		synced: informer.HasSynced,
		workqueue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "Widgets"},
		),
	}
	_, _ = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj interface{}) { c.enqueue(obj) },
	})
	return c
}

func (c *Controller) enqueue(obj interface{}) {
	if name, err := cache.ObjectToName(obj); err != nil {
		utilruntime.HandleError(err)
	} else {
		c.workqueue.Add(name)
	}
}

// Run waits for the caches (its own and `others`), then starts the workers; it blocks until
// ctx is done.
func (c *Controller) Run(ctx context.Context, workers int, others ...cache.InformerSynced) error {
	defer utilruntime.HandleCrash()
	defer c.workqueue.ShutDown()
	if ok := cache.WaitForCacheSync(ctx.Done(), append([]cache.InformerSynced{c.synced}, others...)...); !ok {
		return fmt.Errorf("failed to wait for caches to sync")
	}
	fmt.Println("synced")
	for i := 0; i < workers; i++ {
		go wait.UntilWithContext(ctx, c.runWorker, time.Second)
	}
	<-ctx.Done()
	return nil
}

func (c *Controller) runWorker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	name, shutdown := c.workqueue.Get()
	if shutdown {
		return false
	}
	defer c.workqueue.Done(name)
	if err := c.syncHandler(ctx, name); err != nil {
		// Retried with per-item exponential backoff under an overall token bucket.
		c.workqueue.AddRateLimited(name)
		utilruntime.HandleErrorWithContext(ctx, err, "Error syncing", "objectReference", name)
		return true
	}
	// Success: forget the key's failures so its next error starts from the shortest backoff.
	c.workqueue.Forget(name)
	return true
}

func (c *Controller) syncHandler(ctx context.Context, name cache.ObjectName) error {
	widget, err := listers.NewNamespaced(c.lister, name.Namespace).Get(name.Name)
	if errors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	// Never mutate the cache: copy, then write the copy.
	updated := widget.DeepCopy()
	updated.Status = bw.DesiredStatus(widget)
	return c.client.Put().
		Namespace(name.Namespace).
		Resource("widgets").
		Name(name.Name).
		SubResource("status").
		Body(updated).
		Do(ctx).
		Error()
}

func main() {
	klog.InitFlags(nil)
	namespace := flag.String("namespace", "", "namespace to watch (empty: all)")
	workers := flag.Int("workers", 4, "workers")
	strip := flag.Bool("strip-managed-fields", false, "drop metadata.managedFields from cached objects (a cache transform)")
	configMaps := flag.Bool("configmaps", false, "also cache the namespace's ConfigMaps (typed, full objects)")
	flag.Parse()

	config, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KUBECONFIG"))
	if err != nil {
		klog.Fatalf("kubeconfig: %v", err)
	}
	// The default of 5 requests/s would make this a benchmark of the limiter; the host's
	// default per-guest write rate is 2000/s, so the same here.
	config.QPS, config.Burst = 2000, 4000
	clientset, err := kubernetes.NewForConfig(rest.CopyConfig(config))
	if err != nil {
		klog.Fatalf("clientset: %v", err)
	}
	config.GroupVersion = &bw.GroupVersion
	config.APIPath = "/apis"
	config.ContentType = runtime.ContentTypeJSON
	config.NegotiatedSerializer = codecs.WithoutConversion()
	client, err := rest.RESTClientFor(config)
	if err != nil {
		klog.Fatalf("client: %v", err)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	factory := informers.NewSharedInformerFactoryWithOptions(clientset, 0, informers.WithNamespace(*namespace))
	controller := NewController(client, factory, *namespace, *strip)
	var others []cache.InformerSynced
	if *configMaps {
		others = append(others, factory.Core().V1().ConfigMaps().Informer().HasSynced)
	}
	factory.Start(ctx.Done())
	if err := controller.Run(ctx, *workers, others...); err != nil {
		klog.Fatalf("run: %v", err)
	}
}
