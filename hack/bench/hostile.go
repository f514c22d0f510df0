package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// hostileResult is the "hostile neighbours" run: ordinary SimpleWebApps
// created right after bombs of every kind (testkit.RefusedAttempts, and
// CacheBomb, which is allowed but large), against the same without bombs,
// on one operator with the runtime settings and memory limit it ships with.
type hostileResult struct {
	Apps           int            `json:"apps"`
	MemoryLimitMiB float64        `json:"memoryLimitMiB"`
	Rounds         []hostileRound `json:"rounds"`
	PeakRSSMiB     float64        `json:"peakRssMiB"`
}

type hostileRound struct {
	Bombs int `json:"bombs"`
	// ReadySeconds: from the first ordinary create, right after the bombs',
	// until all are Ready: the ordinary apps share the operator with the
	// bombs' first reconciles.
	ReadySeconds float64 `json:"readySeconds"`
	// Ratio is ReadySeconds over the mean of the rounds without bombs
	// before and after this one (1 for those).
	Ratio float64 `json:"ratio"`
	// AfterSeconds and AfterRatio: the same for as many ordinary apps again,
	// created once every bomb was answered: what the bombs cost while they
	// stay.
	AfterSeconds float64 `json:"afterSeconds"`
	AfterRatio   float64 `json:"afterRatio"`
	// BombsAnswered: bombs Stalled (refused) or Ready (allowed) by then,
	// and AnsweredSeconds until all were.
	BombsAnswered   int      `json:"bombsAnswered"`
	AnsweredSeconds float64  `json:"answeredSeconds"`
	CPUSeconds      float64  `json:"operatorCpuSeconds"`
	PeakRSSMiB      float64  `json:"peakRssMiB"`
	Refusals        []string `json:"refusals"` // reason counts
}

// hostileBombs are the rounds' bomb counts: a few, then many, each between
// rounds without bombs. The cluster slows as the rounds' objects accumulate,
// so a round with bombs is compared with the mean of the rounds without
// bombs just before and after it, not with the first round.
var hostileBombs = []int{0, 3, 0, 30, 0}

// runHostile measures the rounds on a cluster of its own.
func runHostile(ctx context.Context, dir, root, bin string, o opts) (*hostileResult, error) {
	// Room for every pod of the run: the warm-up round, two rounds of
	// ordinary apps per bomb count and the bombs, twice over.
	pods := o.hostileApps
	for _, b := range hostileBombs {
		pods += 2*o.hostileApps + b
	}
	o.podsPerNode = max(o.podsPerNode, 2*pods/o.nodes+50)
	e, err := newEnv(ctx, dir, root, o)
	if e != nil {
		defer e.stop()
	}
	if err != nil {
		return nil, err
	}
	r := &opRun{e: e, o: o, bin: bin, name: "operator", cdir: filepath.Join(dir, "channels"), res: &opResult{}}
	if err := r.start(ctx, root); err != nil {
		return nil, err
	}
	defer func() { r.op.Kill() }()
	if err := warmUp(ctx, e.C, o); err != nil {
		return nil, err
	}
	res := &hostileResult{Apps: o.hostileApps}
	if res.MemoryLimitMiB, err = memoryLimitOfDeployment(root); err != nil {
		return nil, err
	}
	// A round of ordinary apps first, not measured: the first creates in a
	// fresh cluster are slower (the API server's and the operator's caches,
	// the scheduler), which would flatter every round after the first.
	if _, err := e.CS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "warm"}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if _, err := r.ordinaryApps(ctx, "warm", 0); err != nil {
		return nil, err
	}
	kinds := bombKinds()
	for i, bombs := range hostileBombs {
		round, err := r.hostileRound(ctx, i, bombs, kinds)
		if err != nil {
			return nil, err
		}
		res.Rounds = append(res.Rounds, round)
		logf("  %d bombs: %d ordinary apps Ready in %.1fs, %d/%d bombs answered after %.1fs; %d more after that Ready in %.1fs; operator CPU %.1fs, peak RSS %.0f MiB",
			bombs, o.hostileApps, round.ReadySeconds, round.BombsAnswered, bombs, round.AnsweredSeconds, o.hostileApps, round.AfterSeconds, round.CPUSeconds, round.PeakRSSMiB)
	}
	bracketRatios(res.Rounds)
	res.PeakRSSMiB = statsOf(r.op.Pid()).PeakRSSMiB
	if exited, err := r.op.Exited(); exited {
		return nil, fmt.Errorf("the operator exited: %v\n%s", err, r.op.LogTail(20))
	}
	return res, nil
}

// bracketRatios sets each round's ratios against the mean of its
// neighbours without bombs.
func bracketRatios(rounds []hostileRound) {
	for i := range rounds {
		r := &rounds[i]
		r.Ratio, r.AfterRatio = 1, 1
		if r.Bombs == 0 || i == 0 || i == len(rounds)-1 {
			continue
		}
		before, after := rounds[i-1], rounds[i+1] //nolint:gosec // G602: i is neither the first nor the last (above)
		if before.Bombs != 0 || after.Bombs != 0 {
			continue
		}
		r.Ratio = r.ReadySeconds / ((before.ReadySeconds + after.ReadySeconds) / 2)
		r.AfterRatio = r.AfterSeconds / ((before.AfterSeconds + after.AfterSeconds) / 2)
	}
}

// bombKinds are the bombs' patches, in a fixed order: round k creates
// the first k of them, repeating the list.
func bombKinds() []namedPatches {
	attempts := testkit.RefusedAttempts()
	var out []namedPatches
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range attempts {
			if !yield(k) {
				return
			}
		}
	}) {
		out = append(out, namedPatches{name, attempts[name]})
	}
	return append(out, namedPatches{"cachebomb", testkit.CacheBomb()})
}

type namedPatches struct {
	name    string
	patches []webappv1.Patch
}

// hostileRound creates bombs in a namespace of their own, then the ordinary
// apps in another, and waits until the ordinary ones are Ready and every
// bomb is answered; then as many ordinary apps again in a third namespace,
// until they are Ready.
func (r *opRun) hostileRound(ctx context.Context, i, bombs int, kinds []namedPatches) (hostileRound, error) {
	e := r.e
	bombNS, calmNS, afterNS := fmt.Sprintf("hostile-%d", i), fmt.Sprintf("calm-%d", i), fmt.Sprintf("after-%d", i)
	for _, ns := range []string{bombNS, calmNS, afterNS} {
		if _, err := e.CS.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return hostileRound{}, err
		}
	}
	round := hostileRound{Bombs: bombs}
	cpu0 := statsOf(r.op.Pid()).CPUSeconds
	t0 := time.Now()
	for b := range bombs {
		k := kinds[b%len(kinds)]
		app := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: bombNS, Name: fmt.Sprintf("%s-%d", k.name, b)},
			Spec: webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](1), Channel: channelName, Patches: k.patches}}
		if err := e.C.Create(ctx, app); err != nil {
			return round, fmt.Errorf("creating bomb %s: %w", app.Name, err)
		}
	}
	var err error
	if round.ReadySeconds, err = r.ordinaryApps(ctx, calmNS, bombs); err != nil {
		return round, err
	}
	round.BombsAnswered = e.track.inNamespace(bombNS).answered
	if _, ok := waitUntil(10*time.Minute, func() bool { return e.track.inNamespace(bombNS).answered >= bombs }, func() string {
		return fmt.Sprintf("%d of %d bombs answered", e.track.inNamespace(bombNS).answered, bombs)
	}); !ok {
		return round, fmt.Errorf("bombs not answered\n%s", r.op.LogTail(20))
	}
	round.AnsweredSeconds = time.Since(t0).Seconds()
	round.Refusals = e.track.inNamespace(bombNS).reasons
	if round.AfterSeconds, err = r.ordinaryApps(ctx, afterNS, bombs); err != nil {
		return round, err
	}
	st := statsOf(r.op.Pid())
	round.CPUSeconds, round.PeakRSSMiB = st.CPUSeconds-cpu0, st.PeakRSSMiB
	return round, nil
}

// ordinaryApps creates -hostile-apps SimpleWebApps in ns and returns the
// seconds from the first create until all are Ready.
func (r *opRun) ordinaryApps(ctx context.Context, ns string, bombs int) (float64, error) {
	e, o := r.e, r.o
	start := time.Now()
	for a := range o.hostileApps {
		app := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("app-%d", a)},
			Spec: webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](1), Channel: channelName}}
		if err := e.C.Create(ctx, app); err != nil {
			return 0, err
		}
	}
	if _, ok := waitUntil(10*time.Minute, func() bool { return e.track.inNamespace(ns).ready >= o.hostileApps }, func() string {
		return fmt.Sprintf("%d of %d ordinary apps in %s Ready", e.track.inNamespace(ns).ready, o.hostileApps, ns)
	}); !ok {
		return 0, fmt.Errorf("the ordinary apps in %s were not Ready next to %d bombs\n%s", ns, bombs, r.op.LogTail(20))
	}
	return time.Since(start).Seconds(), nil
}

// nsCounts are the SimpleWebApps of one namespace: Ready, and answered
// (Ready, or Stalled with a reason), with the Stalled reasons counted.
type nsCounts struct {
	ready, answered int
	reasons         []string
}

func (t *tracker) inNamespace(ns string) nsCounts {
	t.mu.Lock()
	defer t.mu.Unlock()
	var c nsCounts
	reasons := map[string]int{}
	for _, a := range t.apps {
		if a.Namespace != ns {
			continue
		}
		ready := apimeta.FindStatusCondition(a.Status.Conditions, webappv1.ConditionReady)
		stalled := apimeta.FindStatusCondition(a.Status.Conditions, webappv1.ConditionStalled)
		current := a.Status.ObservedGeneration >= a.Generation
		switch {
		case current && ready != nil && ready.Status == metav1.ConditionTrue:
			c.ready++
			c.answered++
		case current && stalled != nil && stalled.Status == metav1.ConditionTrue:
			c.answered++
			reasons[stalled.Reason]++
		}
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range reasons {
			if !yield(k) {
				return
			}
		}
	}) {
		c.reasons = append(c.reasons, fmt.Sprintf("%s %d", k, reasons[k]))
	}
	return c
}

// hostileTable is the hostile run's table.
func hostileTable(h *hostileResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nhostile neighbours: %d ordinary SimpleWebApps created right after the bombs, then %d more once every bomb was answered; operator memory limit %.0f MiB (config/manager)\n\n", h.Apps, h.Apps, h.MemoryLimitMiB)
	b.WriteString("| bombs | ordinary apps Ready (created with the bombs) | vs the rounds without bombs around it | bombs answered by then | all bombs answered | ordinary apps Ready (created after) | vs the rounds without bombs around it | operator CPU | peak RSS | refusals |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range h.Rounds {
		fmt.Fprintf(&b, "| %d | %.1f s | %.2f× | %d | %.1f s | %.1f s | %.2f× | %.1f s | %.0f MiB | %s |\n",
			r.Bombs, r.ReadySeconds, r.Ratio, r.BombsAnswered, r.AnsweredSeconds, r.AfterSeconds, r.AfterRatio, r.CPUSeconds, r.PeakRSSMiB, strings.Join(r.Refusals, ", "))
	}
	fmt.Fprintf(&b, "\noperator peak RSS over the run: %.0f MiB of its %.0f MiB limit\n", h.PeakRSSMiB, h.MemoryLimitMiB)
	return b.String()
}
