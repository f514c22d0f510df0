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
	// ReadySeconds: from the first ordinary create until all are Ready.
	ReadySeconds float64 `json:"readySeconds"`
	// Ratio is ReadySeconds over the round without bombs.
	Ratio float64 `json:"ratio"`
	// BombsAnswered: bombs Stalled (refused) or Ready (allowed) by then,
	// and AnsweredSeconds until all were.
	BombsAnswered   int      `json:"bombsAnswered"`
	AnsweredSeconds float64  `json:"answeredSeconds"`
	CPUSeconds      float64  `json:"operatorCpuSeconds"`
	PeakRSSMiB      float64  `json:"peakRssMiB"`
	Refusals        []string `json:"refusals"` // reason counts
}

// hostileBombs are the rounds' bomb counts: none, a few, many.
var hostileBombs = []int{0, 3, 30}

// runHostile measures the rounds on a cluster of its own.
func runHostile(ctx context.Context, dir, root, bin string, o opts) (*hostileResult, error) {
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
	kinds := bombKinds()
	for i, bombs := range hostileBombs {
		round, err := r.hostileRound(ctx, i, bombs, kinds)
		if err != nil {
			return nil, err
		}
		if base := res.Rounds; len(base) > 0 && base[0].ReadySeconds > 0 {
			round.Ratio = round.ReadySeconds / base[0].ReadySeconds
		} else {
			round.Ratio = 1
		}
		res.Rounds = append(res.Rounds, round)
		logf("  %d bombs: %d ordinary apps Ready in %.1fs (%.2fx), %d/%d bombs answered after %.1fs, operator CPU %.1fs, peak RSS %.0f MiB",
			bombs, o.hostileApps, round.ReadySeconds, round.Ratio, round.BombsAnswered, bombs, round.AnsweredSeconds, round.CPUSeconds, round.PeakRSSMiB)
	}
	res.PeakRSSMiB = statsOf(r.op.Pid()).PeakRSSMiB
	if exited, err := r.op.Exited(); exited {
		return nil, fmt.Errorf("the operator exited: %v\n%s", err, r.op.LogTail(20))
	}
	return res, nil
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
// bomb is answered.
func (r *opRun) hostileRound(ctx context.Context, i, bombs int, kinds []namedPatches) (hostileRound, error) {
	e, o := r.e, r.o
	bombNS, calmNS := fmt.Sprintf("hostile-%d", i), fmt.Sprintf("calm-%d", i)
	for _, ns := range []string{bombNS, calmNS} {
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
	start := time.Now()
	for a := range o.hostileApps {
		app := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Namespace: calmNS, Name: fmt.Sprintf("app-%d", a)},
			Spec: webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](1), Channel: channelName}}
		if err := e.C.Create(ctx, app); err != nil {
			return round, err
		}
	}
	if _, ok := waitUntil(10*time.Minute, func() bool { return e.track.inNamespace(calmNS).ready >= o.hostileApps }, func() string {
		return fmt.Sprintf("%d of %d ordinary apps Ready", e.track.inNamespace(calmNS).ready, o.hostileApps)
	}); !ok {
		return round, fmt.Errorf("the ordinary apps were not Ready next to %d bombs\n%s", bombs, r.op.LogTail(20))
	}
	round.ReadySeconds = time.Since(start).Seconds()
	round.BombsAnswered = e.track.inNamespace(bombNS).answered
	if _, ok := waitUntil(10*time.Minute, func() bool { return e.track.inNamespace(bombNS).answered >= bombs }, func() string {
		return fmt.Sprintf("%d of %d bombs answered", e.track.inNamespace(bombNS).answered, bombs)
	}); !ok {
		return round, fmt.Errorf("bombs not answered\n%s", r.op.LogTail(20))
	}
	round.AnsweredSeconds = time.Since(t0).Seconds()
	round.Refusals = e.track.inNamespace(bombNS).reasons
	st := statsOf(r.op.Pid())
	round.CPUSeconds, round.PeakRSSMiB = st.CPUSeconds-cpu0, st.PeakRSSMiB
	return round, nil
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

// hostileFigures are the table rows of the hostile run.
func hostileTable(h *hostileResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "\nhostile neighbours: %d ordinary SimpleWebApps created right after the bombs; operator memory limit %.0f MiB (config/manager)\n\n", h.Apps, h.MemoryLimitMiB)
	b.WriteString("| bombs | ordinary apps Ready | vs no bombs | bombs answered by then | all bombs answered | operator CPU | peak RSS | refusals |\n|---|---|---|---|---|---|---|---|\n")
	for _, r := range h.Rounds {
		fmt.Fprintf(&b, "| %d | %.1f s | %.2f× | %d | %.1f s | %.1f s | %.0f MiB | %s |\n",
			r.Bombs, r.ReadySeconds, r.Ratio, r.BombsAnswered, r.AnsweredSeconds, r.CPUSeconds, r.PeakRSSMiB, strings.Join(r.Refusals, ", "))
	}
	fmt.Fprintf(&b, "\noperator peak RSS over the run: %.0f MiB of its %.0f MiB limit\n", h.PeakRSSMiB, h.MemoryLimitMiB)
	return b.String()
}
