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
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/operatortest"
	"example.com/simplewebapp-operator/internal/testkit"
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
	ports, err := localcluster.FreePorts(2)
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
			t.Logf("--- operator %s log tail, idle lines left out (%s) ---\n%s", op.Name(), op.LogPath(), op.LogTailOfWork(60))
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

// sample is one sample of the Prometheus text format: a metric name (with
// _bucket, _sum and _count for histograms and summaries), its labels and
// value.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

type samples []sample

// parseSamples parses the Prometheus text exposition format, which is what
// promhttp serves without content negotiation, with Prometheus' own parser
// (expfmt), into samples as Prometheus would ingest them.
func parseSamples(body string) (samples, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	fams := make([]*dto.MetricFamily, 0, len(families))
	for _, f := range families {
		fams = append(fams, f)
	}
	vec, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{Timestamp: model.Now()}, fams...)
	if err != nil {
		return nil, err
	}
	out := make(samples, 0, len(vec))
	for _, v := range vec {
		s := sample{labels: map[string]string{}, value: float64(v.Value)}
		for k, val := range v.Metric {
			if k == model.MetricNameLabel {
				s.name = string(val)
			} else {
				s.labels[string(k)] = string(val)
			}
		}
		out = append(out, s)
	}
	return out, nil
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
	testkit.WaitFor(t, 30*time.Second, fmt.Sprintf("an update of SimpleWebApp %s/%s", ns, name), func(ctx context.Context) (bool, string) {
		swa := &webappv1.SimpleWebApp{}
		if err := env.C.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, swa); err != nil {
			t.Fatalf("reading SimpleWebApp %s/%s: %v", ns, name, err)
		}
		mutate(swa)
		if err := env.C.Update(ctx, swa); err != nil {
			return false, err.Error() // a conflict with the operator's status/label writes
		}
		gen = swa.Generation
		return true, ""
	})
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
	return testkit.WaitFor(t, 3*time.Minute, fmt.Sprintf("SimpleWebApp %s/%s generation %d Ready (version %q)", ns, name, gen, version),
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
