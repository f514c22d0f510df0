package fleet

import (
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Plan starts the roll-out of k: the first wave is FirstWave of the apps
// that want it, one per namespace while there are other namespaces, the
// second SecondWavePercent of them, by rank. Only apps that are Ready and
// have no patches or image of their own go in these waves, so what they
// show is the version's doing; the others wait for the last wave.
func Plan(k Key, apps []App, p Policy, now time.Time) *State {
	var candidates []App
	wanting := 0
	for _, a := range apps {
		if !a.Wants {
			continue
		}
		wanting++
		if a.Ready && !a.Own {
			candidates = append(candidates, a)
		}
	}
	slices.SortFunc(candidates, func(a, b App) int {
		ra, rb := rank(k, a.UID), rank(k, b.UID)
		switch {
		case ra < rb:
			return -1
		case ra > rb:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	taken := map[string]bool{}
	var first []string
	// One per namespace first, then fill up in rank order.
	for _, spread := range []bool{true, false} {
		namespaces := map[string]bool{}
		for _, a := range candidates {
			if len(first) == p.FirstWave {
				break
			}
			if taken[a.Name] || spread && namespaces[a.Namespace] {
				continue
			}
			namespaces[a.Namespace], taken[a.Name] = true, true
			first = append(first, a.Name)
		}
	}
	second := []string{}
	size := (wanting*p.SecondWavePercent + 99) / 100
	for _, a := range candidates {
		if len(second) == size {
			break
		}
		if !taken[a.Name] {
			taken[a.Name] = true
			second = append(second, a.Name)
		}
	}
	t := metav1.NewTime(now.Truncate(time.Second))
	if first == nil {
		first = []string{}
	}
	return &State{Key: k, StartedAt: t, Waves: [][]string{first, second}, WaveStartedAt: t, CountSince: t}
}

// countChecks decide, in order, whether a failed upgrade counts towards a
// halt: each returns why not, or "".
var countChecks = []func(a App, s *State) string{
	func(a App, s *State) string {
		if a.FailedAt == nil || a.FailedAt.Before(&s.CountSince) {
			return "no failure of this roll-out"
		}
		return ""
	},
	func(a App, _ *State) string {
		if a.Own {
			return "it has its own patches or image"
		}
		return ""
	},
	func(a App, _ *State) string {
		if !a.Recovered {
			return "it is not Ready on the version it went back to"
		}
		return ""
	},
}

// counts: a's failure says something about the version.
func counts(a App, s *State) bool {
	for _, check := range countChecks {
		if check(a, s) != "" {
			return false
		}
	}
	return true
}

// Advance is one look at a roll-out: it counts the failed upgrades, halts the
// version when they cross the policy's threshold, starts the next wave when
// every app of the current one has the version or failed it, and marks the
// roll-out complete when nothing wants it any more. It returns the new state
// and whether it differs (then it is written).
func Advance(s *State, apps []App, p Policy, now time.Time) (*State, bool) {
	if s.Halted != nil {
		return s, false
	}
	next := *s
	changed := false
	var failures []Failure
	tried := 0
	for _, a := range apps {
		if a.Upgrading || a.On || a.FailedAt != nil && !a.FailedAt.Before(&s.CountSince) {
			tried++
		}
		if counts(a, s) {
			failures = append(failures, Failure{App: a.Name, RolledBackAt: *a.FailedAt})
		}
	}
	slices.SortFunc(failures, func(a, b Failure) int { return strings.Compare(a.App, b.App) })
	if !slices.Equal(failures, s.Failures) {
		next.Failures, next.Tried, changed = failures, tried, true
	}
	if n := len(next.Failures); n >= p.HaltFailures && n*100 >= p.HaltPercent*max(next.Tried, 1) && next.Namespaces() >= p.HaltNamespaces {
		next.Halted = &Halt{At: metav1.NewTime(now.Truncate(time.Second)),
			Reason: fmt.Sprintf("%d of %d upgrades to it failed, in %d namespaces (%s)", n, next.Tried, next.Namespaces(), failedApps(next.Failures))}
		return &next, true
	}
	byName := map[string]App{}
	for _, a := range apps {
		byName[a.Name] = a
	}
	for next.Wave < len(next.Waves) && settled(next.Waves[next.Wave], byName, s, now) {
		next.Wave++
		next.WaveStartedAt, changed = metav1.NewTime(now.Truncate(time.Second)), true
	}
	if next.Wave == len(next.Waves) && !next.Complete && !slices.ContainsFunc(apps, func(a App) bool { return a.Wants || a.Upgrading }) {
		next.Complete, changed = true, true
	}
	return &next, changed
}

// RecoverWait is how long a wave waits for a failed member to run its old
// version again (and so be counted, or not) before it is settled anyway.
const RecoverWait = time.Minute

// settled: every member of a wave has the version, or failed it and its
// failure was weighed, or no longer wants it.
func settled(members []string, apps map[string]App, s *State, now time.Time) bool {
	for _, m := range members {
		a, ok := apps[m]
		failed := a.FailedAt != nil && !a.FailedAt.Before(&s.CountSince)
		switch {
		case !ok, a.On, !failed && !a.Wants && !a.Upgrading:
		case failed && (a.Recovered || a.Own || now.Sub(a.FailedAt.Time) > RecoverWait):
		default:
			return false
		}
	}
	return true
}

// failedApps names a few failed apps for a message.
func failedApps(fs []Failure) string {
	names := make([]string, 0, 3)
	for _, f := range fs {
		if len(names) == 3 {
			names = append(names, "...")
			break
		}
		names = append(names, f.App)
	}
	return strings.Join(names, ", ")
}
