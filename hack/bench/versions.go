package main

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/simplewebapp-operator/internal/render"
)

// childLists are empty lists of the kinds the bench's apps are made of.
func childLists() []client.ObjectList {
	return []client.ObjectList{&appsv1.DeploymentList{}, &corev1.ServiceList{}, &corev1.ConfigMapList{}}
}

// childVersions are the resourceVersions of every managed child.
func childVersions(ctx context.Context, c client.Client) (map[string]string, error) {
	out := map[string]string{}
	sel := client.MatchingLabels{render.LabelManagedBy: render.ManagerName}
	for _, l := range childLists() {
		if err := c.List(ctx, l, sel); err != nil {
			return nil, err
		}
		items, _ := metaItems(l)
		for _, m := range items {
			out[fmt.Sprintf("%T %s/%s", l, m.GetNamespace(), m.GetName())] = m.GetResourceVersion()
		}
	}
	return out, nil
}

// allVersions adds the SimpleWebApps to childVersions.
func allVersions(ctx context.Context, c client.Client) (map[string]string, error) {
	out, err := childVersions(ctx, c)
	if err != nil {
		return nil, err
	}
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(schemeGVK("example.com", "v1", "SimpleWebAppList"))
	if err := c.List(ctx, l); err != nil {
		return nil, err
	}
	for _, m := range l.Items {
		out["SimpleWebApp "+m.Namespace+"/"+m.Name] = m.ResourceVersion
	}
	return out, nil
}

// metaItems are the items of the list l, as their object metadata.
func metaItems(l runtime.Object) ([]metaObject, error) {
	objs, err := apimeta.ExtractList(l)
	if err != nil {
		return nil, err
	}
	out := make([]metaObject, 0, len(objs))
	for _, o := range objs {
		m, err := apimeta.Accessor(o)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

type metaObject interface {
	GetNamespace() string
	GetName() string
	GetResourceVersion() string
}

func schemeGVK(group, version, kind string) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: group, Version: version, Kind: kind}
}
