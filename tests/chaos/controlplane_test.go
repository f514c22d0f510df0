package chaos

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
)

// kubelet keeps one operator process running, as a Deployment's kubelet
// would: it starts a new one whenever the last exits, and scrapes the
// running one's client request counter (rest_client_requests_total).
type kubelet struct {
	e           *chaosEnv
	args        []string
	metricsPort int

	mu       sync.Mutex
	n        int
	running  *operatortest.Operator
	exits    []time.Time
	exitLogs []string // the last lines of each exited process's log
	samples  []sample
	startErr error
	stop     chan struct{}
	done     chan struct{}
}

// sample is one scrape of a process's request counter.
type sample struct {
	at       time.Time
	pid      int
	requests float64
	byLabels map[string]float64 // per method and code, for the failure message
}

func (k *kubelet) run() {
	defer close(k.done)
	hc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		k.mu.Lock()
		op := k.running
		k.mu.Unlock()
		if op == nil {
			name := fmt.Sprintf("operator-%d", k.n)
			op2, err := operatortest.Start(operatortest.Config{
				Name: name, Bin: k.e.bin, Kubeconfig: k.e.id.Kubeconfig, OutOfCluster: true,
				LogPath: filepath.Join(k.e.Dir, name+".log"),
				Args: append([]string{"--metrics-secure=false", fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", k.metricsPort)},
					k.args...),
			})
			k.mu.Lock()
			k.n++
			k.running, k.startErr = op2, err
			k.mu.Unlock()
			if err != nil {
				return
			}
			op = op2
		}
		select {
		case <-k.stop:
			op.Kill()
			return
		case <-tick.C:
		}
		if exited, _ := op.Exited(); exited {
			k.mu.Lock()
			k.exits = append(k.exits, time.Now())
			k.exitLogs = append(k.exitLogs, "--- "+op.Name()+" exited; log tail ---\n"+op.LogTail(8))
			k.running = nil
			k.mu.Unlock()
			continue
		}
		if total, byLabels, ok := scrapeRequests(hc, k.metricsPort); ok {
			k.mu.Lock()
			k.samples = append(k.samples, sample{time.Now(), op.Pid(), total, byLabels})
			k.mu.Unlock()
		}
	}
}

// scrapeRequests sums rest_client_requests_total over its labels.
func scrapeRequests(hc *http.Client, port int) (float64, map[string]float64, bool) {
	resp, err := hc.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return 0, nil, false
	}
	defer resp.Body.Close()
	total, found, byLabels := 0.0, false, map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			total += v
			found = true
			byLabels[strings.TrimPrefix(f[0], "rest_client_requests_total")] += v
		}
	}
	return total, byLabels, found
}

// window is what the kubelet saw between from and to: the operator's
// requests (summed per process over the samples inside the window, from 0
// for a process started inside it), those of them that were not served (no
// answer, or an error status: the hot loop a backoff prevents; the rest is
// work done once the new API server answered, before it reported ready),
// which they were, and the process exits.
func (k *kubelet) window(from, to time.Time) (requests, unserved float64, which string, exits int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	first, last := map[int]sample{}, map[int]sample{}
	started := map[int]bool{}
	for _, s := range k.samples {
		if _, seen := started[s.pid]; !seen {
			started[s.pid] = !s.at.Before(from) && !s.at.After(to)
		}
		if s.at.Before(from) || s.at.After(to) {
			continue
		}
		if _, ok := first[s.pid]; !ok {
			first[s.pid] = s
		}
		last[s.pid] = s
	}
	perLabels := map[string]float64{}
	for pid, f := range first {
		if started[pid] {
			f = sample{byLabels: map[string]float64{}}
		}
		requests += last[pid].requests - f.requests
		for l, v := range last[pid].byLabels {
			perLabels[l] += v - f.byLabels[l]
		}
	}
	var parts []string
	for l, v := range perLabels {
		if v > 0 {
			parts = append(parts, fmt.Sprintf("%s %.0f", l, v))
		}
		if !strings.Contains(l, `code="2`) {
			unserved += v
		}
	}
	sort.Strings(parts)
	for _, x := range k.exits {
		if !x.Before(from) && !x.After(to) {
			exits++
		}
	}
	return requests, unserved, strings.Join(parts, ", "), exits
}

// TestControlPlaneFaults restarts kube-apiserver and SIGSTOPs etcd for 20 s
// while SimpleWebApps change, with the operator run as in a pod (leader
// election with the default timings; a new process whenever it exits).
// Each outage: the operator's requests that the API server does not serve
// stay at most 5/s (backoff, no hot loop), it exits at most once, and it
// has applied every generation within 60 s of recovery (everything then
// converges; the time is logged).
func TestControlPlaneFaults(t *testing.T) {
	apps := size(t, "SimpleWebApps", 5, 20)
	restarts := size(t, "kube-apiserver restarts", 2, 5)
	stops := size(t, "etcd SIGSTOPs of 20 s", 1, 3)
	e := newEnv(t)
	ctx := t.Context()
	ns := testkit.Namespace(t, e.C, testkit.NS{Prefix: "cp-", WaitForServiceAccount: true})
	ports, err := localcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	k := &kubelet{e: e, metricsPort: ports[0], stop: make(chan struct{}), done: make(chan struct{}),
		args: []string{"--leader-elect=true", "--leader-election-namespace=" + operatortest.Namespace}}
	go k.run()
	t.Cleanup(func() { close(k.stop); <-k.done })
	diag := testkit.Diag(func() string {
		k.mu.Lock()
		defer k.mu.Unlock()
		if k.running == nil {
			return fmt.Sprintf("no operator running (start error %v)", k.startErr)
		}
		return "--- " + k.running.Name() + " log tail ---\n" + k.running.LogTail(30)
	})
	stable := testkit.ChannelVersion(t, "stable")
	names := e.createApps(ctx, ns, apps, webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](1), Message: "m0"})
	// settle waits until every SimpleWebApp converged (Ready, pruned) and
	// says when the operator had applied every one's generation (its own
	// part) and when all had converged (also the kube-controller-manager's,
	// whose informers come back from the outage with their own backoff).
	settle := func(what string, recovered time.Time) (applied, rolledOut, conv time.Duration) {
		t.Helper()
		testkit.WaitFor(t, 3*time.Minute, what+": every SimpleWebApp converged", func(ctx context.Context) (bool, string) {
			if applied == 0 {
				if ok, _ := allApplied(ctx, e, ns); ok {
					applied = time.Since(recovered)
				}
			}
			if applied != 0 && rolledOut == 0 && allRolledOut(ctx, e, ns) {
				rolledOut = time.Since(recovered)
			}
			return converged(ctx, e.C, ns, stable)
		}, testkit.Every(200*time.Millisecond), diag)
		conv = time.Since(recovered)
		if applied == 0 {
			applied = conv
		}
		if rolledOut == 0 {
			rolledOut = conv
		}
		return applied, rolledOut, conv
	}
	settle("start", time.Now())

	outage := func(what string, i int, fault func() (time.Time, time.Time)) {
		t.Helper()
		e.patchAll(ctx, ns, names, fmt.Sprintf(`{"spec":{"message":"%s-%d"}}`, strings.ReplaceAll(what, " ", "-"), i))
		from, to := fault()
		applied, rolledOut, conv := settle(fmt.Sprintf("%s %d", what, i+1), to)
		reqs, unserved, which, exits := k.window(from, to)
		secs := to.Sub(from).Seconds()
		t.Logf("FIGURE control plane: %s %d: outage %.1f s, operator client requests %.0f (%.2f/s), not served %.0f (%.2f/s), operator exits %d, every generation applied %.1f s, every Deployment rolled out %.1f s, converged %.1f s after recovery (requests: %s)",
			what, i+1, secs, reqs, reqs/secs, unserved, unserved/secs, exits, applied.Seconds(), rolledOut.Seconds(), conv.Seconds(), which)
		// The operator's part is judged: every generation applied within 60 s.
		// Full convergence (pods Ready) also waits for this harness's
		// kube-controller-manager, which runs without leader election and so
		// stays up through the outage with its informers backed off (up to
		// 30 s); in a cluster it would lose its Lease and restart fresh.
		if applied > time.Minute {
			t.Errorf("%s %d: every generation applied %.1f s after recovery, want within 60 s", what, i+1, applied.Seconds())
		}
		if conv-rolledOut > 10*time.Second {
			t.Errorf("%s %d: converged %.1f s after the last Deployment rolled out, want within 10 s", what, i+1, (conv - rolledOut).Seconds())
		}
		if unserved/secs > 5 {
			t.Errorf("%s %d: the operator sent %.0f requests that were not served in %.1f s (%.1f/s), want at most 5/s: %s", what, i+1, unserved, secs, unserved/secs, which)
		}
		if exits > 1 {
			k.mu.Lock()
			t.Errorf("%s %d: the operator exited %d times during the outage, want at most once\n%s", what, i+1, exits, strings.Join(k.exitLogs, "\n"))
			k.mu.Unlock()
		}
	}
	for i := range restarts {
		outage("kube-apiserver restart", i, func() (time.Time, time.Time) {
			from := time.Now()
			if _, err := e.Cluster.Restart(ctx, localcluster.APIServer); err != nil {
				t.Fatal(err)
			}
			return from, time.Now()
		})
	}
	for i := range stops {
		outage("etcd SIGSTOP", i, func() (time.Time, time.Time) {
			from := time.Now()
			if err := e.Cluster.Signal(localcluster.Etcd, syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			testkit.HoldsFor(t, 20*time.Second, "etcd stopped, the operator exiting at most once", func(context.Context) (bool, string) {
				_, _, _, exits := k.window(from, time.Now())
				return exits <= 1, fmt.Sprintf("%d exits", exits)
			}, testkit.Every(time.Second))
			if err := e.Cluster.Signal(localcluster.Etcd, syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			return from, time.Now()
		})
	}
}

// allApplied: the operator has applied every SimpleWebApp's generation in ns.
func allApplied(ctx context.Context, e *chaosEnv, ns string) (bool, string) {
	var list webappv1.SimpleWebAppList
	if err := e.C.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return false, err.Error()
	}
	for _, swa := range list.Items {
		if swa.Status.AppliedGeneration != swa.Generation || swa.Status.ObservedGeneration != swa.Generation {
			return false, swa.Name
		}
	}
	return len(list.Items) > 0, ""
}

// allRolledOut: every Deployment in ns is rolled out (the
// kube-controller-manager's part of converging).
func allRolledOut(ctx context.Context, e *chaosEnv, ns string) bool {
	var list appsv1.DeploymentList
	if err := e.C.List(ctx, &list, client.InNamespace(ns)); err != nil || len(list.Items) == 0 {
		return false
	}
	for i := range list.Items {
		if ok, _ := testkit.DeploymentRolledOut(&list.Items[i]); !ok {
			return false
		}
	}
	return true
}
