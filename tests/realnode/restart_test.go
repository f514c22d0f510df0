package realnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// TestKilledContainerAndDeletedPodComeBack kills a web server's processes on
// the host: the kubelet restarts the container in the same pod. Then it
// deletes a pod: the ReplicaSet replaces it. Each time the app serves again
// from every pod.
func TestKilledContainerAndDeletedPodComeBack(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	const name, msg = "restart", "Back again"
	createApp(t, ns, name, webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](3), Message: msg})
	a := waitSettled(t, ns, name, 3)

	victim := a.readyPods()[0]
	before := victim.Status.ContainerStatuses[0]
	pids, err := containerPIDs(before.ContainerID)
	if err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := kill(pids); err != nil {
		t.Fatalf("killing container %s (pids %v): %v", before.ContainerID, pids, err)
	}
	testkit.WaitFor(t, timeout, fmt.Sprintf("pod %s's container restarted by the kubelet, Ready, serving", victim.Name), func(ctx context.Context) (bool, string) {
		var p corev1.Pod
		if err := env.C.Get(ctx, client.ObjectKeyFromObject(&victim), &p); err != nil {
			return false, err.Error()
		}
		c := p.Status.ContainerStatuses[0]
		if c.RestartCount <= before.RestartCount || c.ContainerID == before.ContainerID || !podReady(p) {
			return false, fmt.Sprintf("restarts %d (was %d), container %s, ready %t", c.RestartCount, before.RestartCount, c.ContainerID, podReady(p))
		}
		body, err := get(ctx, podURL(p))
		return err == nil && trim(body) == msg, fmt.Sprintf("serves %q %v", body, err)
	}, waitOpts(ns))
	t.Logf("FIGURE realnode: %d processes of a container SIGKILLed on the host to the pod serving again: %s", len(pids), time.Since(killed).Round(time.Millisecond))

	gone := a.readyPods()[1]
	deleted := time.Now()
	if err := env.C.Delete(t.Context(), &gone); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, timeout, "pod "+gone.Name+" replaced, 3 pods serving", func(ctx context.Context) (bool, string) {
		var err error
		if a, err = observe(ctx, ns, name); err != nil {
			return false, err.Error()
		}
		for _, p := range a.pods {
			if p.Name == gone.Name {
				return false, "the deleted pod is still there"
			}
		}
		if done, seen := a.settled(3); !done {
			return false, seen
		}
		return everyPodServes(ctx, a, msg)
	}, waitOpts(ns))
	checkOnRealNode(t, a.pods)
	t.Logf("FIGURE realnode: deleted pod replaced and serving in %s", time.Since(deleted).Round(time.Millisecond))
	body, err := get(t.Context(), a.serviceURL())
	if err != nil || trim(body) != msg {
		t.Errorf("the Service answered %q (%v), want %q", body, err, msg)
	}
}
