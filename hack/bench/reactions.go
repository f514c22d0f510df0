package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/simplewebapp-operator/internal/render"
)

// childStatusChange deletes app-0's pod: the ReplicaSet makes another, and
// the Deployment's status goes down and up again.
func childStatusChange(ctx context.Context, e *env, o opts) (phase, error) {
	app := newApp(0, o)
	sel := client.MatchingLabels{render.LabelInstance: app.Name}
	pods := &corev1.PodList{}
	if err := e.C.List(ctx, pods, client.InNamespace(app.Namespace), sel); err != nil || len(pods.Items) == 0 {
		return phase{}, fmt.Errorf("pods of %s: %d, %v", app.Name, len(pods.Items), err)
	}
	old := pods.Items[0].Name
	mark := e.audit.mark()
	t0 := time.Now()
	if err := e.C.Delete(ctx, &pods.Items[0]); err != nil {
		return phase{}, err
	}
	_, ok := waitUntil(2*time.Minute, func() bool {
		l := &corev1.PodList{}
		if e.C.List(ctx, l, client.InNamespace(app.Namespace), sel) != nil {
			return false
		}
		for _, p := range l.Items {
			if p.Name != old && p.DeletionTimestamp == nil && podReady(&p) {
				return true
			}
		}
		return false
	}, func() string { return "a new ready pod of " + app.Name })
	if !ok {
		return phase{}, fmt.Errorf("no new pod of %s", app.Name)
	}
	d := time.Since(t0)
	e.audit.waitQuiet(operatorUser, o.quiet, 2*time.Minute)
	return phase{Seconds: d.Seconds(), Requests: summarise(e.audit.since(mark, operatorUser), true)}, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// driftDelete deletes app-1's Service and times until it is back.
func driftDelete(ctx context.Context, e *env, o opts) (phase, error) {
	app := newApp(1%o.n, o)
	key := types.NamespacedName{Namespace: app.Namespace, Name: app.Name + "-web"}
	svc := &corev1.Service{}
	if err := e.C.Get(ctx, key, svc); err != nil {
		return phase{}, err
	}
	uid := svc.UID
	mark := e.audit.mark()
	if err := e.C.Delete(ctx, svc); err != nil {
		return phase{}, err
	}
	d, ok := waitUntil(time.Minute, func() bool {
		s := &corev1.Service{}
		return e.C.Get(ctx, key, s) == nil && s.UID != uid
	}, func() string { return "Service " + key.String() + " back" })
	if !ok {
		return phase{}, fmt.Errorf("the Service %s was not recreated", key)
	}
	e.audit.waitQuiet(operatorUser, o.quiet, 2*time.Minute)
	return phase{Seconds: d.Seconds(), Requests: summarise(e.audit.since(mark, operatorUser), true)}, nil
}

// driftEdit changes a label the operator set on app-2's Service, as another
// field manager, and times until it is back.
func driftEdit(ctx context.Context, e *env, o opts) (phase, error) {
	app := newApp(2%o.n, o)
	key := types.NamespacedName{Namespace: app.Namespace, Name: app.Name + "-web"}
	const label = "app.kubernetes.io/component"
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
	mark := e.audit.mark()
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"labels":{"`+label+`":"hand-edited"}}}`))
	if err := e.C.Patch(ctx, svc, patch, client.FieldOwner("bench-hand-edit")); err != nil {
		return phase{}, err
	}
	d, ok := waitUntil(time.Minute, func() bool {
		s := &corev1.Service{}
		return e.C.Get(ctx, key, s) == nil && s.Labels[label] == "web"
	}, func() string { return "label of Service " + key.String() + " back" })
	if !ok {
		return phase{}, fmt.Errorf("label of Service %s not corrected", key)
	}
	e.audit.waitQuiet(operatorUser, o.quiet, 2*time.Minute)
	return phase{Seconds: d.Seconds(), Requests: summarise(e.audit.since(mark, operatorUser), true)}, nil
}
