// Command helmdocs writes the values table of a chart's README.md from the
// `# --` comments of its values.yaml (the helm-docs convention), between the
// markers <!-- values:begin --> and <!-- values:end -->. Every value must be
// documented, on itself or on a parent. With -check it changes nothing and
// fails if README.md is not current (tests/helm runs it).
//
//	go run ./hack/helmdocs [-check] config/helm/simplewebapp-operator
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"
)

const (
	begin = "<!-- values:begin -->"
	end   = "<!-- values:end -->"
)

func main() {
	check := flag.Bool("check", false, "fail if README.md is not current instead of writing it")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: helmdocs [-check] CHART_DIR")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), *check); err != nil {
		fmt.Fprintln(os.Stderr, "helmdocs:", err)
		os.Exit(1)
	}
}

func run(dir string, check bool) error {
	values, err := os.ReadFile(filepath.Join(dir, "values.yaml"))
	if err != nil {
		return err
	}
	table, err := Table(values)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, "README.md")
	readme, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	i, j := bytes.Index(readme, []byte(begin)), bytes.Index(readme, []byte(end))
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %s ... %s markers", path, begin, end)
	}
	out := append(append(append([]byte{}, readme[:i+len(begin)]...), "\n"+table...), readme[j:]...)
	if bytes.Equal(out, readme) {
		return nil
	}
	if check {
		return fmt.Errorf("%s is not current: run make helm-docs", path)
	}
	return os.WriteFile(path, out, 0o644)
}

var keyLine = regexp.MustCompile(`^(\s*)([A-Za-z0-9_]+):(.*)$`)

// entry is a documented value: its dotted path and its `# --` comment.
type entry struct{ path, doc string }

// Table is the Markdown values table of values.yaml.
func Table(values []byte) (string, error) {
	var parsed map[string]any
	if err := yaml.Unmarshal(values, &parsed); err != nil {
		return "", err
	}
	entries := documentedValues(string(values))
	documented := map[string]bool{}
	for _, e := range entries {
		documented[e.path] = true
	}
	if undocumented := undocumentedValues(parsed, documented); len(undocumented) > 0 {
		return "", fmt.Errorf("values without a `# --` comment on themselves or a parent: %v", undocumented)
	}
	return markdownTable(parsed, entries)
}

// documentedValues are the values with a `# --` comment right above their
// key, in the order of values.yaml. It reads the text, not the parsed YAML,
// which has no comments; a key's path comes from the indents above it.
func documentedValues(values string) []entry {
	type key struct {
		indent int
		name   string
	}
	var entries []entry
	var stack []key
	var doc []string
	inDoc := false
	for _, line := range strings.Split(values, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "# --") {
			doc, inDoc = []string{strings.TrimSpace(strings.TrimPrefix(trimmed, "# --"))}, true
			continue
		}
		if inDoc && strings.HasPrefix(trimmed, "#") {
			doc = append(doc, strings.TrimSpace(strings.TrimPrefix(trimmed, "#")))
			continue
		}
		m := keyLine.FindStringSubmatch(line)
		if m == nil {
			if trimmed == "" || strings.HasPrefix(trimmed, "#") {
				inDoc = false
				doc = nil
			}
			continue
		}
		indent := len(m[1])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		stack = append(stack, key{indent, m[2]})
		var keys []string
		for _, s := range stack {
			keys = append(keys, s.name)
		}
		path := strings.Join(keys, ".")
		if inDoc {
			entries = append(entries, entry{path, strings.Join(doc, " ")})
		}
		inDoc, doc = false, nil
	}
	return entries
}

// undocumentedValues are the leaves of parsed documented neither on
// themselves nor on a parent.
func undocumentedValues(parsed map[string]any, documented map[string]bool) []string {
	var undocumented []string
	var walk func(prefix string, v any, covered bool)
	walk = func(prefix string, v any, covered bool) {
		covered = covered || documented[prefix]
		if m, ok := v.(map[string]any); ok && len(m) > 0 && !documented[prefix] {
			for k, sub := range m {
				p := k
				if prefix != "" {
					p = prefix + "." + k
				}
				walk(p, sub, covered)
			}
			return
		}
		if !covered {
			undocumented = append(undocumented, prefix)
		}
	}
	walk("", parsed, false)
	return undocumented
}

// markdownTable is the table of entries: each value's type and default from
// parsed, its description from the comment.
func markdownTable(parsed map[string]any, entries []entry) (string, error) {
	var b strings.Builder
	b.WriteString("| value | type | default | description |\n|---|---|---|---|\n")
	for _, e := range entries {
		v := lookup(parsed, strings.Split(e.path, "."))
		def, err := json.Marshal(v)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", e.path, typeOf(v), strings.ReplaceAll(string(def), "|", `\|`), strings.ReplaceAll(e.doc, "|", `\|`))
	}
	return b.String(), nil
}

func lookup(v any, path []string) any {
	for _, k := range path {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

func typeOf(v any) string {
	switch v.(type) {
	case map[string]any:
		return "object"
	case []any:
		return "list"
	case string:
		return "string"
	case bool:
		return "bool"
	case float64:
		return "int"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}
