package operations

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/tests/cluster"
	"example.com/simplewebapp-operator/tests/operatortest"
)

// operator is one running operator process and where it serves metrics.
type operator struct {
	*operatortest.Operator
	metricsAddr string // /metrics (HTTPS, API server authn/authz)
}

// startOperator starts the operator binary as the operator's ServiceAccount,
// with secure metrics on a free loopback port serving env.metricsCertDir's
// certificate, and debug logs up to V(5) (controller-runtime's per-reconcile
// "Reconciling" lines). args are added. The process is SIGKILLed when the test
// ends if it still runs, and dies with the test binary (Pdeathsig).
func startOperator(t *testing.T, name string, args ...string) *operator {
	t.Helper()
	ports, err := cluster.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	op := &operator{metricsAddr: fmt.Sprintf("127.0.0.1:%d", ports[1])}
	op.Operator, err = operatortest.Start(operatortest.Config{
		Name:       name,
		Bin:        env.bin,
		Kubeconfig: env.operatorID.Kubeconfig,
		ProbeAddr:  fmt.Sprintf("127.0.0.1:%d", ports[0]),
		Args: append([]string{
			"--metrics-bind-address=" + op.metricsAddr,
			"--metrics-cert-dir=" + env.metricsCertDir,
			"--zap-log-level=5",
		}, args...),
		LogPath: filepath.Join(t.TempDir(), name+".log"),
		// Out of cluster even when the tests run in a pod: the in-cluster check
		// (and so the default of --leader-elect) starts with these variables.
		OutOfCluster: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		op.Kill()
		if t.Failed() {
			t.Logf("--- operator %s log tail (%s) ---\n%s", op.Name(), op.LogPath(), op.LogTail(40))
		}
	})
	t.Logf("started operator %s (pid %d): %s", name, op.Pid(), strings.Join(op.Args(), " "))
	return op
}

// terminate sends SIGTERM, as the kubelet does on a rollout, and waits for a
// clean exit.
func (op *operator) terminate(t *testing.T) {
	t.Helper()
	if err := op.Stop(60 * time.Second); err != nil {
		t.Fatalf("%v\n%s", err, op.LogTail(30))
	}
}

// waitReady waits for the operator's /readyz (served with or without
// leadership).
func (op *operator) waitReady(t *testing.T) {
	t.Helper()
	if err := op.WaitReady(t.Context(), 2*time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, op.LogTail(40))
	}
}

// logLine is one line of the operator's log: the raw text and, when it is a
// JSON object, its fields.
type logLine struct {
	n      int // 1-based line number
	raw    string
	fields map[string]any // nil if the line is not a JSON object
}

func (l logLine) str(key string) string {
	s, _ := l.fields[key].(string)
	return s
}

func (l logLine) msg() string { return l.str("msg") }

// lines reads the operator's whole log.
func (op *operator) lines(t *testing.T) []logLine {
	t.Helper()
	f, err := os.Open(op.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for n := 1; sc.Scan(); n++ {
		l := logLine{n: n, raw: sc.Text()}
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			l.fields = m
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// firstLine is the number of the first log line for which match is true, or 0.
func firstLine(lines []logLine, match func(logLine) bool) int {
	for _, l := range lines {
		if match(l) {
			return l.n
		}
	}
	return 0
}

func isAcquired(l logLine) bool { return l.msg() == "Successfully acquired lease" }

// isReconcile is a line of controller-runtime's reconcile logger for a
// SimpleWebApp: it carries a reconcileID.
func isReconcile(l logLine) bool {
	return l.fields["reconcileID"] != nil && l.str("controller") == "simplewebapp"
}

// isReconcileOf is a reconcile line of the SimpleWebApp ns/name.
func isReconcileOf(ns, name string) func(logLine) bool {
	return func(l logLine) bool { return isReconcile(l) && l.str("namespace") == ns && l.str("name") == name }
}

// scrape GETs /metrics from the operator with a bearer token ("" for none),
// verifying its serving certificate against the test CA.
func (op *operator) scrape(token string) (int, string, error) {
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: env.metricsCA, MinVersion: tls.VersionTLS12},
	}}
	req, err := http.NewRequest(http.MethodGet, "https://"+op.metricsAddr+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metrics scrapes with the scraper's token and parses the text exposition.
func (op *operator) metrics() (samples, error) {
	code, body, err := op.scrape(env.scraper.Token)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d %s", code, body)
	}
	return parseSamples(body)
}

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

type samples []sample

// parseSamples parses the Prometheus text exposition format (version 0.0.4),
// which is what promhttp serves without content negotiation.
func parseSamples(body string) (samples, error) {
	var out samples
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		s := sample{labels: map[string]string{}}
		rest := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			s.name, rest = line[:i], line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			end := strings.LastIndex(rest, "}")
			if end < 0 {
				return nil, fmt.Errorf("bad sample line %q", line)
			}
			for _, kv := range splitLabels(rest[1:end]) {
				k, v, ok := strings.Cut(kv, "=")
				if !ok {
					return nil, fmt.Errorf("bad label %q in %q", kv, line)
				}
				uq, err := strconv.Unquote(v)
				if err != nil {
					return nil, fmt.Errorf("bad label value %q in %q: %v", v, line, err)
				}
				s.labels[k] = uq
			}
			rest = rest[end+1:]
		}
		fields := strings.Fields(rest)
		if s.name == "" || len(fields) == 0 {
			return nil, fmt.Errorf("bad sample line %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("bad value in %q: %v", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out, nil
}

// splitLabels splits `a="x",b="y,z"` at the commas outside quotes.
func splitLabels(s string) []string {
	var parts []string
	var cur strings.Builder
	inQuote, escaped := false, false
	for _, r := range s {
		switch {
		case escaped:
			escaped = false
		case r == '\\' && inQuote:
			escaped = true
		case r == '"':
			inQuote = !inQuote
		case r == ',' && !inQuote:
			if cur.Len() > 0 {
				parts = append(parts, cur.String())
			}
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	if cur.Len() > 0 {
		parts = append(parts, cur.String())
	}
	return parts
}

// get returns the value of the sample name whose labels include want, and
// whether there is one.
func (ss samples) get(name string, want map[string]string) (float64, bool) {
	for _, s := range ss {
		if s.name != name {
			continue
		}
		match := true
		for k, v := range want {
			if s.labels[k] != v {
				match = false
				break
			}
		}
		if match {
			return s.value, true
		}
	}
	return 0, false
}

// names are the sample names served, with the label names seen on each.
func (ss samples) names() map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, s := range ss {
		if out[s.name] == nil {
			out[s.name] = map[string]bool{}
		}
		for k := range s.labels {
			out[s.name][k] = true
		}
	}
	return out
}

// waitFor polls cond every 50ms until it is done, for at most timeout, and
// returns how long that took. On timeout the test fails with what it waited
// for and the last thing cond saw.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (done bool, seen string)) time.Duration {
	t.Helper()
	took, seen, err := operatortest.Poll(t.Context(), 50*time.Millisecond, timeout, func(ctx context.Context) (bool, string, error) {
		done, seen := cond(ctx)
		return done, seen, nil
	})
	if err != nil {
		t.Fatalf("waiting %s for %s: %v\nlast seen: %s", took.Round(time.Millisecond), what, err, seen)
	}
	return took
}

// newNamespace creates a namespace for one test's SimpleWebApps and deletes
// it (without waiting) when the test ends, so later operators have less to
// reconcile.
func newNamespace(t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.C.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.C.Delete(context.Background(), ns) })
	return name
}

func newApp(ns, name string, replicas int32, version string) *webappv1.SimpleWebApp {
	return &webappv1.SimpleWebApp{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       webappv1.SimpleWebAppSpec{Replicas: ptr.To(replicas), Message: "operations test " + name, Version: version},
	}
}

// updateApp changes the SimpleWebApp with mutate, retrying on conflicts, and
// returns the new generation.
func updateApp(t *testing.T, ns, name string, mutate func(*webappv1.SimpleWebApp)) int64 {
	t.Helper()
	var gen int64
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		swa := &webappv1.SimpleWebApp{}
		if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, swa); err != nil {
			return false, err
		}
		mutate(swa)
		if err := env.C.Update(ctx, swa); err != nil {
			return false, nil // conflict with the operator's status/label writes
		}
		gen = swa.Generation
		return true, nil
	})
	if err != nil {
		t.Fatalf("updating SimpleWebApp %s/%s: %v", ns, name, err)
	}
	return gen
}

// appState reads the SimpleWebApp and says whether generation gen (0: the
// current one) was applied as version (any if "") and is Ready.
func appState(ctx context.Context, ns, name string, gen int64, version string) (bool, string) {
	swa := &webappv1.SimpleWebApp{}
	if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, swa); err != nil {
		return false, err.Error()
	}
	if gen == 0 {
		gen = swa.Generation
	}
	ready := apimeta.FindStatusCondition(swa.Status.Conditions, webappv1.ConditionReady)
	ok := swa.Status.ObservedGeneration >= gen && ready != nil && ready.Status == metav1.ConditionTrue &&
		ready.ObservedGeneration >= gen && (version == "" || swa.Status.Version == version)
	return ok, fmt.Sprintf("generation %d, status %+v", swa.Generation, swa.Status)
}

// waitAppReady waits until the SimpleWebApp's generation gen (0: current)
// is applied and Ready.
func waitAppReady(t *testing.T, ns, name string, gen int64, version string) time.Duration {
	t.Helper()
	return waitFor(t, 3*time.Minute, fmt.Sprintf("SimpleWebApp %s/%s generation %d Ready (version %q)", ns, name, gen, version),
		func(ctx context.Context) (bool, string) { return appState(ctx, ns, name, gen, version) })
}

// deploymentReplicas is spec.replicas of the app's Deployment (<name>-web).
func deploymentReplicas(ctx context.Context, ns, name string) (int32, error) {
	d := &appsv1.Deployment{}
	if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-web"}, d); err != nil {
		return 0, err
	}
	if d.Spec.Replicas == nil {
		return 1, nil
	}
	return *d.Spec.Replicas, nil
}

// lease reads the operator's leader election Lease.
func lease(ctx context.Context) (*coordinationv1.Lease, error) {
	l := &coordinationv1.Lease{}
	err := env.C.Get(ctx, client.ObjectKey{Namespace: operatortest.Namespace, Name: leaseName}, l)
	return l, err
}

func holder(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
