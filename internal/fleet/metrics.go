package fleet

import (
	"example.com/simplewebapp-operator/internal/metrics"
)

// Report sets the roll-out metrics from the states and the apps last seen
// (apps is nil when no roll-out is under way).
func Report(states []State, apps map[Key][]App) {
	metrics.VersionHalted.Reset()
	metrics.RolloutWave.Reset()
	for _, st := range states {
		v, c := st.Key.Version, st.Key.Hash
		if st.Halted != nil && !st.Superseded {
			metrics.VersionHalted.WithLabelValues(v, c).Set(1)
		}
		metrics.RolloutWave.WithLabelValues(v, c).Set(float64(st.Wave + 1))
	}
	metrics.RolloutApps.Reset()
	for k, list := range apps {
		counts := map[string]int{"waiting": 0, "upgrading": 0, "on": 0, "failed": 0}
		for _, a := range list {
			switch {
			case a.Upgrading:
				counts["upgrading"]++
			case a.On:
				counts["on"]++
			case a.FailedAt != nil:
				counts["failed"]++
			case a.Wants:
				counts["waiting"]++
			}
		}
		for state, n := range counts {
			metrics.RolloutApps.WithLabelValues(k.Version, k.Hash, state).Set(float64(n))
		}
	}
}
