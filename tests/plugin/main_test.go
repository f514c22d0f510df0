// Package plugin tests `kubectl swa` (cmd/kubectl-swa): render against the
// golden files, and diff and versions against a real API server on which the
// operator runs in-process (envop).
package plugin

import (
	"bytes"
	"fmt"
	"os"
	"testing"
	"time"

	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/cmd/kubectl-swa/plugin"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit/envop"
)

var env *envop.Env

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	t0 := time.Now()
	var err error
	if env, err = envop.Start(render.Channels{FS: channels.FS}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	fmt.Fprintf(os.Stderr, "API server and operator started in %s\n", time.Since(t0).Round(time.Millisecond))
	return m.Run()
}

// swa runs `kubectl swa args...` as the plugin binary does and returns its
// exit code, stdout and stderr.
func swa(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := plugin.Main(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// swaCluster is swa against the test's API server.
func swaCluster(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return swa(t, append(args, "--kubeconfig", env.Kubeconfig)...)
}
