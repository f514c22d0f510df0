// Package docs checks that the documentation covers the public contract:
// every status reason has its section in docs/troubleshooting.md, and every
// alert's runbook_url a section that exists.
package docs

import (
	"os"
	"slices"
	"strings"
	"testing"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// sections returns the "### " sections under "## Reasons", by heading.
func sections(t *testing.T, path string) (map[string]string, []string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var order []string
	inReasons, current := false, ""
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			inReasons, current = strings.TrimSpace(line[3:]) == "Reasons", ""
		case inReasons && strings.HasPrefix(line, "### "):
			current = strings.TrimSpace(line[4:])
			order = append(order, current)
		case current != "":
			out[current] += line + "\n"
		}
	}
	return out, order
}

// conditionOnlyReasons are reasons of the conditions besides Ready,
// Reconciling and Stalled, which AllReasons does not list because those three
// never carry them.
var conditionOnlyReasons = []string{webappv1.ReasonVersionHalted}

// Every reason of api/v1/conditions.go has a section saying what it means and
// what to do, and every section is a reason that exists.
func TestEveryReasonHasASection(t *testing.T) {
	secs, order := sections(t, "../../docs/troubleshooting.md")
	reasons := append(webappv1.AllReasons(), conditionOnlyReasons...)
	for _, r := range reasons {
		body, ok := secs[r]
		if !ok {
			t.Errorf("docs/troubleshooting.md has no section \"### %s\" under \"## Reasons\"", r)
			continue
		}
		for _, part := range []string{"**What it means.**", "**What to do.**"} {
			if !strings.Contains(body, part) {
				t.Errorf("section %s lacks %s", r, part)
			}
		}
	}
	for _, h := range order {
		if !slices.Contains(reasons, h) {
			t.Errorf("section %q is not a reason of api/v1/conditions.go (renamed or removed?)", h)
		}
	}
	if len(order) != len(secs) {
		t.Errorf("a reason has more than one section: %v", order)
	}
}
