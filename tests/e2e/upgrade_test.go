package e2e

// Versions delivered at run time through the operator's --channels-dir. The
// tests start on the stable channel's version and write newer versions
// (testkit.NewVersion) into the directory: a channel moving to a new version
// upgrades the apps that follow it, a version that never becomes Ready is
// rolled back by the operator while the old pods keep serving, pinned apps
// stay where they are, and a malformed channel file stalls its apps without
// touching what runs. Each test has its own namespace, channel and versions,
// so they run in parallel.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/testkit"
)

// TestChannelUpgrade moves a channel from the stable version to a newer one
// (written by the test: the stable package plus a marker ConfigMap and a
// changed nginx configuration) while an app follows it: the operator upgrades
// the app without a restart, the pods roll to the new template, the new
// version's ConfigMap appears, and Ready is never True while the Deployment is
// rolling.
func TestChannelUpgrade(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := testkit.Namespace(t, env.C, e2eNS)
	const name, channel = "upgrade", "upgrade"
	dep := name + "-web"
	diag := diagFor(ns)
	stable, next := testkit.ChannelVersion(t, "stable"), testkit.NewVersion(t, 1)

	testkit.CopyPackage(t, env.channels, stable, next, testkit.MarkVersion(next))
	testkit.WriteChannel(t, env.channels, channel, stable)
	createApp(t, ctx, ns, name, webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](3), Channel: channel})
	before := waitSettled(t, ns, name, 3, stable, diag)
	if st := before.swa.Status; st.LastHealthyVersion != stable || st.Channel != channel {
		t.Errorf("status lastHealthyVersion %q channel %q, want %s and %s", st.LastHealthyVersion, st.Channel, stable, channel)
	}
	if marker, err := getMarker(ctx, ns, name); !apierrors.IsNotFound(err) {
		t.Errorf("%s has no ConfigMap %s, found %v (err %v)", stable, testkit.MarkerName, marker, err)
	}

	honesty := &readyHonesty{ns: ns, name: name, dep: dep}
	samples := startSampler(ctx, 50*time.Millisecond, honesty.sample)
	written := time.Now()
	testkit.WriteChannel(t, env.channels, channel, stable, next)
	pickup := testkit.WaitFor(t, 30*time.Second, "status.version "+next+": the channel change picked up and applied", func(ctx context.Context) (bool, string) {
		var swa webappv1.SimpleWebApp
		if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &swa); err != nil {
			return false, err.Error()
		}
		return swa.Status.Version == next, fmt.Sprintf("status.version %q, upgrade %+v", swa.Status.Version, swa.Status.Upgrade)
	}, env.waitOpts(diag))
	t.Logf("channel change picked up: %s applied %s after the channel file was written (poll interval %s)", next, pickup.Round(time.Millisecond), channelsPollInterval)
	after := waitSettled(t, ns, name, 3, next, diag)
	t.Logf("upgrade %s -> %s of 3 pods: Ready again %s after the channel file was written", stable, next, time.Since(written).Round(time.Millisecond))
	samples.stop()
	honesty.check(t)
	if honesty.readyNotTrue == 0 {
		t.Errorf("no sample saw Ready other than True: the samples missed the roll-out (%s)", honesty)
	}

	st := after.swa.Status
	if st.LastHealthyVersion != next || st.Upgrade != nil || st.FailedUpgrade != nil || st.Channel != channel {
		t.Errorf("status lastHealthyVersion %q upgrade %+v failedUpgrade %+v channel %q, want %s, none, none, %s",
			st.LastHealthyVersion, st.Upgrade, st.FailedUpgrade, st.Channel, next, channel)
	}
	if after.newestHash() == before.newestHash() {
		t.Errorf("pod template hash %q unchanged: %s did not roll the pods", after.newestHash(), next)
	}
	if cms, err := configMapsWith(ctx, ns, after.newestRS.Spec.Template.Spec, "# test version "+next); err != nil || len(cms) == 0 {
		t.Errorf("the new pod template mounts no ConfigMap of %s (err %v)", next, err)
	}
	t.Logf("pods rolled from template %s to %s: %v", before.newestHash(), after.newestHash(), podNames(after.pods))
	marker, err := getMarker(ctx, ns, name)
	if err != nil {
		t.Fatalf("%s: ConfigMap %s-%s: %v\n%s", next, name, testkit.MarkerName, err, diag())
	}
	if ref := metav1.GetControllerOf(marker); ref == nil || ref.UID != after.swa.UID {
		t.Errorf("ConfigMap %s controller reference %+v, want the SimpleWebApp (uid %s)", marker.Name, ref, after.swa.UID)
	}
	if marker.Data["version"] != next {
		t.Errorf("ConfigMap %s data %v, want version %s", marker.Name, marker.Data, next)
	}
	waitEvents(t, ns, after.swa.UID, corev1.EventTypeNormal, "Upgrading", 1, diag)
	n, seen, err := operatorEvents(ctx, ns, after.swa.UID, corev1.EventTypeNormal, "Upgrading")
	if want := "upgrading from " + stable + " to " + next; err != nil || n != 1 || !strings.Contains(seen, want) {
		t.Errorf("want one Upgrading event %q (err %v): %s", want, err, seen)
	}
}

// TestBrokenVersionRollsBack offers a version whose pods never become Ready:
// the operator applies it, gives up after spec.upgradeTimeout and goes back
// to the last healthy version by itself, while the old pods keep serving. It
// does not try that version again until the spec changes.
func TestBrokenVersionRollsBack(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := testkit.Namespace(t, env.C, e2eNS)
	const name, channel = "broken", "broken"
	const upgradeTimeout = 10 * time.Second
	dep := name + "-web"
	diag := diagFor(ns)
	// The broken version: the stable package plus a marker ConfigMap, with
	// pods that never become Ready.
	stable, brokenVersion := testkit.ChannelVersion(t, "stable"), testkit.NewVersion(t, 2)

	testkit.CopyPackage(t, env.channels, stable, brokenVersion, testkit.MarkVersion(brokenVersion), neverReady)
	testkit.WriteChannel(t, env.channels, channel, stable)
	createApp(t, ctx, ns, name, webappv1.SimpleWebAppSpec{
		Replicas: ptr.To[int32](3), Channel: channel, UpgradeTimeout: &metav1.Duration{Duration: upgradeTimeout},
	})
	good := waitSettled(t, ns, name, 3, stable, diag)
	uid := good.swa.UID
	sel, err := metav1.LabelSelectorAsSelector(good.dep.Spec.Selector)
	if err != nil {
		t.Fatal(err)
	}

	// From before the channel change until the rollback is complete.
	serving := &servingProbe{ns: ns, selector: sel, good: stable, goodHash: good.newestHash(), goodRS: good.newestRS.Name, broken: brokenVersion, want: 3}
	honesty := &readyHonesty{ns: ns, name: name, dep: dep}
	samples := startSampler(ctx, 100*time.Millisecond, func(ctx context.Context) {
		serving.sample(ctx)
		honesty.sample(ctx)
	})

	written := time.Now()
	testkit.WriteChannel(t, env.channels, channel, stable, brokenVersion)
	var upgrade webappv1.UpgradeStatus
	pickup := testkit.WaitFor(t, 30*time.Second, "status.version "+brokenVersion+" and status.upgrade from "+stable+" to "+brokenVersion,
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
		}, env.waitOpts(diag))
	upgradeSeen := time.Now()
	t.Logf("channel change picked up: %s applied, upgrade %s -> %s started at %s, %s after the channel file was written",
		brokenVersion, upgrade.From, upgrade.To, upgrade.StartedAt.UTC().Format(time.RFC3339), pickup.Round(time.Millisecond))
	if upgrade.From != stable || upgrade.To != brokenVersion {
		t.Errorf("status.upgrade %+v, want from %s to %s", upgrade, stable, brokenVersion)
	}
	waitEvents(t, ns, uid, corev1.EventTypeNormal, "Upgrading", 1, diag)
	testkit.WaitFor(t, 30*time.Second, "a pod of "+brokenVersion+" (label "+localcluster.NeverReadyLabel+") Running and not Ready", func(ctx context.Context) (bool, string) {
		var pods corev1.PodList
		if err := env.C.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{localcluster.NeverReadyLabel: "true"}); err != nil {
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
	}, env.waitOpts(diag))

	var rolledBack webappv1.SimpleWebApp
	testkit.WaitFor(t, upgradeTimeout+30*time.Second, "the operator rolling back by itself: status.version "+stable+", failedUpgrade.version "+brokenVersion+
		", Ready=False and Stalled=True with reason RolledBack", func(ctx context.Context) (bool, string) {
		if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &rolledBack); err != nil {
			return false, err.Error()
		}
		st := rolledBack.Status
		ready, stalled := condition(&rolledBack, webappv1.ConditionReady), condition(&rolledBack, webappv1.ConditionStalled)
		done := st.Version == stable && st.FailedUpgrade != nil && st.FailedUpgrade.Version == brokenVersion &&
			ready.Status == metav1.ConditionFalse && ready.Reason == "RolledBack" &&
			stalled.Status == metav1.ConditionTrue && stalled.Reason == "RolledBack"
		return done, fmt.Sprintf("status.version %q upgrade %+v failedUpgrade %+v Ready=%s/%s Stalled=%s/%s",
			st.Version, st.Upgrade, st.FailedUpgrade, ready.Status, ready.Reason, stalled.Status, stalled.Reason)
	}, env.waitOpts(diag))
	fu := *rolledBack.Status.FailedUpgrade
	t.Logf("rolled back to %s %s after the upgrade was seen starting, %s after the channel file was written (upgradeTimeout %s; status startedAt %s, rolledBackAt %s): %s",
		stable, time.Since(upgradeSeen).Round(time.Millisecond), time.Since(written).Round(time.Millisecond), upgradeTimeout,
		upgrade.StartedAt.UTC().Format(time.RFC3339), fu.RolledBackAt.UTC().Format(time.RFC3339), fu.Message)
	// Status times have whole seconds.
	if d := fu.RolledBackAt.Sub(upgrade.StartedAt.Time); d < upgradeTimeout-time.Second {
		t.Errorf("rolled back %s after the upgrade started, before upgradeTimeout %s", d, upgradeTimeout)
	}
	if st := rolledBack.Status; st.LastHealthyVersion != stable || st.Upgrade != nil || fu.Generation != rolledBack.Generation || fu.ChannelRevision == "" {
		t.Errorf("after the rollback: lastHealthyVersion %q upgrade %+v failedUpgrade %+v (generation %d), want %s, none, this generation and a channel revision",
			st.LastHealthyVersion, st.Upgrade, fu, rolledBack.Generation, stable)
	}
	waitEvents(t, ns, uid, corev1.EventTypeWarning, "RolledBack", 1, diag)

	restored := testkit.WaitFor(t, timeout, "every pod back on "+stable+"'s template "+serving.goodHash+" and Ready, no pod of "+brokenVersion+" left, its ConfigMap "+testkit.MarkerName+" pruned",
		func(ctx context.Context) (bool, string) {
			a, err := observe(ctx, ns, name, dep)
			if err != nil {
				return false, err.Error()
			}
			problems := a.rolledOut(3)
			if a.newestHash() != serving.goodHash {
				problems = append(problems, fmt.Sprintf("newest template %q, want %s's %s", a.newestHash(), stable, serving.goodHash))
			}
			if _, ok := a.dep.Spec.Template.Labels[localcluster.NeverReadyLabel]; ok {
				problems = append(problems, "the Deployment's pod template still has "+localcluster.NeverReadyLabel)
			}
			if _, err := getMarker(ctx, ns, name); !apierrors.IsNotFound(err) {
				problems = append(problems, fmt.Sprintf("ConfigMap %s-%s of %s not pruned (err %v)", name, testkit.MarkerName, brokenVersion, err))
			}
			return len(problems) == 0, strings.Join(problems, "; ") + "\n" + a.String()
		}, env.waitOpts(diag))
	t.Logf("all pods on %s's template %s and Ready %s after the rollback was seen", stable, serving.goodHash, restored.Round(time.Millisecond))
	samples.stop()
	serving.check(t)
	honesty.check(t)

	// Not retried in a loop: the spec and the channel stay the same, so the
	// operator keeps the stable version however often it reconciles (each poke of the
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
		testkit.HoldsFor(t, window, stable+" kept after the rollback: pod template, Deployment generation, status, no new Upgrading event",
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
				if _, ok := a.dep.Spec.Template.Labels[localcluster.NeverReadyLabel]; ok || a.newestHash() != serving.goodHash {
					problems = append(problems, fmt.Sprintf("pod template %s (never-ready label %t), want %s's %s", a.newestHash(), ok, stable, serving.goodHash))
				}
				st := a.swa.Status
				ready := condition(&a.swa, webappv1.ConditionReady)
				if st.Version != stable || st.Upgrade != nil || st.FailedUpgrade == nil || st.FailedUpgrade.Version != brokenVersion || ready.Reason != "RolledBack" {
					problems = append(problems, fmt.Sprintf("status.version %q upgrade %+v failedUpgrade %+v Ready %s/%s",
						st.Version, st.Upgrade, st.FailedUpgrade, ready.Status, ready.Reason))
				}
				if n, seen, err := operatorEvents(ctx, ns, uid, corev1.EventTypeNormal, "Upgrading"); err != nil || n != upgrading {
					problems = append(problems, fmt.Sprintf("Upgrading events (err %v): %s", err, seen))
				}
				return len(problems) == 0, strings.Join(problems, "; ")
			}, env.waitOpts(diag), testkit.Every(500*time.Millisecond))
		t.Logf("%s kept for %s (2x upgradeTimeout) after the rollback: %d polls, %d reconciles provoked by poking the Deployment, no new Upgrading event",
			stable, window, polls, pokes)
	})

	// A spec change is a new input: the operator tries the version again
	// (and, as it still never becomes Ready, rolls it back again).
	t.Run("retried-after-spec-change", func(t *testing.T) {
		patchApp(t, ctx, ns, name, `{"spec":{"message":"Try the broken version again"}}`)
		var swa webappv1.SimpleWebApp
		retry := testkit.WaitFor(t, 30*time.Second, "status.upgrade from "+stable+" to "+brokenVersion+" for the new generation", func(ctx context.Context) (bool, string) {
			if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &swa); err != nil {
				return false, err.Error()
			}
			st := swa.Status
			done := swa.Generation > rolledBack.Generation && st.ObservedGeneration == swa.Generation &&
				st.Version == brokenVersion && st.Upgrade != nil && st.Upgrade.From == stable && st.Upgrade.To == brokenVersion
			return done, fmt.Sprintf("generation %d observed %d, status.version %q upgrade %+v", swa.Generation, st.ObservedGeneration, st.Version, st.Upgrade)
		}, env.waitOpts(diag))
		t.Logf("retry of %s started %s after the spec change", brokenVersion, retry.Round(time.Millisecond))
		waitEvents(t, ns, uid, corev1.EventTypeNormal, "Upgrading", 2, diag)

		retried := time.Now()
		testkit.WaitFor(t, upgradeTimeout+30*time.Second, "the retry rolled back for the new generation", func(ctx context.Context) (bool, string) {
			a, err := observe(ctx, ns, name, dep)
			if err != nil {
				return false, err.Error()
			}
			st := a.swa.Status
			problems := a.rolledOut(3)
			if st.Version != stable || st.FailedUpgrade == nil || st.FailedUpgrade.Generation != swa.Generation || st.FailedUpgrade.Version != brokenVersion {
				problems = append(problems, fmt.Sprintf("status.version %q failedUpgrade %+v, want %s and %s failed for generation %d",
					st.Version, st.FailedUpgrade, stable, brokenVersion, swa.Generation))
			}
			if _, ok := a.dep.Spec.Template.Labels[localcluster.NeverReadyLabel]; ok {
				problems = append(problems, "the Deployment's pod template still has "+localcluster.NeverReadyLabel)
			}
			return len(problems) == 0, strings.Join(problems, "; ") + "\n" + a.String()
		}, env.waitOpts(diag))
		t.Logf("retry rolled back again, pods Ready on %s with the new message, %s after it started", stable, time.Since(retried).Round(time.Millisecond))
		waitEvents(t, ns, uid, corev1.EventTypeWarning, "RolledBack", 2, diag)
	})
}

// neverReady is a testkit.Edit that makes a copied package the broken version:
// its pods carry localcluster.NeverReadyLabel, so kwok
// (localcluster.NeverReadyStage) runs them without ever making them Ready.
var neverReady = testkit.PodLabels(map[string]string{localcluster.NeverReadyLabel: "true"})

// servingProbe samples an app's pods during a failed upgrade: how many pods
// of the good (old) template are Ready, what its ReplicaSet reports
// available, and whether a pod of the broken version is ever Ready.
type servingProbe struct {
	ns               string
	selector         labels.Selector
	good, broken     string // the versions
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
		if p.Labels[localcluster.NeverReadyLabel] == "true" {
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
	t.Logf("serving during the failed upgrade: %d samples (%d failed reads): at least %d Ready pods of %s's template and %d available in ReplicaSet %s; "+
		"pods of %s seen in %d samples, Running in %d, Ready in %d",
		s.samples, s.errs, s.minReady, s.good, s.minAvailable, s.goodRS, s.broken, s.brokenSeen, s.brokenRunning, s.brokenUp)
	if s.samples-s.errs < 10 {
		t.Errorf("only %d good samples", s.samples-s.errs)
	}
	if len(s.drops) > 0 {
		t.Errorf("the app did not keep serving with %d pods of %s (or a never-ready pod was Ready) in %d samples:\n%s",
			s.want, s.good, len(s.drops), strings.Join(s.drops, "\n"))
	}
	if s.brokenRunning == 0 {
		t.Errorf("no sample saw a pod of %s Running: the upgrade was not exercised", s.broken)
	}
}

// TestPinnedVersionStays moves the channel of an app pinned with
// spec.version to the stable version: it stays on its version, while an app
// following the same channel moves to a newer one; un-pinned, it follows the
// channel too.
func TestPinnedVersionStays(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := testkit.Namespace(t, env.C, e2eNS)
	const channel = "pinned"
	const pinnedName, followerName = "pinned", "follower"
	pinnedDep := pinnedName + "-web"
	diag := diagFor(ns)
	stable, next := testkit.ChannelVersion(t, "stable"), testkit.NewVersion(t, 3)

	testkit.CopyPackage(t, env.channels, stable, next, testkit.MarkVersion(next))
	testkit.WriteChannel(t, env.channels, channel, stable)
	createApp(t, ctx, ns, pinnedName, webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](2), Channel: channel, Version: stable})
	createApp(t, ctx, ns, followerName, webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](1), Channel: channel})
	pinned := waitSettled(t, ns, pinnedName, 2, stable, diag)
	waitSettled(t, ns, followerName, 1, stable, diag)
	if pinned.swa.Status.Channel != "" {
		t.Errorf("pinned app: status.channel %q, want empty (not resolved through a channel)", pinned.swa.Status.Channel)
	}

	written := time.Now()
	testkit.WriteChannel(t, env.channels, channel, stable, next)
	waitSettled(t, ns, followerName, 1, next, diag)
	t.Logf("the app following channel %q moved to %s %s after the channel file was written", channel, next, time.Since(written).Round(time.Millisecond))

	// Make the operator reconcile the pinned app under the new channel
	// content, then watch it for several poll intervals of the channel watcher.
	if err := pokeDeployment(ctx, ns, pinnedDep, 0); err != nil {
		t.Fatal(err)
	}
	window := 6 * channelsPollInterval
	polls := testkit.HoldsFor(t, window, "the pinned app on "+stable+", Ready, its Deployment untouched",
		func(ctx context.Context) (bool, string) {
			a, err := observe(ctx, ns, pinnedName, pinnedDep)
			if err != nil {
				return false, err.Error()
			}
			ok, seen := a.settledOn(2, stable)
			if a.dep.Generation != pinned.dep.Generation || a.newestHash() != pinned.newestHash() {
				ok, seen = false, fmt.Sprintf("Deployment generation %d template %s, was %d and %s\n%s",
					a.dep.Generation, a.newestHash(), pinned.dep.Generation, pinned.newestHash(), seen)
			}
			if _, err := getMarker(ctx, ns, pinnedName); !apierrors.IsNotFound(err) {
				ok, seen = false, fmt.Sprintf("ConfigMap %s-%s of %s (err %v)\n%s", pinnedName, testkit.MarkerName, next, err, seen)
			}
			return ok, seen
		}, env.waitOpts(diag), testkit.Every(channelsPollInterval/2))
	t.Logf("pinned app stayed on %s with Deployment generation %d for %s (%d polls) after the channel moved", stable, pinned.dep.Generation, window, polls)

	unpinned := time.Now()
	patchApp(t, ctx, ns, pinnedName, `{"spec":{"version":null}}`)
	moved := waitSettled(t, ns, pinnedName, 2, next, diag)
	t.Logf("un-pinned app moved to %s and Ready %s after spec.version was removed", next, time.Since(unpinned).Round(time.Millisecond))
	if moved.swa.Status.Channel != channel || moved.swa.Spec.Version != "" || moved.swa.Status.LastHealthyVersion != next {
		t.Errorf("spec.version %q status.channel %q lastHealthyVersion %q, want none, %s, %s",
			moved.swa.Spec.Version, moved.swa.Status.Channel, moved.swa.Status.LastHealthyVersion, channel, next)
	}
	if moved.newestHash() == pinned.newestHash() {
		t.Errorf("pod template %s unchanged after moving to %s", moved.newestHash(), next)
	}
	if _, err := getMarker(ctx, ns, pinnedName); err != nil {
		t.Errorf("%s: ConfigMap %s-%s: %v", next, pinnedName, testkit.MarkerName, err)
	}
}

// TestMalformedChannelFile breaks the channel file of a running app at run
// time: the app is Stalled with reason ChannelInvalid and nothing running is
// touched; fixing the file makes it Ready again.
func TestMalformedChannelFile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := testkit.Namespace(t, env.C, e2eNS)
	const name, channel = "malformed", "malformed"
	dep := name + "-web"
	diag := diagFor(ns)
	stable := testkit.ChannelVersion(t, "stable")

	testkit.WriteChannel(t, env.channels, channel, stable)
	createApp(t, ctx, ns, name, webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](2), Channel: channel})
	good := waitSettled(t, ns, name, 2, stable, diag)
	uid := good.swa.UID
	untouched := resourceVersions(t, ctx, ns, name)
	if _, ok := untouched["Deployment/"+dep]; !ok {
		t.Fatalf("Deployment %s not in status.inventory: %v", dep, untouched)
	}

	for _, bad := range []struct{ what, content string }{
		{"not YAML", "manifests: [oops\n"},
		{"an unknown field", "manifests:\n- name: simplewebapp\n  version: " + stable + "\n  oops: true\n"},
	} {
		t.Run(strings.ReplaceAll(bad.what, " ", "-"), func(t *testing.T) {
			events, _, err := operatorEvents(ctx, ns, uid, corev1.EventTypeWarning, "ChannelInvalid")
			if err != nil {
				t.Fatal(err)
			}
			written := time.Now()
			testkit.WriteChannelFile(t, env.channels, channel, bad.content)
			stalled := testkit.WaitFor(t, 30*time.Second, "Stalled=True and Ready=False with reason ChannelInvalid", func(ctx context.Context) (bool, string) {
				var swa webappv1.SimpleWebApp
				if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &swa); err != nil {
					return false, err.Error()
				}
				s, r := condition(&swa, webappv1.ConditionStalled), condition(&swa, webappv1.ConditionReady)
				done := s.Status == metav1.ConditionTrue && s.Reason == "ChannelInvalid" && r.Status == metav1.ConditionFalse && r.Reason == "ChannelInvalid"
				return done, fmt.Sprintf("Stalled=%s/%s (%s) Ready=%s/%s", s.Status, s.Reason, s.Message, r.Status, r.Reason)
			}, env.waitOpts(diag))
			t.Logf("channel file with %s: Stalled/ChannelInvalid %s after it was written", bad.what, stalled.Round(time.Millisecond))
			waitEvents(t, ns, uid, corev1.EventTypeWarning, "ChannelInvalid", events+1, diag)

			polls := testkit.HoldsFor(t, 4*channelsPollInterval, "the app stalled on "+stable+" with its objects untouched",
				func(ctx context.Context) (bool, string) {
					var swa webappv1.SimpleWebApp
					if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &swa); err != nil {
						return false, err.Error()
					}
					s := condition(&swa, webappv1.ConditionStalled)
					if s.Status != metav1.ConditionTrue || s.Reason != "ChannelInvalid" || swa.Status.Version != stable {
						return false, fmt.Sprintf("Stalled=%s/%s status.version %q", s.Status, s.Reason, swa.Status.Version)
					}
					return sameResourceVersions(ctx, ns, name, untouched)
				}, env.waitOpts(diag), testkit.Every(channelsPollInterval/2))
			t.Logf("objects untouched while stalled (%d polls over %s)", polls, 4*channelsPollInterval)

			fixed := time.Now()
			testkit.WriteChannel(t, env.channels, channel, stable)
			waitSettled(t, ns, name, 2, stable, diag)
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

// getMarker reads the ConfigMap testkit.MarkVersion adds, of the app name.
func getMarker(ctx context.Context, ns, name string) (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	return cm, env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-" + testkit.MarkerName}, cm)
}
