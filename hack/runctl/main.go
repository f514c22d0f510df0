// Command runctl does the cluster side of `make run` (hack/run.sh) with
// client-go: no kubectl, and nothing of the local control plane, is needed to
// run the operator against a given cluster.
//
//	runctl cluster                           check that the cluster answers /readyz; print its context and server
//	runctl setup -crds DIR -namespace NS -sample FILE
//	                                         server-side apply the CRDs and wait until they are established,
//	                                         server-side apply the namespace, apply the sample to default as
//	                                         `kubectl apply` does (a later `kubectl apply` of the updated sample
//	                                         patches it as usual)
//	runctl wait -name NAME [-timeout 120s]   wait until the SimpleWebApp NAME in default is Ready, then print it,
//	                                         its Deployments and pods as `kubectl get` does
//	runctl holder -namespace NS -name NAME   print the holder of a Lease ("" when none)
//	runctl fetch -service SVC -image IMG [-node NODE] [-timeout 60s]
//	                                         GET the Service SVC in default once from a pod of IMG (its -get mode)
//	                                         on NODE, and print the page
//
// The cluster is the current context of $KUBECONFIG (a list of files too), as
// for kubectl and the operator.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/jsonmergepatch"
	"k8s.io/apimachinery/pkg/util/mergepatch"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// crdManager is the field manager of `kubectl apply --server-side`, which
	// `make install` uses for the same CRD: either can update it later
	// without a conflict.
	crdManager = "kubectl"
	// runManager owns the namespace that make run creates.
	runManager = "simplewebapp-run"
	// clientSideApplyManager is kubectl's field manager of `kubectl apply`.
	clientSideApplyManager = "kubectl-client-side-apply"
)

var (
	crdGVR   = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	swaGVR   = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "simplewebapps"}
	leaseGVR = schema.GroupVersionResource{Group: "coordination.k8s.io", Version: "v1", Resource: "leases"}
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fl := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	var err error
	switch os.Args[1] {
	case "cluster":
		_ = fl.Parse(os.Args[2:])
		err = cluster(ctx)
	case "setup":
		crds := fl.String("crds", "", "directory of CustomResourceDefinition YAML files")
		ns := fl.String("namespace", "", "namespace to create")
		sample := fl.String("sample", "", "YAML file applied to namespace default")
		_ = fl.Parse(os.Args[2:])
		err = setup(ctx, *crds, *ns, *sample)
	case "wait":
		name := fl.String("name", "", "SimpleWebApp in namespace default")
		timeout := fl.Duration("timeout", 120*time.Second, "how long to wait for Ready")
		_ = fl.Parse(os.Args[2:])
		err = waitReady(ctx, *name, *timeout)
	case "holder":
		ns := fl.String("namespace", "", "the Lease's namespace")
		name := fl.String("name", "", "the Lease's name")
		_ = fl.Parse(os.Args[2:])
		err = holder(ctx, *ns, *name)
	case "fetch":
		svc := fl.String("service", "", "Service in namespace default")
		image := fl.String("image", "", "image whose entrypoint takes -get URL")
		node := fl.String("node", "", "node to run the pod on")
		timeout := fl.Duration("timeout", 60*time.Second, "how long the fetch may take")
		_ = fl.Parse(os.Args[2:])
		err = fetch(ctx, *svc, *image, *node, *timeout)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "runctl "+os.Args[1]+":", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: runctl cluster | setup -crds DIR -namespace NS -sample FILE | wait -name NAME [-timeout D] | holder -namespace NS -name NAME | fetch -service SVC -image IMG [-node NODE] [-timeout D]")
	os.Exit(2)
}

// load returns the client configuration of $KUBECONFIG's current context and
// that context's name.
func load() (*rest.Config, string, error) {
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(clientcmd.NewDefaultClientConfigLoadingRules(), &clientcmd.ConfigOverrides{})
	raw, err := cc.RawConfig()
	if err != nil {
		return nil, "", err
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	cfg.UserAgent = "simplewebapp-make-run"
	return cfg, raw.CurrentContext, nil
}

func clients() (*rest.Config, dynamic.Interface, *discovery.DiscoveryClient, error) {
	cfg, _, err := load()
	if err != nil {
		return nil, nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	return cfg, dyn, disc, err
}

// cluster prints "context NAME, server URL" when the API server of the
// current context answers /readyz within 10s.
func cluster(ctx context.Context) error {
	cfg, name, err := load()
	if err != nil {
		return err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := disc.RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); err != nil {
		return fmt.Errorf("context %s, server %s: /readyz: %w", name, cfg.Host, err)
	}
	fmt.Printf("context %s, server %s\n", name, cfg.Host)
	return nil
}

func setup(ctx context.Context, crdDir, ns, sample string) error {
	if crdDir == "" || ns == "" || sample == "" {
		return errors.New("-crds, -namespace and -sample are required")
	}
	_, dyn, disc, err := clients()
	if err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		return fmt.Errorf("no CRD in %s (%v)", crdDir, err)
	}
	var crds []*unstructured.Unstructured
	for _, f := range files {
		objs, err := readYAML(f)
		if err != nil {
			return err
		}
		crds = append(crds, objs...)
	}
	for _, crd := range crds {
		if crd.GetKind() != "CustomResourceDefinition" {
			return fmt.Errorf("%s/%s in %s is not a CustomResourceDefinition", crd.GetKind(), crd.GetName(), crdDir)
		}
		if _, err := dyn.Resource(crdGVR).Apply(ctx, crd.GetName(), crd, metav1.ApplyOptions{FieldManager: crdManager}); err != nil {
			return fmt.Errorf("applying CustomResourceDefinition %s: %w", crd.GetName(), err)
		}
	}
	for _, crd := range crds {
		if err := waitEstablished(ctx, dyn, crd.GetName(), time.Minute); err != nil {
			return err
		}
	}

	nsObj := &unstructured.Unstructured{}
	nsObj.SetAPIVersion("v1")
	nsObj.SetKind("Namespace")
	nsObj.SetName(ns)
	if _, err := dyn.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).Apply(ctx, ns, nsObj, metav1.ApplyOptions{FieldManager: runManager}); err != nil {
		return fmt.Errorf("applying namespace %s: %w", ns, err)
	}

	objs, err := readYAML(sample)
	if err != nil {
		return err
	}
	// The CRDs just became established: discovery may take a moment to
	// serve their resources.
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		var mapping *meta.RESTMapping
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			var err error
			if mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); meta.IsNoMatchError(err) {
				mapper.Reset()
				return false, nil
			}
			return err == nil, err
		})
		if err != nil {
			return fmt.Errorf("%s: no resource for %s: %w", sample, gvk, err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(metav1.NamespaceDefault)
			}
			ri = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		result, err := clientSideApply(ctx, ri, obj)
		if err != nil {
			return fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		fmt.Printf("%s/%s %s\n", strings.ToLower(gvk.GroupKind().String()), obj.GetName(), result)
	}
	return nil
}

func waitEstablished(ctx context.Context, dyn dynamic.Interface, name string, timeout time.Duration) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		crd, err := dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return conditionTrue(crd, "Established"), nil
	})
	if err != nil {
		return fmt.Errorf("CustomResourceDefinition %s not established within %s: %w", name, timeout, err)
	}
	return nil
}

// clientSideApply does what `kubectl apply` (client-side) does for an object
// without a Go type: create it with the last-applied-configuration
// annotation, or patch it with the three-way JSON merge patch of the last
// applied configuration, obj and the live object. It returns kubectl's word
// for the result.
func clientSideApply(ctx context.Context, ri dynamic.ResourceInterface, obj *unstructured.Unstructured) (string, error) {
	obj = obj.DeepCopy()
	annotations := obj.GetAnnotations()
	delete(annotations, corev1.LastAppliedConfigAnnotation)
	obj.SetAnnotations(annotations)
	applied, err := runtime.Encode(unstructured.UnstructuredJSONScheme, obj)
	if err != nil {
		return "", err
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[corev1.LastAppliedConfigAnnotation] = string(applied)
	obj.SetAnnotations(annotations)

	live, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if _, err := ri.Create(ctx, obj, metav1.CreateOptions{FieldManager: clientSideApplyManager}); err != nil {
			return "", err
		}
		return "created", nil
	}
	if err != nil {
		return "", err
	}
	modified, err := runtime.Encode(unstructured.UnstructuredJSONScheme, obj)
	if err != nil {
		return "", err
	}
	current, err := runtime.Encode(unstructured.UnstructuredJSONScheme, live)
	if err != nil {
		return "", err
	}
	original := []byte(live.GetAnnotations()[corev1.LastAppliedConfigAnnotation])
	patch, err := jsonmergepatch.CreateThreeWayJSONMergePatch(original, modified, current,
		mergepatch.RequireKeyUnchanged("apiVersion"), mergepatch.RequireKeyUnchanged("kind"), mergepatch.RequireMetadataKeyUnchanged("name"))
	if err != nil {
		return "", err
	}
	if string(patch) == "{}" {
		return "unchanged", nil
	}
	if _, err := ri.Patch(ctx, obj.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: clientSideApplyManager}); err != nil {
		return "", err
	}
	return "configured", nil
}

// waitReady waits, like `kubectl wait --for=condition=Ready`, until the
// SimpleWebApp's Ready condition is True for its current generation, then
// prints it, its Deployments and its pods.
func waitReady(ctx context.Context, name string, timeout time.Duration) error {
	if name == "" {
		return errors.New("-name is required")
	}
	_, dyn, disc, err := clients()
	if err != nil {
		return err
	}
	var last *unstructured.Unstructured
	var lastErr error
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		swa, err := dyn.Resource(swaGVR).Namespace(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			lastErr = err // transient, or not there yet: the deadline says
			return false, nil
		}
		last = swa
		return conditionTrue(swa, "Ready"), nil
	})
	if err != nil {
		msg := fmt.Sprintf("last error: %v", lastErr)
		if last != nil {
			conds, _, _ := unstructured.NestedSlice(last.Object, "status", "conditions")
			b, _ := json.Marshal(conds)
			msg = "conditions " + string(b)
		}
		return fmt.Errorf("SimpleWebApp default/%s not Ready within %s (%s): %w", name, timeout, msg, err)
	}
	fmt.Printf("simplewebapp.example.com/%s condition met\n", name)

	rc := disc.RESTClient()
	sel := "app.kubernetes.io/instance=" + name
	for _, path := range []struct{ path, selector string }{
		{"/apis/example.com/v1/namespaces/default/simplewebapps/" + name, ""},
		{"/apis/apps/v1/namespaces/default/deployments", sel},
		{"/api/v1/namespaces/default/pods", sel},
	} {
		if err := printTable(ctx, os.Stdout, rc, path.path, path.selector); err != nil {
			fmt.Fprintf(os.Stderr, "runctl wait: %s: %v\n", path.path, err)
		}
	}
	return nil
}

// conditionTrue says whether obj has the condition with status True and,
// when the condition records one, for obj's generation.
func conditionTrue(obj *unstructured.Unstructured, typ string) bool {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if !ok || m["type"] != typ {
			continue
		}
		if g, ok, _ := unstructured.NestedInt64(m, "observedGeneration"); ok && g != obj.GetGeneration() {
			return false
		}
		return m["status"] == "True"
	}
	return false
}

// printTable prints the API server's table of path (what `kubectl get`
// prints: the columns of priority 0, ages relative to now).
func printTable(ctx context.Context, w io.Writer, rc rest.Interface, path, selector string) error {
	req := rc.Get().AbsPath(path).SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
	if selector != "" {
		req = req.Param("labelSelector", selector)
	}
	raw, err := req.DoRaw(ctx)
	if err != nil {
		return err
	}
	var table metav1.Table
	if err := json.Unmarshal(raw, &table); err != nil {
		return err
	}
	if len(table.Rows) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 6, 4, 3, ' ', 0)
	var cols []int
	var header []string
	for i, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			cols = append(cols, i)
			header = append(header, strings.ToUpper(c.Name))
		}
	}
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, row := range table.Rows {
		var cells []string
		for _, i := range cols {
			cells = append(cells, cell(table.ColumnDefinitions[i], row.Cells[i]))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(w)
	return err
}

func cell(col metav1.TableColumnDefinition, v any) string {
	switch v := v.(type) {
	case nil:
		return "<none>"
	case string:
		if col.Type == "date" {
			if t, err := time.Parse(time.RFC3339, v); err == nil {
				return duration.HumanDuration(time.Since(t))
			}
		}
		if v == "" {
			return "<none>"
		}
		return v
	default:
		return fmt.Sprint(v)
	}
}

func holder(ctx context.Context, ns, name string) error {
	if ns == "" || name == "" {
		return errors.New("-namespace and -name are required")
	}
	_, dyn, _, err := clients()
	if err != nil {
		return err
	}
	lease, err := dyn.Resource(leaseGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	h, _, _ := unstructured.NestedString(lease.Object, "spec", "holderIdentity")
	fmt.Println(h)
	return nil
}

// readYAML returns the objects of a (multi-document) YAML file.
func readYAML(path string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}
