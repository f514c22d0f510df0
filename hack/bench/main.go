// Command bench measures the operator against a bare server-side-apply
// client on fresh local clusters (internal/localcluster, full profile), and
// optionally against a baseline build of another git revision:
//
//	make bench N=200 NAMESPACES=1 BASELINE=633ec5e BENCH_ARGS='-pprof'
//
// Each side gets its own cluster. Requests are counted by user from the
// kube-apiserver's audit log (only the operator's and the bare client's
// ServiceAccounts are logged). It prints a table and writes JSON to
// bench-results/. See docs/benchmarks.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

type opts struct {
	n, namespaces, nodes, podsPerNode, workers int
	baseline                                   string
	kcmQPS, schedQPS                           float32
	kcmBurst, schedBurst                       int
	quiet                                      time.Duration
	out                                        string
	skipBare, skipChannelMove, pprof, keep     bool
	baselineChannelMove                        bool
	baselineFirst                              bool
	operatorArgs, gomemlimit, gogc             string
	hostileApps                                int
	skipHostile                                bool
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func main() {
	var o opts
	var kcmQPS, schedQPS float64
	flag.IntVar(&o.n, "n", 200, "SimpleWebApps")
	flag.IntVar(&o.namespaces, "namespaces", 1, "namespaces the SimpleWebApps are spread over")
	flag.IntVar(&o.nodes, "nodes", 3, "kwok nodes")
	flag.IntVar(&o.podsPerNode, "pods-per-node", 0, "pod capacity of each node (default: room for every app twice, surge pods of a channel move included)")
	flag.IntVar(&o.workers, "workers", 0, "apps in flight of the bare client, and creates in flight of the SimpleWebApps (default: the operator's default --max-concurrent-reconciles, read from the built binary, so both have the same concurrency)")
	flag.StringVar(&o.baseline, "baseline", "", "git revision of a baseline operator to measure too (e.g. 633ec5e, before the optimizations)")
	flag.Float64Var(&kcmQPS, "kcm-qps", 500, "kube-controller-manager --kube-api-qps (its default 20 would bound time to Ready)")
	flag.IntVar(&o.kcmBurst, "kcm-burst", 1000, "kube-controller-manager --kube-api-burst")
	flag.Float64Var(&schedQPS, "scheduler-qps", 500, "kube-scheduler --kube-api-qps")
	flag.IntVar(&o.schedBurst, "scheduler-burst", 1000, "kube-scheduler --kube-api-burst")
	flag.DurationVar(&o.quiet, "quiet", 5*time.Second, "no request from the measured client for this long counts as quiet")
	flag.StringVar(&o.out, "out", "bench-results", "directory for the JSON results (and, with -keep, the clusters' state)")
	flag.BoolVar(&o.skipBare, "skip-bare", false, "do not run the bare client")
	flag.BoolVar(&o.skipChannelMove, "skip-channel-move", false, "do not move the channel")
	flag.BoolVar(&o.baselineChannelMove, "baseline-channel-move", false, "move the channel for the baseline too")
	flag.BoolVar(&o.baselineFirst, "baseline-first", false, "measure the baseline before the operator (the later of two runs is the slower: run both orders)")
	flag.BoolVar(&o.pprof, "pprof", false, "save a CPU profile of the operator's first 20 s of convergence and a heap profile after the restart (needs --pprof-bind-address, so not for a baseline)")
	flag.BoolVar(&o.keep, "keep", false, "keep the clusters' directories (logs, audit logs)")
	flag.StringVar(&o.operatorArgs, "operator-args", "", "more flags for the operator (space-separated)")
	flag.StringVar(&o.gomemlimit, "gomemlimit", "", "GOMEMLIMIT of the operator, e.g. 90MiB (default: as config/manager/manager.yaml sets it; a baseline runs with its own revision's)")
	flag.StringVar(&o.gogc, "gogc", "", "GOGC of the operator (default: as config/manager/manager.yaml sets it; a baseline runs with its own revision's)")
	flag.IntVar(&o.hostileApps, "hostile-apps", 100, "ordinary SimpleWebApps of each round of the hostile neighbours run")
	flag.BoolVar(&o.skipHostile, "skip-hostile", false, "do not run the hostile neighbours rounds")
	flag.Parse()
	o.kcmQPS, o.schedQPS = float32(kcmQPS), float32(schedQPS)
	ctrllog.SetLogger(logr.Discard()) // the bench's own clients: nothing to say
	if o.podsPerNode == 0 {
		o.podsPerNode = max(110, 2*o.n/o.nodes+50)
	}

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	runCtx = ctx
	defer cancel()
	if err := run(ctx, o); err != nil {
		logf("bench: %v", err)
		os.Exit(1)
	}
}

// result is one run, written as JSON.
type result struct {
	Date        string            `json:"date"`
	Machine     string            `json:"machine"`
	LoadBefore  string            `json:"loadAverageBefore"`
	LoadAfter   string            `json:"loadAverageAfter"`
	Commit      string            `json:"commit"`
	N           int               `json:"n"`
	Namespaces  int               `json:"namespaces"`
	Settings    map[string]string `json:"settings"`
	Bare        *bareResult       `json:"bare,omitempty"`
	Operator    *opResult         `json:"operator,omitempty"`
	Baseline    *opResult         `json:"baseline,omitempty"`
	Hostile     *hostileResult    `json:"hostile,omitempty"`
	BaselineRev string            `json:"baselineRev,omitempty"`
}

func run(ctx context.Context, o opts) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if err := runtimeEnvOfDeployment(root, &o); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "swa-bench-")
	if err != nil {
		return err
	}
	if !o.keep {
		defer os.RemoveAll(work)
	} else {
		logf("state in %s", work)
	}
	bin := filepath.Join(work, "simplewebapp-operator")
	logf("building the operator")
	if err := build(root, bin); err != nil {
		return err
	}
	if o.workers == 0 {
		if o.workers, err = defaultWorkers(bin); err != nil {
			return err
		}
	}
	res := newResult(root, o)
	logf("bench N=%d namespaces=%d baseline=%q; load average %s", o.n, o.namespaces, o.baseline, res.LoadBefore)
	var baseBin, baseRoot string
	if o.baseline != "" {
		res.BaselineRev = gitRev(root, o.baseline)
		if baseBin, baseRoot, err = buildBaseline(work, o.baseline, res.BaselineRev); err != nil {
			return err
		}
	}
	if err := measure(ctx, work, root, bin, baseRoot, baseBin, o, res); err != nil {
		return err
	}
	res.LoadAfter = loadavg()
	return writeResult(res, o)
}

// newResult is a run's result before any measurement: where, when, and with
// which settings.
func newResult(root string, o opts) *result {
	return &result{
		Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(), LoadBefore: loadavg(),
		Commit: gitRev(root, "HEAD"), N: o.n, Namespaces: o.namespaces,
		Settings: map[string]string{
			"kube-controller-manager --kube-api-qps/burst": fmt.Sprintf("%g/%d", o.kcmQPS, o.kcmBurst),
			"kube-scheduler --kube-api-qps/burst":          fmt.Sprintf("%g/%d", o.schedQPS, o.schedBurst),
			"nodes x pods":                                 fmt.Sprintf("%d x %d", o.nodes, o.podsPerNode),
			"bare client":                                  fmt.Sprintf("%d in flight, QPS unlimited (as the operator's client)", o.workers),
			"creates in flight":                            fmt.Sprint(o.workers),
			"quiet":                                        o.quiet.String(),
			"operator args":                                o.operatorArgs,
			"order":                                        map[bool]string{true: "baseline, then operator", false: "operator, then baseline"}[o.baselineFirst],
			"operator GOGC / GOMEMLIMIT":                   o.gogc + " / " + o.gomemlimit,
		},
	}
}

// buildBaseline checks the revision rev out into work and builds its
// operator; it returns the binary and the checkout. short is rev's short
// commit, for the log.
func buildBaseline(work, rev, short string) (bin, root string, err error) {
	root = filepath.Join(work, "baseline-src")
	logf("building the baseline %s", short)
	if err := checkout(rev, root); err != nil {
		return "", "", err
	}
	bin = filepath.Join(work, "baseline-operator")
	if err := build(root, bin); err != nil {
		return "", "", err
	}
	return bin, root, nil
}

// measure runs each side on its own cluster, one after the other: the bare
// client, the operator, the baseline (baseBin, built from baseRoot); with
// -baseline-first the baseline before the operator.
func measure(ctx context.Context, work, root, bin, baseRoot, baseBin string, o opts, res *result) error {
	var err error
	if !o.skipBare {
		logf("== bare server-side-apply client")
		if res.Bare, err = runBare(ctx, filepath.Join(work, "bare"), root, o); err != nil {
			return fmt.Errorf("bare: %w", err)
		}
	}
	baseline := func() error {
		if o.baseline == "" {
			return nil
		}
		logf("== baseline %s", res.BaselineRev)
		if res.Baseline, err = runOperator(ctx, filepath.Join(work, "baseline"), baseRoot, baseBin, "baseline", o, o.baselineChannelMove && !o.skipChannelMove, false); err != nil {
			return fmt.Errorf("baseline: %w", err)
		}
		return nil
	}
	if o.baselineFirst {
		if err := baseline(); err != nil {
			return err
		}
	}
	logf("== operator")
	if res.Operator, err = runOperator(ctx, filepath.Join(work, "operator"), root, bin, "operator", o, !o.skipChannelMove, o.pprof); err != nil {
		return fmt.Errorf("operator: %w", err)
	}
	if !o.skipHostile {
		logf("== hostile neighbours")
		if res.Hostile, err = runHostile(ctx, filepath.Join(work, "hostile"), root, bin, o); err != nil {
			return fmt.Errorf("hostile neighbours: %w", err)
		}
	}
	if o.baselineFirst {
		return nil
	}
	return baseline()
}

// writeResult writes res as JSON into o.out and prints its table.
func writeResult(res *result, o opts) error {
	name := fmt.Sprintf("bench-n%d-ns%d-%s.json", o.n, o.namespaces, time.Now().UTC().Format("20060102T150405"))
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(filepath.Join(o.out, name), b, 0o644); err != nil {
		return err
	}
	fmt.Print(table(res))
	logf("wrote %s", filepath.Join(o.out, name))
	return nil
}

// defaultWorkers is the operator's default --max-concurrent-reconciles, as
// its usage states it.
func defaultWorkers(bin string) (int, error) {
	out, _ := exec.Command(bin, "-h").CombinedOutput() // usage on stderr, exit 0
	m := regexp.MustCompile(`-max-concurrent-reconciles int\n[^\n]*\(default (\d+)\)`).FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no default of --max-concurrent-reconciles in %s -h:\n%s", bin, out)
	}
	return strconv.Atoi(string(m[1]))
}

func gitRev(root, rev string) string {
	out, err := execOut(root, "git", "rev-parse", "--short", rev)
	if err != nil {
		return rev
	}
	return strings.TrimSpace(out)
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func machine() string {
	model := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				model = strings.TrimSpace(l[strings.Index(l, ":")+1:])
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		if _, err := fmt.Sscanf(strings.SplitN(string(b), "\n", 2)[0], "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.0f GiB", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%d CPUs (%s)%s, %s", runtime.NumCPU(), model, mem, runtime.Version())
}
