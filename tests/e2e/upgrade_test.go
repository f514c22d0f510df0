package e2e

// Versions delivered at run time through the operator's --channels-dir:
// a channel moving to a new version upgrades the apps that follow it, a
// version that never becomes Ready is rolled back by the operator while the
// old pods keep serving, pinned apps stay where they are, and a malformed
// channel file stalls its apps without touching what runs. Each test has its
// own namespace and its own channel, so they run in parallel.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// brokenVersion is a package version written by TestBrokenVersionRollsBack:
// 1.1.0 with neverReadyLabel on its pod template.
const brokenVersion = "1.2.0"

// TestChannelUpgrade moves a channel from 1.0.0 to 1.1.0 while an app follows
// it: the operator upgrades the app without a restart, the pods roll to the
// new template, the PodDisruptionBudget of 1.1.0 appears, and Ready is never
// True while the Deployment is rolling.
func TestChannelUpgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := restrictedNamespace(t, ctx)
	const name, channel = "upgrade", "upgrade"
	dep := name + "-web"
	diag := diagFor(ns)

	// Only the channel file: both versions come from the embedded packages.
	writeChannel(t, channel, "1.0.0")
	createApp(t, ctx, ns, name, webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](3), Channel: channel})
	before := waitSettled(t, ns, name, 3, "1.0.0", diag)
	if st := before.swa.Status; st.LastHealthyVersion != "1.0.0" || st.Channel != channel {
		t.Errorf("status lastHealthyVersion %q channel %q, want 1.0.0 and %s", st.LastHealthyVersion, st.Channel, channel)
	}
	if pdb, err := getPDB(ctx, ns, dep); !apierrors.IsNotFound(err) {
		t.Errorf("1.0.0 has no PodDisruptionBudget, found %v (err %v)", pdb, err)
	}

	honesty := &readyHonesty{ns: ns, name: name, dep: dep}
	samples := startSampler(ctx, 50*time.Millisecond, honesty.sample)
	written := time.Now()
	writeChannel(t, channel, "1.0.0", "1.1.0")
	pickup := waitFor(t, 30*time.Second, "status.version 1.1.0: the channel change picked up and applied", diag, func(ctx context.Context) (bool, string) {
		var swa webappv1.SimpleWebApp
		if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &swa); err != nil {
			return false, err.Error()
		}
		return swa.Status.Version == "1.1.0", fmt.Sprintf("status.version %q, upgrade %+v", swa.Status.Version, swa.Status.Upgrade)
	})
	t.Logf("channel change picked up: 1.1.0 applied %s after the channel file was written (poll interval %s)", pickup.Round(time.Millisecond), channelsPollInterval)
	after := waitSettled(t, ns, name, 3, "1.1.0", diag)
	t.Logf("upgrade 1.0.0 -> 1.1.0 of 3 pods: Ready again %s after the channel file was written", time.Since(written).Round(time.Millisecond))
	samples.stop()
	honesty.check(t)
	if honesty.readyNotTrue == 0 {
		t.Errorf("no sample saw Ready other than True: the samples missed the roll-out (%s)", honesty)
	}

	st := after.swa.Status
	if st.LastHealthyVersion != "1.1.0" || st.Upgrade != nil || st.FailedUpgrade != nil || st.Channel != channel {
		t.Errorf("status lastHealthyVersion %q upgrade %+v failedUpgrade %+v channel %q, want 1.1.0, none, none, %s",
			st.LastHealthyVersion, st.Upgrade, st.FailedUpgrade, st.Channel, channel)
	}
	if after.newestHash() == before.newestHash() {
		t.Errorf("pod template hash %q unchanged: 1.1.0 did not roll the pods", after.newestHash())
	}
	for _, p := range after.pods {
		if len(p.Spec.TopologySpreadConstraints) == 0 {
			t.Errorf("pod %s (template %s) has no topologySpreadConstraints", p.Name, p.Labels[appsv1.DefaultDeploymentUniqueLabelKey])
		}
	}
	t.Logf("pods rolled from template %s to %s: %v", before.newestHash(), after.newestHash(), podNames(after.pods))
	pdb, err := getPDB(ctx, ns, dep)
	if err != nil {
		t.Fatalf("1.1.0 with 3 replicas: PodDisruptionBudget %s: %v\n%s", dep, err, diag())
	}
	if ref := metav1.GetControllerOf(pdb); ref == nil || ref.UID != after.swa.UID {
		t.Errorf("PodDisruptionBudget %s controller reference %+v, want the SimpleWebApp (uid %s)", dep, ref, after.swa.UID)
	}
	if mu := pdb.Spec.MaxUnavailable; mu == nil || *mu != intstr.FromInt32(1) || pdb.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] != name {
		t.Errorf("PodDisruptionBudget %s: maxUnavailable %v selector %v, want 1 and this instance's pods", dep, mu, pdb.Spec.Selector)
	}
	waitEvents(t, ns, after.swa.UID, corev1.EventTypeNormal, "Upgrading", 1, diag)
	n, seen, err := operatorEvents(ctx, ns, after.swa.UID, corev1.EventTypeNormal, "Upgrading")
	if err != nil || n != 1 || !strings.Contains(seen, "upgrading from 1.0.0 to 1.1.0") {
		t.Errorf("want one Upgrading event from 1.0.0 to 1.1.0 (err %v): %s", err, seen)
	}
}

// TestBrokenVersionRollsBack offers a version whose pods never become Ready:
// the operator applies it, gives up after spec.upgradeTimeout and goes back
// to the last healthy version by itself, while the old pods keep serving. It
// does not try that version again until the spec changes.
func TestBrokenVersionRollsBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := restrictedNamespace(t, ctx)
	const name, channel = "broken", "broken"
	const upgradeTimeout = 10 * time.Second
	dep := name + "-web"
	diag := diagFor(ns)

	writePackage(t, "1.1.0", brokenVersion, neverReadyPackage)
	writeChannel(t, channel, "1.0.0")
	createApp(t, ctx, ns, name, webappv1.SimpleWebAppSpec{
		Replicas: ptr.To[int32](3), Channel: channel, UpgradeTimeout: &metav1.Duration{Duration: upgradeTimeout},
	})
	good := waitSettled(t, ns, name, 3, "1.0.0", diag)
	uid := good.swa.UID
	sel, err := metav1.LabelSelectorAsSelector(good.dep.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}

	// From before the channel change until the rollback is complete.
	serving := &servingProbe{ns: ns, selector: sel, goodHash: good.newestHash(), goodRS: good.newestRS.Name, want: 3}
	honesty := &readyHonesty{ns: ns, name: name, dep: dep}
	samples := startSampler(ctx, 100*time.Millisecond, func(ctx context.Context) {
		serving.sample(ctx)
		honesty.sample(ctx)
	})

	written := time.Now()
	writeChannel(t, channel, "1.0.0", brokenVersion)
	var upgrade webappv1.UpgradeStatus
	pickup := waitFor(t, 30*time.Second, "status.version "+brokenVersion+" and status.upgrade from 1.0.0 to "+brokenVersion, diag,
		func(ctx context.Context) (bool, string) {
			var swa webappv1.SimpleWebApp
			if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &swa); err != nil {
				return false, err.Error()
			}
			st := swa.Status
			if st.Version != brokenVersion || st.Upgrade == nil {
				return false, fmt.Sprintf("status.version %q upgrade %+v failedUpgrade %+v", st.Version, st.Upgrade, st.FailedUpgrade)
			}
			upgrade = *st.Upgrade
			return true, ""
		})
	upgradeSeen := time.Now()
	t.Logf("channel change picked up: %s applied, upgrade %s -> %s started at %s, %s after the channel file was written",
		brokenVersion, upgrade.From, upgrade.To, upgrade.StartedAt.UTC().Format(time.RFC3339), pickup.Round(time.Millisecond))
	if upgrade.From != "1.0.0" || upgrade.To != brokenVersion {
		t.Errorf("status.upgrade %+v, want from 1.0.0 to %s", upgrade, brokenVersion)
	}
	waitEvents(t, ns, uid, corev1.EventTypeNormal, "Upgrading", 1, diag)
	waitFor(t, 30*time.Second, "a pod of "+brokenVersion+" (label "+neverReadyLabel+") Running and not Ready", diag, func(ctx context.Context) (bool, string) {
		var pods corev1.PodList
		if err := env.C.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{neverReadyLabel: "true"}); err != nil {
			return false, err.Error()
		}
		var seen []string
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning && !podReady(p) {
				return true, ""
			}
			seen = append(seen, fmt.Sprintf("%s %s ready=%t", p.Name, p.Status.Phase, podReady(p)))
		}
		return false, fmt.Sprintf("pods with the label: %v", seen)
	})

	var rolledBack webappv1.SimpleWebApp
	waitFor(t, upgradeTimeout+30*time.Second, "the operator rolling back by itself: status.version 1.0.0, failedUpgrade.version "+brokenVersion+
		", Ready=False and Stalled=True with reason RolledBack", diag, func(ctx context.Context) (bool, string) {
		if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &rolledBack); err != nil {
			return false, err.Error()
		}
		st := rolledBack.Status
		ready, stalled := condition(&rolledBack, webappv1.ConditionReady), condition(&rolledBack, webappv1.ConditionStalled)
		done := st.Version == "1.0.0" && st.FailedUpgrade != nil && st.FailedUpgrade.Version == brokenVersion &&
			ready.Status == metav1.ConditionFalse && ready.Reason == "RolledBack" &&
			stalled.Status == metav1.ConditionTrue && stalled.Reason == "RolledBack"
		return done, fmt.Sprintf("status.version %q upgrade %+v failedUpgrade %+v Ready=%s/%s Stalled=%s/%s",
			st.Version, st.Upgrade, st.FailedUpgrade, ready.Status, ready.Reason, stalled.Status, stalled.Reason)
	})
	fu := *rolledBack.Status.FailedUpgrade
	t.Logf("rolled back to 1.0.0 %s after the upgrade was seen starting, %s after the channel file was written (upgradeTimeout %s; status startedAt %s, rolledBackAt %s): %s",
		time.Since(upgradeSeen).Round(time.Millisecond), time.Since(written).Round(time.Millisecond), upgradeTimeout,
		upgrade.StartedAt.UTC().Format(time.RFC3339), fu.RolledBackAt.UTC().Format(time.RFC3339), fu.Message)
	// Status times have whole seconds.
	if d := fu.RolledBackAt.Sub(upgrade.StartedAt.Time); d < upgradeTimeout-time.Second {
		t.Errorf("rolled back %s after the upgrade started, before upgradeTimeout %s", d, upgradeTimeout)
	}
	if st := rolledBack.Status; st.LastHealthyVersion != "1.0.0" || st.Upgrade != nil || fu.Generation != rolledBack.Generation || fu.ChannelRevision == "" {
		t.Errorf("after the rollback: lastHealthyVersion %q upgrade %+v failedUpgrade %+v (generation %d), want 1.0.0, none, this generation and a channel revision",
			st.LastHealthyVersion, st.Upgrade, fu, rolledBack.Generation)
	}
	waitEvents(t, ns, uid, corev1.EventTypeWarning, "RolledBack", 1, diag)

	restored := waitFor(t, timeout, "every pod back on 1.0.0's template "+serving.goodHash+" and Ready, no pod of "+brokenVersion+" left, its PodDisruptionBudget pruned", diag,
		func(ctx context.Context) (bool, string) {
			a, err := observe(ctx, ns, name, dep)
			if err != nil {
				return false, err.Error()
			}
			problems := a.rolledOut(3)
			if a.newestHash() != serving.goodHash {
				problems = append(problems, fmt.Sprintf("newest template %q, want 1.0.0's %s", a.newestHash(), serving.goodHash))
			}
			if _, ok := a.dep.Spec.Template.Labels[neverReadyLabel]; ok {
				problems = append(problems, "the Deployment's pod template still has "+neverReadyLabel)
			}
			if _, err := getPDB(ctx, ns, dep); !apierrors.IsNotFound(err) {
				problems = append(problems, fmt.Sprintf("PodDisruptionBudget %s of %s not pruned (err %v)", dep, brokenVersion, err))
			}
			return len(problems) == 0, strings.Join(problems, "; ") + "\n" + a.String()
		})
	t.Logf("all pods on 1.0.0's template %s and Ready %s after the rollback was seen", serving.goodHash, restored.Round(time.Millisecond))
	samples.stop()
	serving.check(t)
	honesty.check(t)

	// Not retried in a loop: the spec and the channel stay the same, so the
	// operator keeps 1.0.0 however often it reconciles (each poke of the
	// Deployment makes it reconcile).
	t.Run("not-retried", func(t *testing.T) {
		var base appsv1.Deployment
		if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: dep}, &base); err != nil {
			t.Fatal(err)
		}
		upgrading, seen, err := operatorEvents(ctx, ns, uid, corev1.EventTypeNormal, "Upgrading")
		if err != nil || upgrading != 1 {
			t.Fatalf("want 1 Upgrading event so far (err %v): %s", err, seen)
		}
		pokes, polls := 0, 0
		window := 2 * upgradeTimeout
		holdsFor(t, window, 500*time.Millisecond, "1.0.0 kept after the rollback: pod template, Deployment generation, status, no new Upgrading event", diag,
			func(ctx context.Context) (bool, string) {
				if polls%4 == 0 {
					if err := pokeDeployment(ctx, ns, dep, pokes); err != nil {
						return false, err.Error()
					}
					pokes++
				}
				polls++
				a, err := observe(ctx, ns, name, dep)
				if err != nil {
					return false, err.Error()
				}
				var problems []string
				if a.dep.Generation != base.Generation {
					problems = append(problems, fmt.Sprintf("Deployment generation %d, was %d", a.dep.Generation, base.Generation))
				}
				if _, ok := a.dep.Spec.Template.Labels[neverReadyLabel]; ok || a.newestHash() != serving.goodHash {
					problems = append(problems, fmt.Sprintf("pod template %s (never-ready label %t), want 1.0.0's %s", a.newestHash(), ok, serving.goodHash))
				}
				st := a.swa.Status
				ready := condition(&a.swa, webappv1.ConditionReady)
				if st.Version != "1.0.0" || st.Upgrade != nil || st.FailedUpgrade == nil || st.FailedUpgrade.Version != brokenVersion || ready.Reason != "RolledBack" {
					problems = append(problems, fmt.Sprintf("status.version %q upgrade %+v failedUpgrade %+v Ready %s/%s",
						st.Version, st.Upgrade, st.FailedUpgrade, ready.Status, ready.Reason))
				}
				if n, seen, err := operatorEvents(ctx, ns, uid, corev1.EventTypeNormal, "Upgrading"); err != nil || n != upgrading {
					problems = append(problems, fmt.Sprintf("Upgrading events (err %v): %s", err, seen))
				}
				return len(problems) == 0, strings.Join(problems, "; ")
			})
		t.Logf("1.0.0 kept for %s (2x upgradeTimeout) after the rollback: %d polls, %d reconciles provoked by poking the Deployment, no new Upgrading event",
			window, polls, pokes)
	})

	// A spec change is a new input: the operator tries the version again
	// (and, as it still never becomes Ready, rolls it back again).
	t.Run("retried-after-spec-change", func(t *testing.T) {
		patchApp(t, ctx, ns, name, `{"spec":{"message":"Try 1.2.0 again"}}`)
		var swa webappv1.SimpleWebApp
		retry := waitFor(t, 30*time.Second, "status.upgrade from 1.0.0 to "+brokenVersion+" for the new generation", diag, func(ctx context.Context) (bool, string) {
			if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &swa); err != nil {
				return false, err.Error()
			}
			st := swa.Status
			done := swa.Generation > rolledBack.Generation && st.ObservedGeneration == swa.Generation &&
				st.Version == brokenVersion && st.Upgrade != nil && st.Upgrade.From == "1.0.0" && st.Upgrade.To == brokenVersion
			return done, fmt.Sprintf("generation %d observed %d, status.version %q upgrade %+v", swa.Generation, st.ObservedGeneration, st.Version, st.Upgrade)
		})
		t.Logf("retry of %s started %s after the spec change", brokenVersion, retry.Round(time.Millisecond))
		waitEvents(t, ns, uid, corev1.EventTypeNormal, "Upgrading", 2, diag)

		retried := time.Now()
		waitFor(t, upgradeTimeout+30*time.Second, "the retry rolled back for the new generation", diag, func(ctx context.Context) (bool, string) {
			a, err := observe(ctx, ns, name, dep)
			if err != nil {
				return false, err.Error()
			}
			st := a.swa.Status
			problems := a.rolledOut(3)
			if st.Version != "1.0.0" || st.FailedUpgrade == nil || st.FailedUpgrade.Generation != swa.Generation || st.FailedUpgrade.Version != brokenVersion {
				problems = append(problems, fmt.Sprintf("status.version %q failedUpgrade %+v, want 1.0.0 and %s failed for generation %d",
					st.Version, st.FailedUpgrade, brokenVersion, swa.Generation))
			}
			if _, ok := a.dep.Spec.Template.Labels[neverReadyLabel]; ok {
				problems = append(problems, "the Deployment's pod template still has "+neverReadyLabel)
			}
			return len(problems) == 0, strings.Join(problems, "; ") + "\n" + a.String()
		})
		t.Logf("retry rolled back again, pods Ready on 1.0.0 with the new message, %s after it started", time.Since(retried).Round(time.Millisecond))
		waitEvents(t, ns, uid, corev1.EventTypeWarning, "RolledBack", 2, diag)
	})
}

// neverReadyPackage turns a copy of 1.1.0 into the broken version: a
// kustomize patch puts neverReadyLabel on the pod template, so kwok runs its
// pods without ever making them Ready.
func neverReadyPackage(name, content string) string {
	if name != "kustomization.yaml" {
		return content
	}
	if strings.Contains(content, "\npatches:") {
		panic("kustomization.yaml of 1.1.0 has patches already; merge the never-ready patch into them")
	}
	return "# e2e: 1.1.0 whose pods never become Ready on the test cluster (kwok stage for " + neverReadyLabel + ").\n" +
		content + `patches:
- target: {kind: Deployment, name: web}
  patch: |
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: web
    spec:
      template:
        metadata:
          labels:
            ` + neverReadyLabel + `: "true"
`
}

// servingProbe samples an app's pods during a failed upgrade: how many pods
// of the good (old) template are Ready, what its ReplicaSet reports
// available, and whether a pod of the broken version is ever Ready.
type servingProbe struct {
	ns               string
	selector         labels.Selector
	goodHash, goodRS string
	want             int

	samples, errs                       int
	minReady                            int   // least Ready pods of goodHash in a sample
	minAvailable                        int32 // least status.availableReplicas of goodRS
	brokenSeen, brokenRunning, brokenUp int   // samples with pods of the broken version: any, Running, Ready
	drops                               []string
}

func (s *servingProbe) sample(ctx context.Context) {
	if s.samples == 0 {
		s.minReady, s.minAvailable = 1<<30, 1<<30
	}
	s.samples++
	var pods corev1.PodList
	var rs appsv1.ReplicaSet
	if env.C.List(ctx, &pods, client.InNamespace(s.ns), client.MatchingLabelsSelector{Selector: s.selector}) != nil ||
		env.C.Get(ctx, client.ObjectKey{Namespace: s.ns, Name: s.goodRS}, &rs) != nil {
		s.errs++
		return
	}
	ready := 0
	var broken, brokenRunning, brokenReady int
	for _, p := range pods.Items {
		if p.Labels[neverReadyLabel] == "true" {
			broken++
			if p.Status.Phase == corev1.PodRunning {
				brokenRunning++
			}
			if podReady(p) {
				brokenReady++
			}
			continue
		}
		if p.Labels[appsv1.DefaultDeploymentUniqueLabelKey] == s.goodHash && p.DeletionTimestamp == nil &&
			p.Status.Phase == corev1.PodRunning && podReady(p) {
			ready++
		}
	}
	s.minReady = min(s.minReady, ready)
	s.minAvailable = min(s.minAvailable, rs.Status.AvailableReplicas)
	if broken > 0 {
		s.brokenSeen++
	}
	if brokenRunning > 0 {
		s.brokenRunning++
	}
	if brokenReady > 0 {
		s.brokenUp++
	}
	if ready < s.want || int(rs.Status.AvailableReplicas) < s.want || brokenReady > 0 {
		s.drops = append(s.drops, fmt.Sprintf("%s: %d Ready pods of %s, ReplicaSet %s available %d, %d Ready pods of the broken version",
			time.Now().Format("15:04:05.000"), ready, s.goodHash, s.goodRS, rs.Status.AvailableReplicas, brokenReady))
	}
}

func (s *servingProbe) check(t *testing.T) {
	t.Helper()
	t.Logf("serving during the failed upgrade: %d samples (%d failed reads): at least %d Ready pods of 1.0.0's template and %d available in ReplicaSet %s; "+
		"pods of %s seen in %d samples, Running in %d, Ready in %d",
		s.samples, s.errs, s.minReady, s.minAvailable, s.goodRS, brokenVersion, s.brokenSeen, s.brokenRunning, s.brokenUp)
	if s.samples-s.errs < 10 {
		t.Errorf("only %d good samples", s.samples-s.errs)
	}
	if len(s.drops) > 0 {
		t.Errorf("the app did not keep serving with %d pods of 1.0.0 (or a never-ready pod was Ready) in %d samples:\n%s",
			s.want, len(s.drops), strings.Join(s.drops, "\n"))
	}
	if s.brokenRunning == 0 {
		t.Errorf("no sample saw a pod of %s Running: the upgrade was not exercised", brokenVersion)
	}
}

// TestPinnedVersionStays moves the channel of an app pinned with
// spec.version: it stays on its version, while an app following the same
// channel moves; un-pinned, it follows the channel too.
func TestPinnedVersionStays(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := restrictedNamespace(t, ctx)
	const channel = "pinned"
	const pinnedName, followerName = "pinned", "follower"
	pinnedDep := pinnedName + "-web"
	diag := diagFor(ns)

	writeChannel(t, channel, "1.0.0")
	createApp(t, ctx, ns, pinnedName, webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](2), Channel: channel, Version: "1.0.0"})
	createApp(t, ctx, ns, followerName, webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](1), Channel: channel})
	pinned := waitSettled(t, ns, pinnedName, 2, "1.0.0", diag)
	waitSettled(t, ns, followerName, 1, "1.0.0", diag)
	if pinned.swa.Status.Channel != "" {
		t.Errorf("pinned app: status.channel %q, want empty (not resolved through a channel)", pinned.swa.Status.Channel)
	}

	written := time.Now()
	writeChannel(t, channel, "1.0.0", "1.1.0")
	waitSettled(t, ns, followerName, 1, "1.1.0", diag)
	t.Logf("the app following channel %q moved to 1.1.0 %s after the channel file was written", channel, time.Since(written).Round(time.Millisecond))

	// Make the operator reconcile the pinned app under the new channel
	// content, then watch it for several poll intervals of the channel watcher.
	if err := pokeDeployment(ctx, ns, pinnedDep, 0); err != nil {
		t.Fatal(err)
	}
	window := 6 * channelsPollInterval
	polls := holdsFor(t, window, channelsPollInterval/2, "the pinned app on 1.0.0, Ready, its Deployment untouched", diag,
		func(ctx context.Context) (bool, string) {
			a, err := observe(ctx, ns, pinnedName, pinnedDep)
			if err != nil {
				return false, err.Error()
			}
			ok, seen := a.settledOn(2, "1.0.0")
			if a.dep.Generation != pinned.dep.Generation || a.newestHash() != pinned.newestHash() {
				ok, seen = false, fmt.Sprintf("Deployment generation %d template %s, was %d and %s\n%s",
					a.dep.Generation, a.newestHash(), pinned.dep.Generation, pinned.newestHash(), seen)
			}
			if _, err := getPDB(ctx, ns, pinnedDep); !apierrors.IsNotFound(err) {
				ok, seen = false, fmt.Sprintf("PodDisruptionBudget %s of 1.1.0 (err %v)\n%s", pinnedDep, err, seen)
			}
			return ok, seen
		})
	t.Logf("pinned app stayed on 1.0.0 with Deployment generation %d for %s (%d polls) after the channel moved", pinned.dep.Generation, window, polls)

	unpinned := time.Now()
	patchApp(t, ctx, ns, pinnedName, `{"spec":{"version":null}}`)
	moved := waitSettled(t, ns, pinnedName, 2, "1.1.0", diag)
	t.Logf("un-pinned app moved to 1.1.0 and Ready %s after spec.version was removed", time.Since(unpinned).Round(time.Millisecond))
	if moved.swa.Status.Channel != channel || moved.swa.Spec.Version != "" || moved.swa.Status.LastHealthyVersion != "1.1.0" {
		t.Errorf("spec.version %q status.channel %q lastHealthyVersion %q, want none, %s, 1.1.0",
			moved.swa.Spec.Version, moved.swa.Status.Channel, moved.swa.Status.LastHealthyVersion, channel)
	}
	if moved.newestHash() == pinned.newestHash() {
		t.Errorf("pod template %s unchanged after moving to 1.1.0", moved.newestHash())
	}
	if _, err := getPDB(ctx, ns, pinnedDep); err != nil {
		t.Errorf("1.1.0 with 2 replicas: PodDisruptionBudget %s: %v", pinnedDep, err)
	}
}

// TestMalformedChannelFile breaks the channel file of a running app at run
// time: the app is Stalled with reason ChannelInvalid and nothing running is
// touched; fixing the file makes it Ready again.
func TestMalformedChannelFile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := restrictedNamespace(t, ctx)
	const name, channel = "malformed", "malformed"
	dep := name + "-web"
	diag := diagFor(ns)

	writeChannel(t, channel, "1.0.0")
	createApp(t, ctx, ns, name, webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](2), Channel: channel})
	good := waitSettled(t, ns, name, 2, "1.0.0", diag)
	uid := good.swa.UID
	untouched := resourceVersions(t, ctx, ns, name)
	if _, ok := untouched["Deployment/"+dep]; !ok {
		t.Fatalf("Deployment %s not in status.inventory: %v", dep, untouched)
	}

	for _, bad := range []struct{ what, content string }{
		{"not YAML", "manifests: [oops\n"},
		{"an unknown field", "manifests:\n- name: simplewebapp\n  version: 1.0.0\n  oops: true\n"},
	} {
		t.Run(strings.ReplaceAll(bad.what, " ", "-"), func(t *testing.T) {
			events, _, err := operatorEvents(ctx, ns, uid, corev1.EventTypeWarning, "ChannelInvalid")
			if err != nil {
				t.Fatal(err)
			}
			written := time.Now()
			writeChannelsFile(t, channel, bad.content)
			stalled := waitFor(t, 30*time.Second, "Stalled=True and Ready=False with reason ChannelInvalid", diag, func(ctx context.Context) (bool, string) {
				var swa webappv1.SimpleWebApp
				if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &swa); err != nil {
					return false, err.Error()
				}
				s, r := condition(&swa, webappv1.ConditionStalled), condition(&swa, webappv1.ConditionReady)
				done := s.Status == metav1.ConditionTrue && s.Reason == "ChannelInvalid" && r.Status == metav1.ConditionFalse && r.Reason == "ChannelInvalid"
				return done, fmt.Sprintf("Stalled=%s/%s (%s) Ready=%s/%s", s.Status, s.Reason, s.Message, r.Status, r.Reason)
			})
			t.Logf("channel file with %s: Stalled/ChannelInvalid %s after it was written", bad.what, stalled.Round(time.Millisecond))
			waitEvents(t, ns, uid, corev1.EventTypeWarning, "ChannelInvalid", events+1, diag)

			polls := holdsFor(t, 4*channelsPollInterval, channelsPollInterval/2, "the app stalled on 1.0.0 with its objects untouched", diag,
				func(ctx context.Context) (bool, string) {
					var swa webappv1.SimpleWebApp
					if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &swa); err != nil {
						return false, err.Error()
					}
					s := condition(&swa, webappv1.ConditionStalled)
					if s.Status != metav1.ConditionTrue || s.Reason != "ChannelInvalid" || swa.Status.Version != "1.0.0" {
						return false, fmt.Sprintf("Stalled=%s/%s status.version %q", s.Status, s.Reason, swa.Status.Version)
					}
					return sameResourceVersions(ctx, ns, name, untouched)
				})
			t.Logf("objects untouched while stalled (%d polls over %s)", polls, 4*channelsPollInterval)

			fixed := time.Now()
			writeChannel(t, channel, "1.0.0")
			waitSettled(t, ns, name, 2, "1.0.0", diag)
			t.Logf("fixed channel file: Ready again %s after it was written (%s since the bad file)",
				time.Since(fixed).Round(time.Millisecond), time.Since(written).Round(time.Millisecond))
			var swa webappv1.SimpleWebApp
			if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &swa); err != nil {
				t.Fatal(err)
			}
			if s := condition(&swa, webappv1.ConditionStalled); s.Status != metav1.ConditionFalse {
				t.Errorf("Stalled=%s/%s after the fix, want False", s.Status, s.Reason)
			}
			// The same render is applied again: server-side apply changes nothing.
			if ok, seen := sameResourceVersions(ctx, ns, name, untouched); !ok {
				t.Errorf("after the fix: %s", seen)
			}
		})
	}
}

// resourceVersions maps "Kind/name" of each object the operator applied for
// the app (from status.inventory) to its resourceVersion and generation.
func resourceVersions(t *testing.T, ctx context.Context, ns, name string) map[string]string {
	t.Helper()
	rvs, err := inventoryVersions(ctx, ns, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("applied objects: %v", rvs)
	return rvs
}

func inventoryVersions(ctx context.Context, ns, name string) (map[string]string, error) {
	var swa webappv1.SimpleWebApp
	if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &swa); err != nil {
		return nil, err
	}
	rvs := map[string]string{}
	for _, ref := range swa.Status.Inventory {
		mapping, err := env.C.RESTMapper().RESTMapping(schema.GroupKind{Group: ref.Group, Kind: ref.Kind})
		if err != nil {
			return nil, fmt.Errorf("status.inventory %+v: %w", ref, err)
		}
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(mapping.GroupVersionKind)
		if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: ref.Name}, obj); err != nil {
			return nil, err
		}
		rvs[ref.Kind+"/"+ref.Name] = fmt.Sprintf("resourceVersion %s generation %d", obj.GetResourceVersion(), obj.GetGeneration())
	}
	if len(rvs) == 0 {
		return nil, fmt.Errorf("%s/%s has an empty status.inventory", ns, name)
	}
	return rvs, nil
}

func sameResourceVersions(ctx context.Context, ns, name string, want map[string]string) (bool, string) {
	got, err := inventoryVersions(ctx, ns, name)
	if err != nil {
		return false, err.Error()
	}
	var diffs []string
	for k, v := range want {
		if got[k] != v {
			diffs = append(diffs, fmt.Sprintf("%s: %s, was %s", k, got[k], v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, k+": new")
		}
	}
	return len(diffs) == 0, "objects changed: " + strings.Join(diffs, "; ")
}

func getPDB(ctx context.Context, ns, name string) (*policyv1.PodDisruptionBudget, error) {
	pdb := &policyv1.PodDisruptionBudget{}
	return pdb, env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, pdb)
}
