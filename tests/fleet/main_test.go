// Package fleet tests roll-outs over a fleet of SimpleWebApps: waves, the
// fleet gate that halts a version whose upgrades fail, and its resume, with
// two shards of operators (--watch-label-selector), one of them with two
// replicas under leader election, against a full local cluster (kwok nodes)
// that play versions whose pods never become Ready.
package fleet

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

const (
	// shardLabel splits the SimpleWebApps between the two shards.
	shardLabel = "sharding.simplewebapp.example.com/key"
	// channelsPoll is the operators' --channels-poll-interval.
	channelsPoll = 500 * time.Millisecond
	// upgradeTimeout is every test app's spec.upgradeTimeout.
	upgradeTimeout = 30 * time.Second
	// firstWave is the operators' --rollout-first-wave (the default).
	firstWave = 3
	// trapLabel is on the pods of a version that breaks only apps with
	// tenantBrokenLabel on their pods (tenantStage).
	trapLabel         = "test.simplewebapp.example.com/tenant-trap"
	tenantBrokenLabel = "user.simplewebapp.example.com/broken"
)

// tenantStage is a kwok Stage like localcluster.NeverReadyStage for pods
// that carry both trapLabel (from the version) and tenantBrokenLabel (from
// the tenant's own spec.patches): the version works for everyone else.
var tenantStage = strings.NewReplacer(
	"name: pod-running-never-ready", "name: pod-running-tenant-trap",
	"test.simplewebapp.example.com/never-ready: \"true\"", trapLabel+": \"true\"\n      "+tenantBrokenLabel+": \"true\"",
).Replace(localcluster.NeverReadyStage)

var env *testEnv

// testEnv is the cluster and the operators: shard a (two replicas, one
// leader) and shard b (one replica).
type testEnv struct {
	*operatortest.Env
	channels testkit.Tree
	dir      string
	bin      string
	ids      map[string]*operatortest.Identity
	ops      map[string]*operatortest.Operator // by replica name: a1, a2, b1
	stopped  map[string]bool                   // replicas a test killed on purpose
	metrics  map[string]string                 // replica name → its /metrics URL
	cleanup  func(func())
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctrllog.SetLogger(logr.Discard())
	klog.SetOutput(io.Discard) // a sampler's list cancelled at its end is no news
	klog.LogToStderr(false)
	var cleanups operatortest.Cleanups
	defer cleanups.Run()
	e, err := setUp(cleanups.Add)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet setup failed:", err)
		if e != nil {
			fmt.Fprint(os.Stderr, e.logTails(40))
		}
		return 1
	}
	env = e
	code := m.Run()
	if code != 0 {
		e.keepLogs()
	}
	return code
}

func setUp(cleanup func(func())) (*testEnv, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	oe, err := operatortest.Setup(ctx, operatortest.Options{Name: "fleet", ExtraKwokStages: []string{localcluster.NeverReadyStage, tenantStage}}, cleanup)
	if err != nil {
		return nil, err
	}
	e := &testEnv{Env: oe, dir: filepath.Join(oe.Dir, "channels"), ids: map[string]*operatortest.Identity{}, ops: map[string]*operatortest.Operator{},
		stopped: map[string]bool{}, metrics: map[string]string{}, cleanup: cleanup}
	if err := os.Mkdir(e.dir, 0o755); err != nil {
		return nil, err
	}
	e.channels = testkit.DirTree(e.dir)
	if _, err := e.SetUpOperatorIdentity(ctx, operatortest.OperatorRBAC{ClusterRoleBinding: "fleet-manager-rolebinding", LeaderElection: true}); err != nil {
		return nil, err
	}
	var checks []operatortest.CanIWant
	for _, name := range []string{"a1", "a2", "b1"} {
		id, err := e.NewReplicaIdentity(ctx, "fleet-"+name)
		if err != nil {
			return nil, err
		}
		e.ids[name] = id
		checks = append(checks,
			operatortest.CanIWant{Kubeconfig: id.Kubeconfig, Args: []string{"update", "leases.coordination.k8s.io", "-n", operatortest.Namespace}, Want: "yes"},
			operatortest.CanIWant{Kubeconfig: id.Kubeconfig, Args: []string{"patch", "configmaps", "-n", operatortest.Namespace}, Want: "yes"})
	}
	if err := e.Kubectl.WaitCanI(ctx, time.Minute, checks...); err != nil {
		return nil, err
	}
	if e.bin, err = e.OperatorBin(); err != nil {
		return nil, err
	}
	for _, name := range []string{"a1", "a2", "b1"} {
		if err := e.start(ctx, name); err != nil {
			return e, err
		}
	}
	return e, nil
}

// start starts replica name (a1, a2: shard a; b1: shard b), logging to
// <name>.log (appended to by a restart).
func (e *testEnv) start(ctx context.Context, name string) error {
	shard := name[:1]
	logPath := filepath.Join(e.Dir, name+".log")
	if old, err := os.ReadFile(logPath); err == nil {
		if err := os.WriteFile(logPath+".before", old, 0o644); err != nil {
			return err
		}
	}
	ports, err := localcluster.FreePorts(1)
	if err != nil {
		return err
	}
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	op, err := operatortest.Start(operatortest.Config{
		Name: name, Bin: e.bin, Kubeconfig: e.ids[name].Kubeconfig, LogPath: logPath,
		Args: []string{
			"--metrics-bind-address=" + metricsAddr, "--metrics-secure=false",
			"--zap-log-level=debug",
			"--leader-elect=true",
			"--leader-election-namespace=" + operatortest.Namespace,
			"--leader-election-id=fleet-" + shard,
			// The default Lease timings: shorter ones lose the Lease (and
			// exit) when CI keeps both cores busy.
			"--watch-label-selector=" + shardLabel + "=" + shard,
			"--channels-dir=" + e.dir,
			"--channels-poll-interval=" + channelsPoll.String(),
			"--rollout-namespace=" + operatortest.Namespace,
			"--rollout-poll-interval=500ms",
		},
	})
	if err != nil {
		return err
	}
	e.cleanup(op.Kill)
	e.ops[name], e.metrics[name], e.stopped[name] = op, "http://"+metricsAddr+"/metrics", false
	return op.WaitReady(ctx, time.Minute)
}

// leader is the replica of shard that holds its Lease, by its log.
func (e *testEnv) leader(shard string) string {
	for name, op := range e.ops {
		if strings.HasPrefix(name, shard) && op.LogLinesWith("Successfully acquired lease", 1) != "" {
			if exited, _ := op.Exited(); !exited {
				return name
			}
		}
	}
	return ""
}

func (e *testEnv) logTails(n int) string {
	var b strings.Builder
	for name, op := range e.ops {
		fmt.Fprintf(&b, "--- %s log tail (%s) ---\n%s\n", name, op.LogPath(), op.LogTail(n))
	}
	return b.String()
}

// waitOpts end a wait when an operator exits, and show their logs on failure.
func (e *testEnv) waitOpts(diag func() string) testkit.WaitOption {
	return testkit.Options(
		testkit.Every(200*time.Millisecond),
		testkit.Abort(func() error {
			for name, op := range e.ops {
				if exited, err := op.Exited(); exited && !e.stopped[name] {
					return fmt.Errorf("operator %s exited: %v", name, err)
				}
			}
			return nil
		}),
		testkit.Diag(func() string {
			if diag != nil {
				return e.logTails(30) + diag()
			}
			return e.logTails(30)
		}),
	)
}

// keepLogs copies the operators' logs out of the run's directory, which is
// removed at the end, so a failure can be looked at afterwards.
func (e *testEnv) keepLogs() {
	dir, err := os.MkdirTemp("", "swa-fleet-logs-")
	if err == nil {
		var logs []string
		logs, err = filepath.Glob(filepath.Join(e.Dir, "*.log*"))
		for _, l := range logs {
			if b, rerr := os.ReadFile(l); rerr == nil {
				err = errors.Join(err, os.WriteFile(filepath.Join(dir, filepath.Base(l)), b, 0o644))
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "keeping the operator logs:", err)
		return
	}
	fmt.Fprintf(os.Stderr, "the operators' logs are kept in %s\n", dir)
}
