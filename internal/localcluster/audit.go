package localcluster

import (
	"os"
	"path/filepath"
)

// auditPolicy records every write at Metadata level (who, what, when, the
// answer; no bodies) and nothing else: reads would make the log many times
// larger and no fault test judges them.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived", "ResponseStarted"]
rules:
- level: Metadata
  verbs: ["create", "update", "patch", "delete", "deletecollection"]
- level: None
`

// AuditLogPath is the API server's audit log (Options.AuditLog), one JSON
// event per line; "" when the cluster runs without one.
func (c *Cluster) AuditLogPath() string { return c.auditLog }

// auditArgs writes the audit policy into Dir and returns the kube-apiserver
// flags that enable it.
func (c *Cluster) auditArgs() ([]string, error) {
	policy := filepath.Join(c.Dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(auditPolicy), 0o644); err != nil {
		return nil, err
	}
	c.auditLog = filepath.Join(c.Dir, "audit.log")
	return []string{
		"--audit-policy-file=" + policy,
		"--audit-log-path=" + c.auditLog,
		// Every event is written before the request returns (no batching),
		// so a test reads what happened up to now; never rotated.
		"--audit-log-mode=blocking",
		"--audit-log-maxsize=0",
		"--audit-log-format=json",
	}, nil
}
