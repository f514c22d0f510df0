package testkit_test

import (
	"os"
	"strings"
	"testing"

	"example.com/simplewebapp-operator/internal/testkit"
)

// testdata/audit-sample.log was recorded from kube-apiserver with the
// policy of internal/localcluster (Options.AuditLog): three bootstrap writes of the
// API server, then as user admin: create namespace sample and ConfigMaps a
// and b (user agent simplewebapp-operator/...), a GET and a LIST (not
// logged), three merge patches of a (user agent rival/1.0), a delete of b
// and a create of a that failed with 409.
func TestReadAudit(t *testing.T) {
	events, err := testkit.ReadAudit("testdata/audit-sample.log")
	if err != nil {
		t.Fatal(err)
	}
	if len(events) != 11 {
		t.Fatalf("%d events, want 11", len(events))
	}
	op := testkit.AuditFilter{UserAgentPrefix: testkit.OperatorUserAgent}
	for _, c := range []struct {
		name string
		f    testkit.AuditFilter
		want int
	}{
		{"everything", testkit.AuditFilter{}, 11},
		{"user admin", testkit.AuditFilter{User: "admin"}, 8},
		{"operator user agent", op, 5},
		{"operator writes that succeeded", testkit.AuditFilter{UserAgentPrefix: testkit.OperatorUserAgent, Succeeded: true}, 4},
		{"rival patches of a", testkit.AuditFilter{UserAgentPrefix: "rival/", Verbs: []string{"patch"}, Resource: "configmaps", Namespace: "sample", Name: "a"}, 3},
		{"deletes in sample", testkit.AuditFilter{Verbs: []string{"delete"}, Namespace: "sample"}, 1},
		{"writes", testkit.AuditFilter{Verbs: testkit.WriteVerbs}, 11},
		{"reads (not logged)", testkit.AuditFilter{Verbs: []string{"get", "list", "watch"}}, 0},
		{"no subresource", testkit.AuditFilter{Subresource: testkit.NoSubresource, Namespace: "sample"}, 7},
		{"status subresource", testkit.AuditFilter{Subresource: "status"}, 0},
		{"from the first rival patch", testkit.AuditFilter{User: "admin", From: testkit.Received(&events[6])}, 5},
		{"before the first rival patch", testkit.AuditFilter{User: "admin", To: testkit.Received(&events[6])}, 3},
	} {
		if got := c.f.Count(events); got != c.want {
			t.Errorf("%s: %d events, want %d\n%s", c.name, got, c.want, testkit.FormatAudit(c.f.Filter(events), 20))
		}
	}
	byVerb := testkit.CountBy(op.Filter(events), testkit.AuditByVerb)
	if byVerb["create"] != 4 || byVerb["delete"] != 1 || len(byVerb) != 2 {
		t.Errorf("operator requests by verb: %v, want create 4, delete 1", byVerb)
	}
	byObject := testkit.CountBy(events, testkit.AuditByObject)
	if byObject["patch configmaps sample/a"] != 3 {
		t.Errorf("by object: %v, want 3 patches of configmaps sample/a", byObject)
	}
	if r := testkit.Rate(testkit.AuditFilter{UserAgentPrefix: "rival/"}.Filter(events)); r <= 0 {
		t.Errorf("rate of the rival's patches %v, want > 0", r)
	}

	// A line the API server is still writing is left out; a broken complete
	// line is an error.
	raw, err := os.ReadFile("testdata/audit-sample.log")
	if err != nil {
		t.Fatal(err)
	}
	partial, err := testkit.ParseAudit(strings.NewReader(string(raw) + `{"kind":"Event","apiVer`))
	if err != nil || len(partial) != 11 {
		t.Errorf("with a partial last line: %d events, %v; want 11, nil", len(partial), err)
	}
	if _, err := testkit.ParseAudit(strings.NewReader(string(raw) + "{not json}\n")); err == nil {
		t.Error("a broken complete line was not reported")
	}
}
