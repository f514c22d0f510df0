package controllers

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// upgradeSlots bounds how many SimpleWebApps roll out a new version at once
// (--max-concurrent-upgrades). When a channel moves, every SimpleWebApp that
// follows it wants the new version; a bound keeps the cluster's churn (new
// pods, images pulled, the Deployment controller's work) in proportion and
// lets a bad version be rolled back on a few SimpleWebApps before it reaches
// the rest. A SimpleWebApp holds its slot from the apply of the new version
// until it is Ready or rolled back.
type upgradeSlots struct {
	max int // 0: unbounded
	mu  sync.Mutex
	in  map[types.NamespacedName]bool
}

// acquire takes a slot for key and reports whether it holds one. A
// SimpleWebApp whose upgrade is already under way (after a restart of the
// operator) always gets one back.
func (s *upgradeSlots) acquire(key types.NamespacedName, underWay bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.in == nil {
		s.in = map[types.NamespacedName]bool{}
	}
	if s.in[key] || underWay || s.max <= 0 || len(s.in) < s.max {
		s.in[key] = true
		return true
	}
	return false
}

func (s *upgradeSlots) release(key types.NamespacedName) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.in, key)
}

func (s *upgradeSlots) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.in)
}
