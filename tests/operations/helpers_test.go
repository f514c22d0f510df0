package operations

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
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
)

// kubectl runs the cluster's kubectl as the user of kubeconfig.
func (e *testEnv) kubectl(kubeconfig string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.kubectlBin, append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+e.kubectlCache)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

func (e *testEnv) admin(args ...string) (string, error) {
	return e.kubectl(e.cluster.Kubeconfig, args...)
}

// canI is `kubectl auth can-i` as the user of kubeconfig: "yes" or "no".
func (e *testEnv) canI(kubeconfig string, args ...string) (string, error) {
	out, err := e.kubectl(kubeconfig, append([]string{"auth", "can-i"}, args...)...)
	answer := strings.TrimSpace(out)
	if answer == "yes" || answer == "no" {
		return answer, nil
	}
	return answer, err
}

// operator is one running operator process.
type operator struct {
	name        string
	logPath     string
	probeAddr   string // /healthz, /readyz (HTTP)
	metricsAddr string // /metrics (HTTPS, API server authn/authz)
	cmd         *exec.Cmd
	exited      chan struct{}
	waitErr     error // valid once exited is closed
}

// startOperator starts the operator binary as the operator's ServiceAccount,
// with secure metrics on a free loopback port serving env.metricsCertDir's
// certificate, and debug logs up to V(5) (controller-runtime's per-reconcile
// "Reconciling" lines). args are added. The process is SIGKILLed when the test
// ends if it still runs, and dies with the test binary (Pdeathsig).
func startOperator(t *testing.T, name string, args ...string) *operator {
	t.Helper()
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	op := &operator{
		name:        name,
		logPath:     filepath.Join(t.TempDir(), name+".log"),
		probeAddr:   fmt.Sprintf("127.0.0.1:%d", ports[0]),
		metricsAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]),
		exited:      make(chan struct{}),
	}
	logf, err := os.Create(op.logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	op.cmd = exec.Command(env.bin, append([]string{
		"--kubeconfig=" + env.opKubeconfig,
		"--health-probe-bind-address=" + op.probeAddr,
		"--metrics-bind-address=" + op.metricsAddr,
		"--metrics-cert-dir=" + env.metricsCertDir,
		"--zap-log-level=5",
	}, args...)...)
	op.cmd.Stdout, op.cmd.Stderr = logf, logf
	// Out of cluster even when the tests run in a pod: the in-cluster check
	// (and so the default of --leader-elect) starts with these variables.
	op.cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "KUBERNETES_SERVICE_HOST=") || strings.HasPrefix(kv, "KUBERNETES_SERVICE_PORT=")
	})
	op.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := op.cmd.Start(); err != nil {
		t.Fatalf("starting operator %s: %v", name, err)
	}
	go func() {
		op.waitErr = op.cmd.Wait()
		close(op.exited)
	}()
	t.Cleanup(func() {
		op.kill()
		if t.Failed() {
			t.Logf("--- operator %s log tail (%s) ---\n%s", op.name, op.logPath, op.logTail(40))
		}
	})
	t.Logf("started operator %s (pid %d): %s", name, op.cmd.Process.Pid, strings.Join(op.cmd.Args[1:], " "))
	return op
}

func (op *operator) hasExited() bool {
	select {
	case <-op.exited:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the operator (no chance to release its Lease) and reaps it.
func (op *operator) kill() {
	if !op.hasExited() {
		_ = op.cmd.Process.Kill()
	}
	select {
	case <-op.exited:
	case <-time.After(10 * time.Second):
		fmt.Fprintf(os.Stderr, "operator %s (pid %d) did not exit after SIGKILL\n", op.name, op.cmd.Process.Pid)
	}
}

// terminate sends SIGTERM, as the kubelet does on a rollout, and waits for a
// clean exit.
func (op *operator) terminate(t *testing.T) {
	t.Helper()
	if err := op.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM to operator %s: %v", op.name, err)
	}
	select {
	case <-op.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("operator %s did not exit within 60s of SIGTERM\n%s", op.name, op.logTail(30))
	}
	if op.waitErr != nil {
		t.Fatalf("operator %s exited after SIGTERM with %v\n%s", op.name, op.waitErr, op.logTail(30))
	}
}

// waitReady waits for the operator's /readyz (served with or without
// leadership).
func (op *operator) waitReady(t *testing.T) {
	t.Helper()
	url := "http://" + op.probeAddr + "/readyz"
	hc := &http.Client{Timeout: 2 * time.Second}
	waitFor(t, 2*time.Minute, "operator "+op.name+" "+url, func(context.Context) (bool, string) {
		if op.hasExited() {
			t.Fatalf("operator %s exited: %v\n%s", op.name, op.waitErr, op.logTail(40))
		}
		resp, err := hc.Get(url)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

const maxLogLine = 800

// logTail is the last n lines of the operator's log, long lines cut.
func (op *operator) logTail(n int) string {
	b, err := os.ReadFile(op.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > maxLogLine {
			lines[i] = fmt.Sprintf("%s ...[%d more bytes]", l[:maxLogLine], len(l)-maxLogLine)
		}
	}
	return strings.Join(lines, "\n")
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
	f, err := os.Open(op.logPath)
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
	code, body, err := op.scrape(env.scraperToken)
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
	start := time.Now()
	var seen string
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		var done bool
		done, seen = cond(ctx)
		return done, nil
	})
	if err != nil {
		t.Fatalf("waiting %s for %s: %v\nlast seen: %s", time.Since(start).Round(time.Millisecond), what, err, seen)
	}
	return time.Since(start)
}

// newNamespace creates a namespace for one test's SimpleWebApps and deletes
// it (without waiting) when the test ends, so later operators have less to
// reconcile.
func newNamespace(t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := env.c.Create(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.c.Delete(context.Background(), ns) })
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
		if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, swa); err != nil {
			return false, err
		}
		mutate(swa)
		if err := env.c.Update(ctx, swa); err != nil {
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
	if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, swa); err != nil {
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
	if err := env.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-web"}, d); err != nil {
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
	err := env.c.Get(ctx, client.ObjectKey{Namespace: operatorNamespace, Name: leaseName}, l)
	return l, err
}

func holder(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		addr, ok := l.Addr().(*net.TCPAddr)
		if !ok {
			return nil, errors.New("not a TCP address")
		}
		ports = append(ports, addr.Port)
	}
	return ports, nil
}
