package main

import (
	"fmt"
	"strings"
)

// column is one operator build's column of the table.
type column struct {
	name string
	op   *opResult
}

// figure is one row of the table: the bare client's value, already
// rendered, and how to render an operator column's.
type figure struct {
	label string
	bare  string
	op    func(o *opResult) string
}

// table renders the results as Markdown, one column per side.
func table(r *result) string {
	var b strings.Builder
	writeTableHeading(&b, r)
	cols := []column{{"operator", r.Operator}}
	if r.Baseline != nil {
		cols = append(cols, column{"baseline " + r.BaselineRev, r.Baseline})
	}
	writeColumnHeads(&b, cols)
	for _, f := range append(comparedFigures(r), operatorFigures(float64(r.N))...) {
		writeFigure(&b, f, cols)
	}
	if r.Hostile != nil {
		b.WriteString(hostileTable(r.Hostile))
	}
	for _, c := range cols {
		if c.op != nil && c.op.HeapTop != "" {
			fmt.Fprintf(&b, "\nheap of the %s after the restart (inuse_space):\n%s\n", c.name, c.op.HeapTop)
		}
	}
	return b.String()
}

// writeTableHeading writes the run's circumstances: when, where, which
// commit, and the settings.
func writeTableHeading(b *strings.Builder, r *result) {
	fmt.Fprintf(b, "\n%s, %s, load average %s (before) %s (after), commit %s, N=%d SimpleWebApps of 1 replica in %d namespace(s)\n",
		r.Date, r.Machine, r.LoadBefore, r.LoadAfter, r.Commit, r.N, r.Namespaces)
	for k, v := range r.Settings {
		fmt.Fprintf(b, "  %s: %s\n", k, v)
	}
}

// writeColumnHeads writes the table's header and separator lines.
func writeColumnHeads(b *strings.Builder, cols []column) {
	b.WriteString("\n| figure | bare SSA client |")
	for _, c := range cols {
		fmt.Fprintf(b, " %s |", c.name)
	}
	b.WriteString("\n|---|---|")
	for range cols {
		b.WriteString("---|")
	}
	b.WriteString("\n")
}

// writeFigure writes the row of f; a column that was not run shows "–".
func writeFigure(b *strings.Builder, f figure, cols []column) {
	fmt.Fprintf(b, "| %s | %s |", f.label, f.bare)
	for _, c := range cols {
		v := "–"
		if c.op != nil {
			v = f.op(c.op)
		}
		fmt.Fprintf(b, " %s |", v)
	}
	b.WriteString("\n")
}

// comparedFigures are the rows the bare client has a figure of too (or,
// for the creates, where its figure is).
func comparedFigures(r *result) []figure {
	n := float64(r.N)
	bare := func(f func(*bareResult) string) string {
		if r.Bare == nil {
			return "–"
		}
		return f(r.Bare)
	}
	// ratio is an operator's time to applied over the bare client's.
	ratio := func(x float64) string {
		if r.Bare == nil || r.Bare.AppliedSeconds == 0 {
			return ""
		}
		return fmt.Sprintf(" (%.2f×)", x/r.Bare.AppliedSeconds)
	}
	return []figure{
		{"create the CRs", "(within applied)", func(o *opResult) string { return fmt.Sprintf("%.1f s", o.CreateSeconds) }},
		{"all applied (operator: every observedGeneration current and every Deployment created)", bare(func(x *bareResult) string { return fmt.Sprintf("%.1f s", x.AppliedSeconds) }),
			func(o *opResult) string { return fmt.Sprintf("%.1f s%s", o.AppliedSeconds, ratio(o.AppliedSeconds)) }},
		{"applied: a quarter / half / three quarters / all of the apps", bare(func(x *bareResult) string { return quarters(x.AppliedQuartiles) }),
			func(o *opResult) string { return quarters(o.AppliedQuartiles) }},
		{"CPU seconds until applied", bare(func(x *bareResult) string { return controlPlaneCPUText(x.ControlPlaneCPU) }),
			func(o *opResult) string {
				return fmt.Sprintf("operator %.1f, %s", o.OperatorCPUToApplied, controlPlaneCPUText(o.ControlPlaneCPU))
			}},
		{"all Ready", bare(func(x *bareResult) string { return fmt.Sprintf("%.1f s", x.ReadySeconds) }),
			func(o *opResult) string { return fmt.Sprintf("%.1f s", o.ReadySeconds) }},
		{"API server time per request, mean (the slowest three kinds)", bare(func(x *bareResult) string { return x.Requests.slowest(3) }),
			func(o *opResult) string { return o.Requests.slowest(3) }},
		{"requests until quiet, per app", bare(func(x *bareResult) string {
			return fmt.Sprintf("%.2f (%s)", float64(x.Requests.Total)/n, x.Requests.verbs())
		}), func(o *opResult) string {
			return fmt.Sprintf("%.2f (%s)", float64(o.Requests.Total)/n, o.Requests.verbs())
		}},
		{"requests per rendered object (without status writes, events and the CR creates)", bare(func(x *bareResult) string {
			return fmt.Sprintf("%.2f", float64(x.Requests.Total-x.Requests.count("create", "simplewebapps"))/float64(x.Objects))
		}), func(o *opResult) string {
			return fmt.Sprintf("%.2f (%d objects)", float64(o.Requests.objectRequests())/float64(max(o.Objects, 1)), o.Objects)
		}},
	}
}

// operatorFigures are the rows only an operator has a figure of, n apps.
func operatorFigures(n float64) []figure {
	return []figure{
		{"status writes / events per app", "–", func(o *opResult) string {
			return fmt.Sprintf("%.2f / %.2f", float64(o.Requests.StatusWrite)/n, float64(o.Requests.Events)/n)
		}},
		{"reconciles per app", "–", func(o *opResult) string { return fmt.Sprintf("%.2f", o.Reconciles/n) }},
		{"operator CPU, create → quiet", "–", func(o *opResult) string { return fmt.Sprintf("%.1f s", o.CPUSeconds) }},
		{"operator peak RSS (after a restart)", "–", func(o *opResult) string {
			return fmt.Sprintf("%.0f MiB (%.0f MiB)", o.Stats.PeakRSSMiB, o.Restart.Stats.PeakRSSMiB)
		}},
		{"restart, nothing changed: requests", "–", func(o *opResult) string {
			return fmt.Sprintf("%d (%s)", o.Restart.Requests.Total, o.Restart.Requests.verbs())
		}},
		{"restart: objects with a new resourceVersion", "–", func(o *opResult) string {
			return fmt.Sprintf("%d of %d", o.Restart.ObjectsChanged, o.Restart.ObjectsChecked)
		}},
		{"a child's status change (pod deleted): requests", "–", func(o *opResult) string {
			return fmt.Sprintf("%d (%s)", o.ChildStatus.Requests.Total, o.ChildStatus.Requests.verbs())
		}},
		{"drift: Service deleted → back; objects written", "–", func(o *opResult) string {
			return fmt.Sprintf("%.2f s; %s", o.DriftDelete.Seconds, strings.Join(o.DriftDelete.Requests.Objects, ", "))
		}},
		{"drift: Service label edited → back; objects written", "–", func(o *opResult) string {
			return fmt.Sprintf("%.2f s; %s", o.DriftEdit.Seconds, strings.Join(o.DriftEdit.Requests.Objects, ", "))
		}},
		{"channel move: all on the new version and Ready", "–", func(o *opResult) string {
			if o.ChannelMove == nil {
				return "not run"
			}
			cm := o.ChannelMove
			return fmt.Sprintf("%.1f s, max %d upgrades in flight, %d failed upgrades (rollbacks %.0f), %.2f requests/app", cm.Seconds, cm.MaxInFlight, cm.FailedUpgrades, cm.Rollbacks, float64(cm.Requests.Total)/n)
		}},
		{"channel move: CPU seconds (stolen by the host)", "–", func(o *opResult) string {
			if o.ChannelMove == nil {
				return "not run"
			}
			cm := o.ChannelMove
			return fmt.Sprintf("operator %.1f, %s (%.1f)", cm.OperatorCPU, controlPlaneCPUText(cm.ControlPlaneCPU), cm.StealSeconds)
		}},
	}
}

// quarters renders AppliedQuartiles.
func quarters(q []float64) string {
	if len(q) != 4 {
		return "–"
	}
	return fmt.Sprintf("%.1f / %.1f / %.1f / %.1f s", q[0], q[1], q[2], q[3])
}

// controlPlaneCPUText renders a controlPlaneCPU difference.
func controlPlaneCPUText(m map[string]float64) string {
	return fmt.Sprintf("apiserver %.1f, etcd %.1f, controller-manager %.1f, scheduler %.1f, kwok %.1f",
		m["kube-apiserver"], m["etcd"], m["kube-controller-manager"], m["kube-scheduler"], m["kwok"])
}
