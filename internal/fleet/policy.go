package fleet

import (
	"errors"
	"time"
)

// Policy is how versions roll out over the fleet (the operator's
// --rollout-* flags).
type Policy struct {
	// FirstWave is how many SimpleWebApps try a new version first, each in
	// another namespace when there are enough.
	FirstWave int
	// SecondWavePercent of the SimpleWebApps that want the version (rounded
	// up) try it next; then all the rest, as upgrade slots allow.
	SecondWavePercent int
	// HaltFailures and HaltPercent: the version halts when at least
	// HaltFailures counted upgrades failed, and they are at least
	// HaltPercent of the upgrades tried, in at least HaltNamespaces
	// namespaces.
	HaltFailures   int
	HaltPercent    int
	HaltNamespaces int
	// WaveTimeout bounds each upgrade of a SimpleWebApp that follows a
	// channel, whatever its spec.upgradeTimeout, so no tenant holds a wave
	// (and the fleet) for longer.
	WaveTimeout time.Duration
}

// DefaultPolicy is what the flags default to.
var DefaultPolicy = Policy{FirstWave: 3, SecondWavePercent: 5, HaltFailures: 2, HaltPercent: 50, HaltNamespaces: 2, WaveTimeout: 10 * time.Minute}

// Validate checks the policy's bounds.
func (p Policy) Validate() error {
	switch {
	case p.FirstWave < 1:
		return errors.New("--rollout-first-wave must be at least 1")
	case p.SecondWavePercent < 0 || p.SecondWavePercent > 100:
		return errors.New("--rollout-second-wave-percent must be between 0 and 100")
	case p.HaltFailures < 1:
		return errors.New("--rollout-halt-failures must be at least 1")
	case p.HaltPercent < 0 || p.HaltPercent > 100:
		return errors.New("--rollout-halt-percent must be between 0 and 100")
	case p.HaltNamespaces < 1:
		return errors.New("--rollout-halt-namespaces must be at least 1")
	case p.WaveTimeout <= 0:
		return errors.New("--rollout-wave-timeout must be positive")
	}
	return nil
}
