package main

import (
	"fmt"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

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

// table renders the results as Markdown, one column per side.
func table(r *result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\n%s, %s, load average %s (before) %s (after), commit %s, N=%d SimpleWebApps of 1 replica in %d namespace(s)\n",
		r.Date, r.Machine, r.LoadBefore, r.LoadAfter, r.Commit, r.N, r.Namespaces)
	for k, v := range r.Settings {
		fmt.Fprintf(&b, "  %s: %s\n", k, v)
	}
	type col struct {
		name string
		op   *opResult
	}
	cols := []col{{"operator", r.Operator}}
	if r.Baseline != nil {
		cols = append(cols, col{"baseline " + r.BaselineRev, r.Baseline})
	}
	b.WriteString("\n| figure | bare SSA client |")
	for _, c := range cols {
		fmt.Fprintf(&b, " %s |", c.name)
	}
	b.WriteString("\n|---|---|")
	for range cols {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	n := float64(r.N)
	row := func(name, bare string, f func(o *opResult) string) {
		fmt.Fprintf(&b, "| %s | %s |", name, bare)
		for _, c := range cols {
			v := "–"
			if c.op != nil {
				v = f(c.op)
			}
			fmt.Fprintf(&b, " %s |", v)
		}
		b.WriteString("\n")
	}
	bare := func(f func(*bareResult) string) string {
		if r.Bare == nil {
			return "–"
		}
		return f(r.Bare)
	}
	ratio := func(x float64) string {
		if r.Bare == nil || r.Bare.AppliedSeconds == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.2f×)", x/r.Bare.AppliedSeconds)
	}
	row("create the CRs", "(within applied)", func(o *opResult) string { return fmt.Sprintf("%.1f s", o.CreateSeconds) })
	row("all applied (operator: every observedGeneration current and every Deployment created)", bare(func(x *bareResult) string { return fmt.Sprintf("%.1f s", x.AppliedSeconds) }),
		func(o *opResult) string { return fmt.Sprintf("%.1f s%s", o.AppliedSeconds, ratio(o.AppliedSeconds)) })
	quarters := func(q []float64) string {
		if len(q) != 4 {
			return "–"
		}
		return fmt.Sprintf("%.1f / %.1f / %.1f / %.1f s", q[0], q[1], q[2], q[3])
	}
	row("applied: a quarter / half / three quarters / all of the apps", bare(func(x *bareResult) string { return quarters(x.AppliedQuartiles) }),
		func(o *opResult) string { return quarters(o.AppliedQuartiles) })
	cp := func(m map[string]float64) string {
		return fmt.Sprintf("apiserver %.1f, etcd %.1f, controller-manager %.1f, scheduler %.1f, kwok %.1f",
			m["kube-apiserver"], m["etcd"], m["kube-controller-manager"], m["kube-scheduler"], m["kwok"])
	}
	row("CPU seconds until applied", bare(func(x *bareResult) string { return cp(x.ControlPlaneCPU) }),
		func(o *opResult) string {
			return fmt.Sprintf("operator %.1f, %s", o.OperatorCPUToApplied, cp(o.ControlPlaneCPU))
		})
	row("all Ready", bare(func(x *bareResult) string { return fmt.Sprintf("%.1f s", x.ReadySeconds) }),
		func(o *opResult) string { return fmt.Sprintf("%.1f s", o.ReadySeconds) })
	row("API server time per request, mean (the slowest three kinds)", bare(func(x *bareResult) string { return x.Requests.slowest(3) }),
		func(o *opResult) string { return o.Requests.slowest(3) })
	row("requests until quiet, per app", bare(func(x *bareResult) string {
		return fmt.Sprintf("%.2f (%s)", float64(x.Requests.Total)/n, x.Requests.verbs())
	}), func(o *opResult) string {
		return fmt.Sprintf("%.2f (%s)", float64(o.Requests.Total)/n, o.Requests.verbs())
	})
	row("requests per rendered object (without status writes, events and the CR creates)", bare(func(x *bareResult) string {
		return fmt.Sprintf("%.2f", float64(x.Requests.Total-x.Requests.count("create", "simplewebapps"))/float64(x.Objects))
	}), func(o *opResult) string {
		return fmt.Sprintf("%.2f (%d objects)", float64(o.Requests.objectRequests())/float64(max(o.Objects, 1)), o.Objects)
	})
	row("status writes / events per app", "–", func(o *opResult) string {
		return fmt.Sprintf("%.2f / %.2f", float64(o.Requests.StatusWrite)/n, float64(o.Requests.Events)/n)
	})
	row("reconciles per app", "–", func(o *opResult) string { return fmt.Sprintf("%.2f", o.Reconciles/n) })
	row("operator CPU, create → quiet", "–", func(o *opResult) string { return fmt.Sprintf("%.1f s", o.CPUSeconds) })
	row("operator peak RSS (after a restart)", "–", func(o *opResult) string {
		return fmt.Sprintf("%.0f MiB (%.0f MiB)", o.Stats.PeakRSSMiB, o.Restart.Stats.PeakRSSMiB)
	})
	row("restart, nothing changed: requests", "–", func(o *opResult) string {
		return fmt.Sprintf("%d (%s)", o.Restart.Requests.Total, o.Restart.Requests.verbs())
	})
	row("restart: objects with a new resourceVersion", "–", func(o *opResult) string {
		return fmt.Sprintf("%d of %d", o.Restart.ObjectsChanged, o.Restart.ObjectsChecked)
	})
	row("a child's status change (pod deleted): requests", "–", func(o *opResult) string {
		return fmt.Sprintf("%d (%s)", o.ChildStatus.Requests.Total, o.ChildStatus.Requests.verbs())
	})
	row("drift: Service deleted → back; objects written", "–", func(o *opResult) string {
		return fmt.Sprintf("%.2f s; %s", o.DriftDelete.Seconds, strings.Join(o.DriftDelete.Requests.Objects, ", "))
	})
	row("drift: Service label edited → back; objects written", "–", func(o *opResult) string {
		return fmt.Sprintf("%.2f s; %s", o.DriftEdit.Seconds, strings.Join(o.DriftEdit.Requests.Objects, ", "))
	})
	row("channel move: all on the new version and Ready", "–", func(o *opResult) string {
		if o.ChannelMove == nil {
			return "not run"
		}
		cm := o.ChannelMove
		return fmt.Sprintf("%.1f s, max %d upgrades in flight, %d failed upgrades (rollbacks %.0f), %.2f requests/app", cm.Seconds, cm.MaxInFlight, cm.FailedUpgrades, cm.Rollbacks, float64(cm.Requests.Total)/n)
	})
	for _, c := range cols {
		if c.op != nil && c.op.HeapTop != "" {
			fmt.Fprintf(&b, "\nheap of the %s after the restart (inuse_space):\n%s\n", c.name, c.op.HeapTop)
		}
	}
	return b.String()
}
