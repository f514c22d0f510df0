package promql

import (
	"slices"
	"testing"
)

// TestRefs checks what the drift checks of tests/operations rely on: the
// metrics, the label matchers per metric and the grouping labels of
// expressions as dashboards and alerts write them (Grafana variables
// included), and that malformed expressions and expressions without a metric
// are errors.
func TestRefs(t *testing.T) {
	for _, c := range []struct {
		expr     string
		metrics  []string
		grouping []string
		matchers map[string][]string
	}{
		{`simplewebapp_ready == 0`, []string{"simplewebapp_ready"}, nil, nil},
		{`histogram_quantile(0.99, sum by (controller, le) (rate(controller_runtime_reconcile_time_seconds_bucket{controller="simplewebapp"}[$__rate_interval])))`,
			[]string{"controller_runtime_reconcile_time_seconds_bucket"}, []string{"controller", "le"},
			map[string][]string{"controller_runtime_reconcile_time_seconds_bucket": {"controller"}}},
		{`count(simplewebapp_stalled{namespace=~"$namespace", reason!="a,b}"} == 1) or vector(0)`,
			[]string{"simplewebapp_stalled"}, nil, map[string][]string{"simplewebapp_stalled": {"namespace", "reason"}}},
		{`sum(rate(a_total[5m] offset 1h)) without (instance) / on (job) group_left b`, []string{"a_total", "b"}, []string{"instance", "job"}, nil},
		{`absent(controller_runtime_reconcile_total{controller="simplewebapp"})`, []string{"controller_runtime_reconcile_total"}, nil, nil},
		{`sum by (le) (rate(x_bucket{job="$job"}[${__range}:$__interval]))`, []string{"x_bucket"}, []string{"le"}, map[string][]string{"x_bucket": {"job"}}},
		{`{__name__="y", a="b"} / ignoring (a) group_right (c) z`, []string{"y", "z"}, []string{"a", "c"}, map[string][]string{"y": {"a"}}},
	} {
		ref, err := Refs(c.expr)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if !slices.Equal(ref.Metrics, c.metrics) {
			t.Errorf("%s: metrics %v, want %v", c.expr, ref.Metrics, c.metrics)
		}
		if !slices.Equal(ref.Grouping, c.grouping) {
			t.Errorf("%s: grouping %v, want %v", c.expr, ref.Grouping, c.grouping)
		}
		for m, want := range c.matchers {
			if !slices.Equal(ref.Matchers[m], want) {
				t.Errorf("%s: matchers of %s %v, want %v", c.expr, m, ref.Matchers[m], want)
			}
		}
	}
	for _, bad := range []string{`sum(rate(x[5m])`, `vector(0)`, `x{a="b"`, `rate(x[$__rate_interval)`, `{a="b"}`} {
		if ref, err := Refs(bad); err == nil {
			t.Errorf("%s: no error (%+v)", bad, ref)
		}
	}
}
