package plugin

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
)

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
		next = forCreate(file)
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

// forCreate is what of file a create sends: `kubectl get -o yaml` of another
// cluster (or of a deleted object) carries fields the server sets and a
// create refuses (resourceVersion) or ignores (status).
func forCreate(file *webappv1.SimpleWebApp) *webappv1.SimpleWebApp {
	return &webappv1.SimpleWebApp{
		TypeMeta: file.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Namespace: file.Namespace, Name: file.Name,
			Labels: file.Labels, Annotations: file.Annotations, Finalizers: file.Finalizers},
		Spec: *file.Spec.DeepCopy(),
	}
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
