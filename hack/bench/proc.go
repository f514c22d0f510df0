package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/operatortest"
)

// build builds the operator of the checkout root into out.
func build(root, out string) error {
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build in %s: %v\n%s", root, err, b)
	}
	return nil
}

// checkout extracts rev of the repository into dir (git archive: no
// worktree to clean up).
func checkout(rev, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cmd := exec.Command("bash", "-c", `git archive "$1" | tar -x -C "$2"`, "archive", rev, dir)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git archive %s: %v\n%s", rev, err, b)
	}
	return nil
}

// operator is a running operator process with plain-HTTP metrics.
type operator struct {
	*operatortest.Operator
	metrics string // http://addr/metrics
	pprof   string // http://addr/debug/pprof ("" if not served)
}

func startOperator(ctx context.Context, e *env, bin, name string, pprof bool, args, env []string) (*operator, error) {
	ports, err := localcluster.FreePorts(2)
	if err != nil {
		return nil, err
	}
	op := &operator{metrics: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0])}
	all := []string{"--metrics-bind-address=" + fmt.Sprintf("127.0.0.1:%d", ports[0]), "--metrics-secure=false"}
	if pprof {
		all = append(all, fmt.Sprintf("--pprof-bind-address=127.0.0.1:%d", ports[1]))
		op.pprof = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", ports[1])
	}
	op.Operator, err = operatortest.Start(operatortest.Config{
		Name: name, Bin: bin, Kubeconfig: e.opID.Kubeconfig,
		Args:    append(all, args...),
		LogPath: filepath.Join(e.Dir, name+".log"), OutOfCluster: true, Env: env,
	})
	if err != nil {
		return nil, err
	}
	if err := op.WaitReady(ctx, 2*time.Minute); err != nil {
		op.Kill()
		return nil, err
	}
	return op, nil
}

// procStats are a process's CPU time and memory from /proc.
type procStats struct {
	CPUSeconds float64 `json:"cpuSeconds"`
	RSSMiB     float64 `json:"rssMiB"`
	PeakRSSMiB float64 `json:"peakRssMiB"`
	// The RSS split: anonymous pages (the Go heap, stacks, runtime) and
	// file pages (the binary's text and data as far as they were touched).
	RSSAnonMiB float64 `json:"rssAnonMiB"`
	RSSFileMiB float64 `json:"rssFileMiB"`
}

// controlPlaneCPU is the CPU seconds each control-plane process has used so
// far: where the time goes when the operator is not the bottleneck.
func controlPlaneCPU(c *localcluster.Cluster) map[string]float64 {
	out := map[string]float64{}
	for _, name := range []string{localcluster.APIServer, localcluster.Etcd, localcluster.ControllerManager, localcluster.Scheduler, localcluster.Kwok} {
		if pid := c.PIDs[name]; pid > 0 {
			out[name] = statsOf(pid).CPUSeconds
		}
	}
	return out
}

// cpuSince is the CPU seconds used since before (a controlPlaneCPU), by
// process.
func cpuSince(c *localcluster.Cluster, before map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for name, s := range controlPlaneCPU(c) {
		out[name] = s - before[name]
	}
	return out
}

func statsOf(pid int) procStats {
	var s procStats
	s.CPUSeconds, _ = localcluster.CPUSeconds(pid)
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Fields(l)
			if len(f) < 2 {
				continue
			}
			kb, _ := strconv.ParseFloat(f[1], 64)
			switch f[0] {
			case "VmRSS:":
				s.RSSMiB = kb / 1024
			case "VmHWM:":
				s.PeakRSSMiB = kb / 1024
			case "RssAnon:":
				s.RSSAnonMiB = kb / 1024
			case "RssFile:":
				s.RSSFileMiB = kb / 1024
			}
		}
	}
	return s
}

// scrape sums the samples of each metric name whose labels include want.
func (op *operator) scrape(name string, want map[string]string) float64 {
	resp, err := http.Get(op.metrics)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return -1
	}
	f, ok := fams[name]
	if !ok {
		return 0
	}
	var sum float64
	for _, m := range f.Metric {
		match := true
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		}
	}
	return sum
}

func (op *operator) reconciles() float64 {
	return op.scrape("controller_runtime_reconcile_total", map[string]string{"controller": "simplewebapp"})
}

// memStats are the runtime.MemStats lines of the heap profile's debug text
// (HeapInuse, HeapIdle, HeapReleased, Stack, Sys...): what RSS is made of.
func (op *operator) memStats() map[string]float64 {
	out := map[string]float64{}
	if op.pprof == "" {
		return out
	}
	resp, err := http.Get(op.pprof + "/heap?debug=1")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		var k string
		var v float64
		if n, _ := fmt.Sscanf(l, "# %s = %g", &k, &v); n == 2 {
			switch k {
			case "HeapAlloc", "HeapSys", "HeapIdle", "HeapInuse", "HeapReleased", "Stack", "Sys", "StackSys", "MSpanSys", "OtherSys", "GCSys":
				out[k+"MiB"] = v / (1 << 20)
			}
		}
	}
	return out
}

// cpuProfile saves a CPU profile of the next d.
func (op *operator) cpuProfile(path string, d time.Duration) error {
	if op.pprof == "" {
		return nil
	}
	return saveProfile(http.DefaultClient, fmt.Sprintf("%s/profile?seconds=%d", op.pprof, int(d.Seconds())), path)
}

// apiServerCPUProfile saves a CPU profile of the kube-apiserver over the
// next d (its /debug/pprof, as the cluster's admin).
func apiServerCPUProfile(c *localcluster.Cluster, path string, d time.Duration) error {
	cfg := c.RESTConfig()
	cfg.Timeout = d + 30*time.Second
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	return saveProfile(hc, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", cfg.Host, int(d.Seconds())), path)
}

// saveProfile GETs a pprof profile from url into path.
func saveProfile(hc *http.Client, url, path string) error {
	resp, err := hc.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// heapProfile saves a heap profile and returns `go tool pprof -top` of it.
func (op *operator) heapProfile(path string) (string, error) {
	if op.pprof == "" {
		return "", nil
	}
	if err := saveProfile(http.DefaultClient, op.pprof+"/heap?gc=1", path); err != nil {
		return "", err
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", "-sample_index=inuse_space", path).CombinedOutput()
	return string(out), err
}

// stealSeconds is the CPU time the host has taken from this machine's
// CPUs since boot (/proc/stat's steal, in USER_HZ ticks of 10 ms).
func stealSeconds() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	ticks, _ := strconv.ParseFloat(f[8], 64)
	return ticks / 100
}
