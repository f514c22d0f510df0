package plugin

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
)

// connect returns a client for the kubeconfig's cluster and the namespace of
// its context ("default" if it names none), as kubectl reads them.
func (c *common) connect() (client.Client, string, error) {
	cl, _, ns, err := c.connectDynamic()
	return cl, ns, err
}

// connectDynamic is connect plus a dynamic client, which writes objects
// the way the operator's Applier does.
func (c *common) connectDynamic() (client.Client, dynamic.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if c.kubeconfig != "" {
		rules.ExplicitPath = c.kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: c.context})
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, nil, "", err
	}
	ns, _, err := cc.Namespace()
	if err != nil {
		return nil, nil, "", err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, nil, "", err
	}
	if err := webappv1.AddToScheme(scheme); err != nil {
		return nil, nil, "", err
	}
	cl, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, nil, "", err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	return cl, dyn, ns, err
}

// dryRunSimpleWebApp returns the live SimpleWebApp of file (nil if none) and
// what the API server would store if file's spec were applied: defaults,
// validation and the next generation, with the live status, which decides
// the version the reconciler picks. Nothing is written.
func dryRunSimpleWebApp(ctx context.Context, cl client.Client, file *webappv1.SimpleWebApp) (live, next *webappv1.SimpleWebApp, err error) {
	live = &webappv1.SimpleWebApp{}
	err = cl.Get(ctx, client.ObjectKeyFromObject(file), live)
	switch {
	case apierrors.IsNotFound(err):
		live = nil
		next = file.DeepCopy()
		err = cl.Create(ctx, next, client.DryRunAll)
	case err != nil:
		return nil, nil, err
	default:
		next = live.DeepCopy()
		next.Spec = file.Spec
		next.Labels = mergeMaps(next.Labels, file.Labels)
		next.Annotations = mergeMaps(next.Annotations, file.Annotations)
		err = cl.Update(ctx, next, client.DryRunAll)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("the API server refuses the SimpleWebApp: %w", err)
	}
	if next.UID == "" {
		// Not created yet: the owner references of the children need one.
		next.UID = types.UID("00000000-0000-0000-0000-000000000000")
	}
	return live, next, nil
}

// targetRelease is the version the reconciler applies for swa (its spec and
// status), and why: resolved from the channels (withdrawn versions
// skipped), or the last healthy version when the resolved one was rolled
// back for this generation and channel.
func targetRelease(ctx context.Context, src render.Channels, swa *webappv1.SimpleWebApp) (render.Release, string, error) {
	rel, err := src.ResolveApp(ctx, swa)
	if err != nil {
		return rel, "", err
	}
	why := "pinned by spec.version"
	if rel.Channel != "" {
		why = fmt.Sprintf("newest in channel %q", rel.Channel)
	}
	if w := rel.Withdrawn; w != nil {
		why += fmt.Sprintf("; withdrawn (%s), kept only because it runs already", w.Reason)
	}
	if !render.HeldBack(swa, rel) {
		return rel, why, nil
	}
	back, err := src.Resolve(ctx, webappv1.SimpleWebAppSpec{Version: swa.Status.LastHealthyVersion})
	if err != nil {
		return back, "", err
	}
	back.Channel, back.ChannelRevision = rel.Channel, rel.ChannelRevision
	fu := swa.Status.FailedUpgrade
	return back, fmt.Sprintf("%s, but %s was rolled back (%s) and is held back until the spec or the channel changes", why, rel.Version, fu.Message), nil
}

func mergeMaps(dst, src map[string]string) map[string]string {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = map[string]string{}
	}
	for k, v := range src {
		dst[k] = v
	}
	return dst
}
