// Package realnode runs the user's scenario on a real node: the local
// cluster's profile node (internal/localcluster) joins a kubelet with
// containerd, runc, the CNI bridge and kube-proxy to the control plane, and
// the web server's pods are real containers of the package's image (its local
// stand-in built from Debian's nginx, hack/image -web-standin). Requests go
// to pod and Service addresses from a network namespace the harness made.
//
// Every test checks that its pods ran on the real node with a real runtime's
// container IDs: on a machine where the node cannot start (no root), the
// set-up fails and says so; nothing is skipped. Like tests/e2e, the operator
// runs as its own process with its own ServiceAccount bound only to
// config/rbac.
package realnode

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

// The kube-controller-manager's HPA settings here, shorter than its defaults
// (15s, 5m), so that scaling down under no load takes seconds.
const (
	hpaSyncPeriod             = 5 * time.Second
	hpaDownscaleStabilization = 15 * time.Second
	channelsPollInterval      = 500 * time.Millisecond
)

// env is the shared cluster and operator, set up by TestMain.
var env *testEnv

type testEnv struct {
	*operatortest.Env
	op       *operatortest.Operator
	node     *localcluster.RealNode
	channels testkit.Tree // the operator's --channels-dir
	// client sends requests from the harness's network namespace, a new
	// connection each (kube-proxy balances connections, not requests).
	client *http.Client
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard())
	var cleanups operatortest.Cleanups
	defer cleanups.Run()
	e, err := setUp(cleanups.Add)
	if err != nil {
		fmt.Fprintln(os.Stderr, "realnode setup failed:", err)
		if e != nil && e.op != nil {
			fmt.Fprintf(os.Stderr, "--- operator log tail ---\n%s\n", e.op.LogTail(50))
		}
		return 1
	}
	env = e
	code := m.Run()
	if code != 0 {
		keepLogs(e)
	}
	return code
}

// setUp builds the web server's image, starts a cluster with a real node
// that has it, and starts the operator.
func setUp(cleanup func(func())) (*testEnv, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	images, err := os.MkdirTemp("", "swa-realnode-images-")
	if err != nil {
		return nil, err
	}
	cleanup(func() { os.RemoveAll(images) })
	web, err := buildWebImage(ctx, images)
	if err != nil {
		return nil, err
	}
	oe, err := operatortest.Setup(ctx, operatortest.Options{
		Name:                      "realnode",
		Profile:                   localcluster.ProfileNode,
		NodeImages:                []string{web},
		Metrics:                   true,
		HPASyncPeriod:             hpaSyncPeriod,
		HPADownscaleStabilization: hpaDownscaleStabilization,
	}, cleanup)
	if err != nil {
		return nil, err
	}
	e := &testEnv{Env: oe, node: oe.Cluster.Node}
	if e.node == nil {
		return e, errors.New("the cluster has no real node: it needs root and the node's binaries (make tools); see the cluster's log lines with -v")
	}
	e.client = e.node.HTTPClient(false)
	channelsDir := filepath.Join(oe.Dir, "channels")
	if err := os.Mkdir(channelsDir, 0o755); err != nil {
		return e, err
	}
	e.channels = testkit.DirTree(channelsDir)
	e.op, err = e.StartOperator(ctx, operatortest.OperatorRBAC{ClusterRoleBinding: "realnode-manager-rolebinding"}, []string{
		"--metrics-bind-address=0",
		"--leader-elect=false",
		"--channels-dir=" + channelsDir,
		"--channels-poll-interval=" + channelsPollInterval.String(),
		"--allowed-images=docker.io/nginxinc/nginx-unprivileged", // as shipped (config/manager)
	}, cleanup)
	return e, err
}

// buildWebImage writes the local stand-in of the package's web server image
// into dir and returns the archive's path.
func buildWebImage(ctx context.Context, dir string) (string, error) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "web.oci.tar")
	cmd := exec.CommandContext(ctx, "go", "run", "./hack/image", "-web-standin", "-o", out)
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the web server image: %v\n%s", err, b)
	}
	return out, nil
}

// keepLogs copies the operator's and the node's logs out of the run's
// directories, which are removed at the end.
func keepLogs(e *testEnv) {
	dir, err := os.MkdirTemp("", "swa-realnode-logs-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "keeping the logs:", err)
		return
	}
	var errs []error
	for name, path := range map[string]string{"operator.log": e.op.LogPath()} {
		b, err := os.ReadFile(path)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
		errs = append(errs, err)
	}
	errs = append(errs, exec.Command("cp", "-r", e.Cluster.Dir, filepath.Join(dir, "cluster")).Run())
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintln(os.Stderr, "keeping the logs:", err)
	}
	fmt.Fprintf(os.Stderr, "the logs of the operator and the cluster are kept in %s\n", dir)
}
