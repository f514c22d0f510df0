// Command promqlrefs reads a JSON array of PromQL expressions on stdin and
// writes, for each, what it refers to (promql.Ref) or why it does not parse:
// a JSON array of {"ref": ..., "error": ...} in the same order. tests/operations
// runs it with `go run` in this module.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"example.com/simplewebapp-operator/tests/promql"
)

type result struct {
	Ref   *promql.Ref `json:"ref,omitempty"`
	Error string      `json:"error,omitempty"`
}

func main() {
	var exprs []string
	if err := json.NewDecoder(os.Stdin).Decode(&exprs); err != nil {
		fmt.Fprintln(os.Stderr, "promqlrefs: reading a JSON array of expressions from stdin:", err)
		os.Exit(2)
	}
	out := make([]result, len(exprs))
	for i, e := range exprs {
		ref, err := promql.Refs(e)
		if err != nil {
			out[i].Error = err.Error()
		} else {
			out[i].Ref = &ref
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "promqlrefs:", err)
		os.Exit(1)
	}
}
