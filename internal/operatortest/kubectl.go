package operatortest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"example.com/simplewebapp-operator/internal/testkit"
)

// Kubectl runs the cluster's kubectl, never the one on PATH.
type Kubectl struct {
	Bin             string
	CacheDir        string // kubectl's discovery cache, in the run's temporary directory
	AdminKubeconfig string // the cluster admin's
}

// Run runs kubectl as the user of kubeconfig. It returns stdout, and on
// failure an error with the command, stdout and stderr.
func (k *Kubectl) Run(kubeconfig string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, k.Bin, append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+k.CacheDir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// Admin runs kubectl as cluster admin.
func (k *Kubectl) Admin(args ...string) (string, error) {
	return k.Run(k.AdminKubeconfig, args...)
}

// CanI asks `kubectl auth can-i` as the user of kubeconfig: "yes" or "no".
// kubectl exits 1 for "no", so only an answer other than yes/no is an error.
func (k *Kubectl) CanI(kubeconfig string, args ...string) (string, error) {
	out, err := k.Run(kubeconfig, append([]string{"auth", "can-i"}, args...)...)
	answer := strings.TrimSpace(out)
	if answer == "yes" || answer == "no" {
		return answer, nil
	}
	return answer, err
}

// CanIWant is a `kubectl auth can-i` question as the user of Kubeconfig and
// the answer it must get.
type CanIWant struct {
	Kubeconfig string
	Args       []string
	Want       string // "yes" or "no"
}

// WaitCanI asks each question until it gets its answer, each for at most
// timeout. The RBAC authorizer sees new bindings through an informer, so a
// binding just created may take a moment to count.
func (k *Kubectl) WaitCanI(ctx context.Context, timeout time.Duration, checks ...CanIWant) error {
	for _, c := range checks {
		_, last, err := testkit.Poll(ctx, 100*time.Millisecond, timeout, func(context.Context) (bool, string, error) {
			answer, _ := k.CanI(c.Kubeconfig, c.Args...)
			return answer == c.Want, answer, nil
		})
		if err != nil {
			return fmt.Errorf("kubectl auth can-i %s as %s: %q, want %q: %w", strings.Join(c.Args, " "), c.Kubeconfig, last, c.Want, err)
		}
	}
	return nil
}
