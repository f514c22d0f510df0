package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

type phase struct {
	Seconds  float64  `json:"seconds"`
	Requests requests `json:"requests"`
}

type opResult struct {
	CreateSeconds  float64 `json:"createSeconds"`
	AppliedSeconds float64 `json:"appliedSeconds"`
	// AppliedQuartiles: seconds until a quarter, half, three quarters of
	// the apps were applied (and all): the rate, and whether a tail is slow.
	AppliedQuartiles []float64 `json:"appliedQuartiles"`
	ReadySeconds     float64   `json:"readySeconds"`
	QuietSeconds     float64   `json:"quietSeconds"`
	Objects          int       `json:"objects"`
	Requests         requests  `json:"requests"`
	Reconciles       float64   `json:"reconciles"`
	Stats            procStats `json:"stats"`
	CPUSeconds       float64   `json:"cpuSecondsCreateToQuiet"`
	// ControlPlaneCPU: CPU seconds per control-plane process from the
	// first create until applied; OperatorCPUToApplied the operator's.
	ControlPlaneCPU      map[string]float64 `json:"controlPlaneCPUSecondsToApplied"`
	OperatorCPUToApplied float64            `json:"operatorCPUSecondsToApplied"`

	Restart struct {
		phase
		ObjectsChanged int       `json:"objectsChanged"`
		ObjectsChecked int       `json:"objectsChecked"`
		Reconciles     float64   `json:"reconciles"`
		Stats          procStats `json:"stats"`
	} `json:"restart"`
	ChildStatus phase              `json:"childStatusChange"`
	DriftDelete phase              `json:"driftDelete"`
	DriftEdit   phase              `json:"driftEdit"`
	ChannelMove *channelMoveResult `json:"channelMove,omitempty"`
	HeapTop     string             `json:"heapTop,omitempty"`
	MemStats    map[string]float64 `json:"memStatsAfterRestart,omitempty"`
}

// channelMoveResult is the move of every app from fromVersion to toVersion.
type channelMoveResult struct {
	phase
	MaxInFlight    int     `json:"maxUpgradesInFlight"`
	FailedUpgrades int     `json:"failedUpgrades"`
	Rollbacks      float64 `json:"rollbacksMetric"`
	// CPU seconds over the move: the operator's, the control plane's by
	// process, and the machine's stolen by its host (a move's time depends
	// on all three; CPU compares builds where wall time varies by run).
	OperatorCPU     float64            `json:"operatorCPUSeconds"`
	ControlPlaneCPU map[string]float64 `json:"controlPlaneCPUSeconds"`
	StealSeconds    float64            `json:"stealSeconds"`
}

// opRun is one operator build measured on its own cluster: what runOperator's
// steps share.
type opRun struct {
	e     *env
	o     opts
	bin   string
	name  string // "operator" or "baseline"
	pprof bool
	cdir  string   // the --channels-dir
	args  []string // the operator's flags, also after the restart
	env   []string // its GOGC and GOMEMLIMIT (runtimeEnv)
	op    *operator
	res   *opResult
}

// runOperator measures one operator build on its own cluster: create N
// SimpleWebApps, restart, a child's status change, drift, a channel move.
func runOperator(ctx context.Context, dir, root, bin, name string, o opts, channelMove, pprof bool) (*opResult, error) {
	e, err := newEnv(ctx, dir, root, o)
	if e != nil {
		defer e.stop()
	}
	if err != nil {
		return nil, err
	}
	r := &opRun{e: e, o: o, bin: bin, name: name, pprof: pprof, cdir: filepath.Join(dir, "channels"), res: &opResult{}}
	if err := r.start(ctx, root); err != nil {
		return nil, err
	}
	// r.op is the restarted process once restart has run.
	defer func() { r.op.Kill() }()

	cpuProfiled := r.profileConvergence()
	if err := r.converge(ctx); err != nil {
		return nil, err
	}
	<-cpuProfiled
	if err := r.restart(ctx); err != nil {
		return nil, err
	}
	if err := r.reactions(ctx); err != nil {
		return nil, err
	}
	if channelMove {
		if err := r.moveChannel(); err != nil {
			return nil, err
		}
	}
	return r.res, nil
}

// start writes the channel at fromVersion and starts the operator on it.
func (r *opRun) start(ctx context.Context, root string) error {
	if err := writeChannel(r.cdir, fromVersion); err != nil {
		return err
	}
	r.args = []string{"--channels-dir=" + r.cdir, "--channels-poll-interval=1s"}
	if r.name == "operator" && r.o.operatorArgs != "" {
		r.args = append(r.args, strings.Fields(r.o.operatorArgs)...)
	}
	env, err := runtimeEnv(root, r.name, r.o)
	if err != nil {
		return err
	}
	r.env = env
	r.op, err = startOperator(ctx, r.e, r.bin, r.name, r.pprof, r.args, r.env)
	return err
}

// runtimeEnv is the operator's GOGC and GOMEMLIMIT: as its Deployment sets
// them (runtimeEnvOfDeployment) or the flags say; a baseline's as its own
// revision's Deployment sets them. They go to the operator's process only:
// set in the bench's own environment, they reached every cluster started
// after the first operator, and its kube-apiserver spent most of its CPU
// collecting garbage under the operator's memory limit.
func runtimeEnv(root, name string, o opts) ([]string, error) {
	env := opts{gogc: o.gogc, gomemlimit: o.gomemlimit}
	if name != "operator" {
		env = opts{}
		if err := runtimeEnvOfDeployment(root, &env); err != nil {
			return nil, err
		}
	}
	// Empty is the runtime's default: GOGC=100, no memory limit.
	return []string{"GOGC=" + env.gogc, "GOMEMLIMIT=" + env.gomemlimit}, nil
}

// restart stops the operator and starts it again with nothing changed, then
// counts its requests and the objects it wrote anyway.
func (r *opRun) restart(ctx context.Context) error {
	e, o, res := r.e, r.o, r.res
	before, err := allVersions(ctx, e.C)
	if err != nil {
		return err
	}
	if err := r.op.Stop(time.Minute); err != nil {
		return err
	}
	mark := e.audit.mark()
	t0 := time.Now()
	restarted, err := startOperator(ctx, e, r.bin, r.name+"-restarted", r.pprof, r.args, r.env)
	if err != nil {
		return err
	}
	r.op = restarted // only a started process: the deferred Kill needs one
	e.audit.waitQuiet(operatorUser, o.quiet, 5*time.Minute)
	res.Restart.Seconds = time.Since(t0).Seconds() - o.quiet.Seconds()
	res.Restart.Requests = summarise(e.audit.since(mark, operatorUser), true)
	res.Restart.Reconciles = r.op.reconciles()
	res.Restart.Stats = statsOf(r.op.Pid())
	after, err := allVersions(ctx, e.C)
	if err != nil {
		return err
	}
	res.Restart.ObjectsChecked = len(before)
	for k, rv := range before {
		if after[k] != rv {
			res.Restart.ObjectsChanged++
		}
	}
	logf("  restart: %d requests (%s), %d of %d objects changed, RSS %.0f MiB (anonymous %.0f, file %.0f)", res.Restart.Requests.Total, res.Restart.Requests.verbs(), res.Restart.ObjectsChanged, len(before), res.Restart.Stats.RSSMiB, res.Restart.Stats.RSSAnonMiB, res.Restart.Stats.RSSFileMiB)
	if r.pprof {
		r.profileHeap()
	}
	return nil
}

// profileHeap saves the restarted operator's heap profile and memory
// statistics: what its RSS is made of once it holds every object again.
func (r *opRun) profileHeap() {
	o := r.o
	top, err := r.op.heapProfile(filepath.Join(o.out, fmt.Sprintf("heap-n%d-ns%d.pb.gz", o.n, o.namespaces)))
	if err != nil {
		logf("  heap profile: %v", err)
	}
	r.res.HeapTop = top
	r.res.MemStats = r.op.memStats()
	logf("  memory after the restart: %v", r.res.MemStats)
}

// reactions measures the operator's answer to single changes: a child's
// status change (a pod of app-0 goes away and comes back), then drift.
func (r *opRun) reactions(ctx context.Context) error {
	e, o, res := r.e, r.o, r.res
	var err error
	if res.ChildStatus, err = childStatusChange(ctx, e, o); err != nil {
		return err
	}
	logf("  child status change: %d requests (%s) %v", res.ChildStatus.Requests.Total, res.ChildStatus.Requests.verbs(), res.ChildStatus.Requests.Objects)
	if res.DriftDelete, err = driftDelete(ctx, e, o); err != nil {
		return err
	}
	logf("  drift (deleted Service): back after %.2fs; %v", res.DriftDelete.Seconds, res.DriftDelete.Requests.Objects)
	if res.DriftEdit, err = driftEdit(ctx, e, o); err != nil {
		return err
	}
	logf("  drift (edited Service label): back after %.2fs; %v", res.DriftEdit.Seconds, res.DriftEdit.Requests.Objects)
	return nil
}

// moveChannel moves the channel to toVersion and times until every app is
// upgraded and Ready. A move that does not complete is recorded, not an
// error: its figures say how far it got.
func (r *opRun) moveChannel() error {
	e, o := r.e, r.o
	cm := &channelMoveResult{}
	e.track.resetMaxUpgrades()
	mark := e.audit.mark()
	cpu0, cp0, steal0 := statsOf(r.op.Pid()).CPUSeconds, controlPlaneCPU(e.Cluster), stealSeconds()
	t0 := time.Now()
	if err := writeChannel(r.cdir, fromVersion, toVersion); err != nil {
		return err
	}
	profiled := r.profile("move", 60*time.Second)
	_, ok := waitUntil(40*time.Minute, func() bool { c := e.track.counts(); return c.atVersion[toVersion] >= o.n && c.upgrading == 0 },
		func() string {
			c := e.track.counts()
			return fmt.Sprintf("%d ready at %s, %d upgrading, %d failed upgrades", c.atVersion[toVersion], toVersion, c.upgrading, c.failedUpgrade)
		})
	cm.Seconds = time.Since(t0).Seconds()
	cm.OperatorCPU = statsOf(r.op.Pid()).CPUSeconds - cpu0
	cm.ControlPlaneCPU, cm.StealSeconds = cpuSince(e.Cluster, cp0), stealSeconds()-steal0
	<-profiled
	e.audit.waitQuiet(operatorUser, o.quiet, 5*time.Minute)
	cm.Requests = summarise(e.audit.since(mark, operatorUser), false)
	cm.MaxInFlight = e.track.maxUpgrades()
	cm.FailedUpgrades = e.track.counts().failedUpgrade
	cm.Rollbacks = r.op.scrape("simplewebapp_rollbacks_total", nil)
	r.res.ChannelMove = cm
	logf("  channel move (complete=%v): %.1fs, max %d upgrades in flight, %d failed upgrades, %d requests; CPU s: operator %.1f, %s; stolen %.1f", ok, cm.Seconds, cm.MaxInFlight, cm.FailedUpgrades, cm.Requests.Total, cm.OperatorCPU, controlPlaneCPUText(cm.ControlPlaneCPU), cm.StealSeconds)
	return nil
}
