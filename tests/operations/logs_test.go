package operations

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// TestStructuredLogs runs the operator with its defaults out of cluster
// (leader election off) and checks its log: every line is a JSON object, and
// the reconciles of a SimpleWebApp, including one that prunes objects, log
// with the resource's namespace and name. Lines logged during a reconcile
// without them (kdp's applylib logs through klog, without the reconcile's
// logger) are reported, not failed.
func TestStructuredLogs(t *testing.T) {
	ns := testkit.Namespace(t, env.C, testkit.NS{Name: "ops-logs"})
	op := startOperator(t, "logs")
	op.waitReady(t)

	// Out of cluster, leader election is off by default.
	setup := firstLine(op.lines(t), func(l logLine) bool { return l.str("logger") == "setup" && l.msg() == "leader election" })
	if setup == 0 {
		t.Fatalf("no %q line from the setup logger", "leader election")
	}
	l := op.lines(t)[setup-1]
	if l.fields["enabled"] != false || l.fields["inCluster"] != false || l.str("leaseDuration") != "15s" || l.str("renewDeadline") != "10s" || l.str("retryPeriod") != "2s" {
		t.Errorf("out of cluster with no flags: %s, want leader election disabled, not in cluster, 15s/10s/2s", l.raw)
	}

	// Changing the message prunes the old content-hashed ConfigMap (and,
	// with a version that renders one for 2 replicas, scaling to 1 prunes the
	// PodDisruptionBudget).
	app := newApp(ns, "logged", 2, "")
	if err := env.C.Create(t.Context(), app); err != nil {
		t.Fatal(err)
	}
	waitAppReady(t, ns, app.Name, 1, "")
	oldContent := contentConfigMap(t, ns, app.Name)
	gen := updateApp(t, ns, app.Name, func(swa *webappv1.SimpleWebApp) {
		swa.Spec.Replicas = ptr.To[int32](1)
		swa.Spec.Message = "changed: old ConfigMap pruned"
	})
	waitAppReady(t, ns, app.Name, gen, "")
	testkit.WaitFor(t, time.Minute, "the old content ConfigMap "+oldContent+" to be pruned", func(ctx context.Context) (bool, string) {
		err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: oldContent}, &corev1.ConfigMap{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// The reconcile that pruned has ended once its last line is written;
	// wait for the end line of every reconcile that started.
	testkit.WaitFor(t, time.Minute, "every reconcile's end line", func(context.Context) (bool, string) {
		open := openReconciles(op.lines(t))
		return len(open) == 0, fmt.Sprint(open)
	})

	lines := op.lines(t)
	var notJSON []string
	for _, l := range lines {
		if l.fields == nil {
			notJSON = append(notJSON, fmt.Sprintf("%d: %.200s", l.n, l.raw))
		} else if l.str("level") == "" || l.fields["ts"] == nil || l.msg() == "" {
			t.Errorf("line %d lacks level, ts or msg: %.300s", l.n, l.raw)
		}
	}
	if len(notJSON) > 0 {
		t.Errorf("%d of %d log lines are not JSON:\n%s", len(notJSON), len(lines), strings.Join(notJSON, "\n"))
	}

	// Every line of controller-runtime's reconcile logger carries the
	// resource: namespace, name, and the SimpleWebApp object reference.
	var ofApp int
	reconcileIDs := map[string]bool{}
	for _, l := range lines {
		if !isReconcile(l) {
			continue
		}
		obj, _ := l.fields["SimpleWebApp"].(map[string]any)
		if l.str("namespace") == "" || l.str("name") == "" || obj["namespace"] != l.str("namespace") || obj["name"] != l.str("name") {
			t.Errorf("reconcile line %d without the resource's namespace and name: %.300s", l.n, l.raw)
		}
		if l.str("namespace") == ns && l.str("name") == app.Name {
			ofApp++
			reconcileIDs[l.str("reconcileID")] = true
		}
	}
	if ofApp == 0 {
		t.Fatalf("no reconcile line of %s/%s", ns, app.Name)
	}

	// Lines written while a reconcile of the app ran (between its first and
	// last line) that do not carry the resource: findings to report.
	var anonymous []string
	var events int
	for _, w := range reconcileWindows(lines) {
		if !reconcileIDs[w.id] {
			continue
		}
		for _, l := range lines[w.first:w.last] {
			if l.fields == nil || isReconcile(l) {
				continue
			}
			if obj, _ := l.fields["object"].(map[string]any); l.str("logger") == "events" && obj["namespace"] == ns && obj["name"] == app.Name {
				events++ // the event recorder's debug line names the resource as "object"
				continue
			}
			if l.str("namespace") == "" || l.str("name") == "" {
				anonymous = append(anonymous, fmt.Sprintf("line %d (during reconcile %s): level=%s logger=%q msg=%q", l.n, w.id, l.str("level"), l.str("logger"), l.msg()))
			}
		}
	}
	t.Logf("%d log lines, all JSON; %d reconcile lines of %s/%s in %d reconciles, all with namespace and name; %d event lines during them name it as object",
		len(lines), ofApp, ns, app.Name, len(reconcileIDs), events)
	levels := map[string]int{}
	for _, l := range lines {
		levels[l.str("level")]++
	}
	t.Logf("levels: %v (zap writes V(n) for n > 1 as \"Level(-n)\")", levels)
	if len(anonymous) > 0 {
		t.Logf("FINDING: %d lines logged during these reconciles lack the SimpleWebApp's namespace/name (not controller-runtime's reconcile logger, e.g. kdp applylib through klog):\n  %s",
			len(anonymous), strings.Join(anonymous, "\n  "))
	}
	for _, l := range lines {
		if strings.HasPrefix(l.msg(), "pruned resource") {
			t.Logf("FINDING: prune line %d has namespace=%q name=%q reconcileID=%v: %.300s", l.n, l.str("namespace"), l.str("name"), l.fields["reconcileID"], l.raw)
		}
	}
}

// window is the span of log lines of one reconcile: lines[first:last] (0-based).
type window struct {
	id          string
	first, last int
}

// reconcileWindows finds, per reconcileID, its first and last line.
func reconcileWindows(lines []logLine) []window {
	idx := map[string]int{}
	var ws []window
	for i, l := range lines {
		if !isReconcile(l) {
			continue
		}
		id := l.str("reconcileID")
		if j, ok := idx[id]; ok {
			ws[j].last = i + 1
			continue
		}
		idx[id] = len(ws)
		ws = append(ws, window{id: id, first: i, last: i + 1})
	}
	return ws
}

// openReconciles lists reconcileIDs whose "Reconciling" line has no end line
// ("Reconcile successful", "Reconcile done, ...", or "Reconciler error") yet.
func openReconciles(lines []logLine) []string {
	open := map[string]bool{}
	for _, l := range lines {
		if !isReconcile(l) {
			continue
		}
		switch m := l.msg(); {
		case m == "Reconciling":
			open[l.str("reconcileID")] = true
		case m == "Reconcile successful", strings.HasPrefix(m, "Reconcile done"), m == "Reconciler error":
			delete(open, l.str("reconcileID"))
		}
	}
	return sortedKeys(open)
}

// contentConfigMap is the name of the ConfigMap with the message that the
// pods of the app's Deployment mount (volume "content").
func contentConfigMap(t *testing.T, ns, name string) string {
	t.Helper()
	d := &appsv1.Deployment{}
	if err := env.C.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name + "-web"}, d); err != nil {
		t.Fatal(err)
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "content" && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	t.Fatalf("Deployment %s mounts no content ConfigMap", d.Name)
	return ""
}
