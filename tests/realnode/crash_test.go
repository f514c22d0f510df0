package realnode

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// TestCrashingVersionRollsBack offers a version whose web server exits at
// start (nginx rejects its configuration): its pod crash-loops on the
// kubelet, the operator's health gate rolls the app back after
// spec.upgradeTimeout, and the old pods answer every request throughout.
func TestCrashingVersionRollsBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := newNamespace(t)
	const name, channel, msg = "crash", "crash", "Still serving"
	const upgradeTimeout = 15 * time.Second
	stable, broken := testkit.ChannelVersion(t, "stable"), testkit.NewVersion(t, 3)
	testkit.CopyPackage(t, env.channels, stable, broken, testkit.MarkVersion(broken), rejectedNginxConfig)
	testkit.WriteChannel(t, env.channels, channel, stable)
	createApp(t, ns, name, webappv1.SimpleWebAppSpec{
		Replicas: ptr.To[int32](3), Message: msg, Channel: channel, UpgradeTimeout: &metav1.Duration{Duration: upgradeTimeout},
	})
	good := waitSettled(t, ns, name, 3)
	goodHash := good.pods[0].Labels["pod-template-hash"]
	testkit.WaitFor(t, timeout, "every pod serving the message", func(ctx context.Context) (bool, string) {
		return everyPodServes(ctx, good, msg)
	}, waitOpts(ns))

	load := startSteadyClient(ctx, good.serviceURL(), requestsPerSecond)
	offered := time.Now()
	testkit.WriteChannel(t, env.channels, channel, stable, broken)

	var crashed corev1.Pod
	testkit.WaitFor(t, timeout, "a pod of "+broken+" whose container exited with an error and was restarted", func(ctx context.Context) (bool, string) {
		a, err := observe(ctx, ns, name)
		if err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, p := range a.pods {
			if p.Labels["pod-template-hash"] == goodHash {
				continue
			}
			for _, c := range p.Status.ContainerStatuses {
				term := c.LastTerminationState.Terminated
				seen = append(seen, fmt.Sprintf("%s restarts %d last %+v state %+v", p.Name, c.RestartCount, term, c.State))
				if c.RestartCount >= 1 && term != nil && term.ExitCode != 0 {
					crashed = p
					return true, ""
				}
			}
		}
		return false, strings.Join(seen, "; ")
	}, waitOpts(ns))
	checkOnRealNode(t, []corev1.Pod{crashed})
	c := crashed.Status.ContainerStatuses[0]
	t.Logf("pod %s of %s: container %s exited with %d (%s), restarted %d times", crashed.Name, broken,
		c.ContainerID, c.LastTerminationState.Terminated.ExitCode, c.LastTerminationState.Terminated.Reason, c.RestartCount)
	testkit.WaitFor(t, timeout, "the kubelet's BackOff event for "+crashed.Name+" (CrashLoopBackOff)", func(ctx context.Context) (bool, string) {
		var evs corev1.EventList
		if err := env.C.List(ctx, &evs, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == crashed.Name {
				seen = append(seen, e.Reason+": "+e.Message)
				if e.Reason == "BackOff" && e.Source.Component == "kubelet" {
					return true, ""
				}
			}
		}
		return false, strings.Join(seen, "; ")
	}, waitOpts(ns))

	testkit.WaitFor(t, upgradeTimeout+timeout, "the rollback: status.version "+stable+" with failedUpgrade "+broken+", 3 Ready pods of the old template", func(ctx context.Context) (bool, string) {
		a, err := observe(ctx, ns, name)
		if err != nil {
			return false, err.Error()
		}
		st := a.swa.Status
		if st.Version != stable || st.FailedUpgrade == nil || st.FailedUpgrade.Version != broken {
			return false, fmt.Sprintf("status.version %q failedUpgrade %+v", st.Version, st.FailedUpgrade)
		}
		if len(a.pods) != 3 || len(a.readyPods()) != 3 {
			return false, fmt.Sprintf("%d pods, %d Ready", len(a.pods), len(a.readyPods()))
		}
		for _, p := range a.pods {
			if p.Labels["pod-template-hash"] != goodHash {
				return false, "pod " + p.Name + " is not of the old template " + goodHash
			}
		}
		return true, ""
	}, waitOpts(ns))
	res := load.stop()
	t.Logf("FIGURE realnode: crashing version offered, crash-looped and rolled back in %s (upgradeTimeout %s); requests through the ClusterIP meanwhile: %s",
		time.Since(offered).Round(time.Millisecond), upgradeTimeout, res)
	if len(res.failures) > 0 || len(res.bodies) != 1 || res.bodies[msg] == 0 {
		t.Errorf("want every request answered with %q while the version crashed and was rolled back: %s", msg, res)
	}
}

// rejectedNginxConfig is a testkit.Edit that makes a copied package the
// crashing version: nginx refuses its configuration and exits at start.
func rejectedNginxConfig(files map[string]string) error {
	if _, ok := files["nginx.conf"]; !ok {
		return fmt.Errorf("the package has no nginx.conf")
	}
	files["nginx.conf"] = "# A test version: nginx rejects this and exits.\nnot_a_directive on;\n"
	return nil
}
