// Package promql says what a PromQL expression of a dashboard or an alert
// refers to, with Prometheus' own parser: the metric names, the label names
// each selector matches on, and the label names it groups or matches by.
// tests/operations checks these against what the operator serves.
//
// It is a module of its own (tests/promql/go.mod), so that the main module
// does not depend on github.com/prometheus/prometheus: tests/operations runs
// its command, ./cmd/promqlrefs, and `make test` runs its tests.
package promql

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Ref is what an expression refers to.
type Ref struct {
	// Metrics are the metric names of its selectors, sorted.
	Metrics []string `json:"metrics"`
	// Matchers are, per metric, the label names its selectors match on, in
	// the order written (__name__ excluded).
	Matchers map[string][]string `json:"matchers,omitempty"`
	// Grouping are the label names of by/without, on/ignoring and
	// group_left/group_right lists, sorted, without repeats.
	Grouping []string `json:"grouping,omitempty"`
}

// grafanaVar is a Grafana template variable: $name, ${name} or ${name:format}.
var grafanaVar = regexp.MustCompile(`\$(?:\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)`)

// withoutGrafanaVariables replaces the Grafana variables that stand outside
// string literals: in a range or subquery ([$__rate_interval]) with a
// duration, elsewhere with a number. Variables inside strings (label values
// such as =~"$namespace") are valid PromQL as they are.
func withoutGrafanaVariables(expr string) string {
	var b strings.Builder
	inBrackets := 0
	for i := 0; i < len(expr); {
		switch c := expr[i]; c {
		case '"', '\'', '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			j = min(j+1, len(expr))
			b.WriteString(expr[i:j])
			i = j
		case '$':
			m := grafanaVar.FindString(expr[i:])
			if m == "" {
				b.WriteByte(c)
				i++
				continue
			}
			if inBrackets > 0 {
				b.WriteString("5m")
			} else {
				b.WriteString("1")
			}
			i += len(m)
		default:
			switch c {
			case '[':
				inBrackets++
			case ']':
				inBrackets--
			}
			b.WriteByte(c)
			i++
		}
	}
	return b.String()
}

// Refs parses expr (Grafana variables allowed) and says what it refers to.
// An expression that names no metric is an error: it checks nothing the
// operator serves.
func Refs(expr string) (Ref, error) {
	ast, err := parser.NewParser(parser.Options{}).ParseExpr(withoutGrafanaVariables(expr))
	if err != nil {
		return Ref{}, fmt.Errorf("%q: %w", expr, err)
	}
	ref := Ref{Matchers: map[string][]string{}}
	metrics := map[string]bool{}
	var grouping []string
	parser.Inspect(ast, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			name := n.Name
			var matched []string
			for _, m := range n.LabelMatchers {
				if m.Name != model.MetricNameLabel {
					matched = append(matched, m.Name)
				} else if name == "" && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			if name == "" {
				err = errors.Join(err, fmt.Errorf("%q: selector %s has no metric name", expr, n))
				return nil
			}
			metrics[name] = true
			if len(matched) > 0 {
				ref.Matchers[name] = append(ref.Matchers[name], matched...)
			}
		case *parser.AggregateExpr:
			grouping = append(grouping, n.Grouping...)
		case *parser.BinaryExpr:
			if vm := n.VectorMatching; vm != nil {
				grouping = append(grouping, vm.MatchingLabels...)
				grouping = append(grouping, vm.Include...)
			}
		}
		return nil
	})
	if err != nil {
		return Ref{}, err
	}
	if len(metrics) == 0 {
		return Ref{}, fmt.Errorf("no metric name in %q", expr)
	}
	for m := range metrics {
		ref.Metrics = append(ref.Metrics, m)
	}
	slices.Sort(ref.Metrics)
	slices.Sort(grouping)
	ref.Grouping = slices.Compact(grouping)
	return ref, nil
}
