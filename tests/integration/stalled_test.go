package integration

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// A generation that cannot be applied stalls with a typed reason and an
// event; the objects of the last good generation are not touched.
// observedGeneration says the generation was processed (kstatus: Failed, not
// InProgress forever) and appliedGeneration stays on the last good one.
func TestCannotProceedLeavesLastGoodObjects(t *testing.T) {
	cases := []struct {
		name, reason string
		change       func(*webappv1.SimpleWebApp)
	}{
		{"unknown-version", "VersionNotFound", func(s *webappv1.SimpleWebApp) { s.Spec.Version = "7.7.7" }},
		{"unknown-channel", "ChannelNotFound", func(s *webappv1.SimpleWebApp) { s.Spec.Channel = "nosuchchannel" }},
		{"rename-patch", "PatchNotAllowed", func(s *webappv1.SimpleWebApp) {
			s.Spec.Patches = []webappv1.Patch{{
				Target: webappv1.PatchTarget{Kind: "Service", Name: "web"},
				Patch:  "- op: replace\n  path: /metadata/name\n  value: elsewhere\n",
			}}
		}},
		{"kind-patch", "PatchNotAllowed", func(s *webappv1.SimpleWebApp) {
			s.Spec.Patches = []webappv1.Patch{{
				Target: webappv1.PatchTarget{Kind: "Service"},
				Patch:  "- op: replace\n  path: /kind\n  value: Secret\n",
			}}
		}},
		{"broken-patch", "RenderFailed", func(s *webappv1.SimpleWebApp) {
			s.Spec.Patches = []webappv1.Patch{{
				Target: webappv1.PatchTarget{Kind: "Deployment"},
				Patch:  "- op: replace\n  path: /spec/nosuch/field\n  value: 1\n",
			}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := testkit.Namespace(t, k8s, testNS)
			create(t, newWebApp(ns, "stall", 2, "last good"))
			d := deployment(t, ns, "stall", "Deployment of the good generation", func(*appsv1.Deployment) (bool, string) { return true, "" })
			markRolledOut(t, d)
			good := waitCondition(t, ns, "stall", webappv1.ConditionReady, metav1.ConditionTrue, "Available")
			before := snapshot(t, ns)

			bad := update(t, ns, "stall", func(s *webappv1.SimpleWebApp) {
				s.Spec.Message = "never applied"
				tc.change(s)
			})
			got := waitCondition(t, ns, "stall", webappv1.ConditionStalled, metav1.ConditionTrue, tc.reason)
			if got.Status.AppliedGeneration != good.Generation || got.Status.ObservedGeneration != bad.Generation || bad.Generation == good.Generation {
				t.Errorf("appliedGeneration/observedGeneration = %d/%d, want the last good generation %d and the bad one %d",
					got.Status.AppliedGeneration, got.Status.ObservedGeneration, good.Generation, bad.Generation)
			}
			if c, _ := condition(t, ns, "stall", webappv1.ConditionReady); c == nil {
				t.Fatal("no Ready condition")
			} else if ready := findCondition(got, webappv1.ConditionReady); ready.Status != metav1.ConditionFalse || ready.Reason != tc.reason {
				t.Errorf("Ready = %+v, want False/%s", ready, tc.reason)
			}
			if got.Status.Version != testkit.ChannelVersion(t, "stable") || got.Status.ReadyReplicas != 2 {
				t.Errorf("status lost the running version: %+v", got.Status)
			}
			testkit.WaitFor(t, timeout, "Warning event "+tc.reason, func(context.Context) (bool, string) {
				return hasEvent(t, ns, "stall", tc.reason), "no such event"
			})
			if after := snapshot(t, ns); after != before {
				t.Errorf("objects changed although the generation was not applied:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
}

func findCondition(swa *webappv1.SimpleWebApp, typ string) metav1.Condition {
	for _, c := range swa.Status.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return metav1.Condition{}
}

// snapshot names every object in ns with its resourceVersion.
func snapshot(t *testing.T, ns string) string {
	t.Helper()
	var b strings.Builder
	for _, list := range []client.ObjectList{&appsv1.DeploymentList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{}} {
		if err := k8s.List(context.Background(), list, client.InNamespace(ns), client.HasLabels{"app.kubernetes.io/instance"}); err != nil {
			t.Fatal(err)
		}
		items, _ := metaItems(list)
		for _, o := range items {
			b.WriteString(o.GetName() + "@" + o.GetResourceVersion() + " ")
		}
	}
	return b.String()
}

func metaItems(list client.ObjectList) ([]client.Object, error) {
	var out []client.Object
	switch l := list.(type) {
	case *appsv1.DeploymentList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ServiceList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *corev1.ConfigMapList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return out, nil
}

func hasEvent(t *testing.T, ns, name, reason string) bool {
	t.Helper()
	return eventWith(t, ns, name, reason, "")
}

// eventWith reports whether an event about name has reason and a note that
// contains text.
func eventWith(t *testing.T, ns, name, reason, text string) bool {
	t.Helper()
	events := &eventsv1.EventList{}
	if err := k8s.List(context.Background(), events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if e.Regarding.Name == name && e.Reason == reason && strings.Contains(e.Note, text) {
			return true
		}
	}
	return false
}
