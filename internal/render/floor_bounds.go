package render

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// fieldBound is an upper bound on a numeric field. A value above it is
// refused unless the package's own render has that value or more at the
// same place, so a package's default never fails.
type fieldBound[T any] struct {
	field string
	max   int64
	get   func(T) (int64, bool)
}

// deploymentBounds: a grace period of days keeps pods Terminating through
// node drains and cluster upgrades, a long minReadySeconds or progress
// deadline holds one of the operator's upgrade slots (shared by every
// SimpleWebApp) for as long, and every kept revision is a ReplicaSet in etcd.
var deploymentBounds = []fieldBound[*appsv1.Deployment]{
	{"spec.template.spec.terminationGracePeriodSeconds", 300, func(d *appsv1.Deployment) (int64, bool) {
		return opt(d.Spec.Template.Spec.TerminationGracePeriodSeconds)
	}},
	{"spec.revisionHistoryLimit", 10, func(d *appsv1.Deployment) (int64, bool) { return opt(d.Spec.RevisionHistoryLimit) }},
	{"spec.progressDeadlineSeconds", 3600, func(d *appsv1.Deployment) (int64, bool) { return opt(d.Spec.ProgressDeadlineSeconds) }},
	{"spec.minReadySeconds", 300, func(d *appsv1.Deployment) (int64, bool) { return int64(d.Spec.MinReadySeconds), true }},
}

// probeBounds: probes that start late, run rarely or tolerate many failures
// keep a pod that does not serve counted Ready, and so hold up the health
// gate of an upgrade (and its slot) as long.
var probeBounds = []fieldBound[*corev1.Probe]{
	{"initialDelaySeconds", 300, func(p *corev1.Probe) (int64, bool) { return int64(p.InitialDelaySeconds), true }},
	{"periodSeconds", 300, func(p *corev1.Probe) (int64, bool) { return int64(p.PeriodSeconds), true }},
	{"timeoutSeconds", 60, func(p *corev1.Probe) (int64, bool) { return int64(p.TimeoutSeconds), true }},
	{"failureThreshold", 30, func(p *corev1.Probe) (int64, bool) { return int64(p.FailureThreshold), true }},
	{"successThreshold", 10, func(p *corev1.Probe) (int64, bool) { return int64(p.SuccessThreshold), true }},
	{"terminationGracePeriodSeconds", 300, func(p *corev1.Probe) (int64, bool) { return opt(p.TerminationGracePeriodSeconds) }},
}

func opt[T int32 | int64](p *T) (int64, bool) {
	if p == nil {
		return 0, false
	}
	return int64(*p), true
}

// fieldsWithinBounds: the Deployment's timing and history fields, and every
// probe's, stay under the bounds above (or the package's own values).
func fieldsWithinBounds(o *unstructured.Unstructured, in *floorInput) (string, string, bool) {
	d, err := in.deployment(o)
	if err != nil || d == nil {
		return "", "", false
	}
	base, _ := in.deployment(in.base[Identity(o)])
	for _, b := range deploymentBounds {
		if msg := exceeds(b, d, base, b.field); msg != "" {
			return "bounds", msg, true
		}
	}
	var baseSpec *corev1.PodSpec
	if base != nil {
		baseSpec = &base.Spec.Template.Spec
	}
	for _, list := range []struct {
		field      string
		containers func(*corev1.PodSpec) []corev1.Container
	}{
		{"initContainers", func(s *corev1.PodSpec) []corev1.Container { return s.InitContainers }},
		{"containers", func(s *corev1.PodSpec) []corev1.Container { return s.Containers }},
	} {
		for _, c := range list.containers(&d.Spec.Template.Spec) {
			var bc *corev1.Container
			if baseSpec != nil {
				bcs := list.containers(baseSpec)
				for i := range bcs {
					if bcs[i].Name == c.Name {
						bc = &bcs[i]
					}
				}
			}
			for _, probe := range []struct {
				field string
				get   func(*corev1.Container) *corev1.Probe
			}{
				{"livenessProbe", func(c *corev1.Container) *corev1.Probe { return c.LivenessProbe }},
				{"readinessProbe", func(c *corev1.Container) *corev1.Probe { return c.ReadinessProbe }},
				{"startupProbe", func(c *corev1.Container) *corev1.Probe { return c.StartupProbe }},
			} {
				p := probe.get(&c)
				if p == nil {
					continue
				}
				var bp *corev1.Probe
				if bc != nil {
					bp = probe.get(bc)
				}
				for _, b := range probeBounds {
					path := fmt.Sprintf("spec.template.spec.%s[name=%s].%s.%s", list.field, c.Name, probe.field, b.field)
					if msg := exceeds(b, p, bp, path); msg != "" {
						return "bounds", msg, true
					}
				}
			}
		}
	}
	return "", "", false
}

// exceeds says how got's field is over its bound, or "". A nil base has no
// value of its own.
func exceeds[T comparable](b fieldBound[T], got, base T, path string) string {
	v, ok := b.get(got)
	if !ok || v <= b.max {
		return ""
	}
	var zero T
	if base != zero {
		if bv, ok := b.get(base); ok && v <= bv {
			return ""
		}
	}
	return fmt.Sprintf("%s is %d, more than the maximum of %d", path, v, b.max)
}
