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
//
// A freed slot wakes the SimpleWebApp that has waited longest (wake), so
// slots do not stand empty until a waiting one looks again on its own.
type upgradeSlots struct {
	max  int                        // 0: unbounded
	wake func(types.NamespacedName) // nil: waiting ones only look again on their own

	mu      sync.Mutex
	in      map[types.NamespacedName]bool
	waiting []types.NamespacedName        // refused a slot, oldest first
	queued  map[types.NamespacedName]bool // in waiting and still waiting
	woken   map[types.NamespacedName]bool // woken, not yet back for a slot
}

// acquire takes a slot for key and reports whether it holds one. A
// SimpleWebApp whose upgrade is already under way (after a restart of the
// operator) always gets one back.
func (s *upgradeSlots) acquire(key types.NamespacedName, underWay bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.init()
	delete(s.woken, key)
	if s.in[key] || underWay || s.max <= 0 || len(s.in) < s.max {
		s.in[key] = true
		delete(s.queued, key)
		return true
	}
	if !s.queued[key] {
		s.queued[key] = true
		s.waiting = append(s.waiting, key)
		s.compact()
	}
	return false
}

// compact drops the keys that stopped waiting (they got a slot on their own
// or went away) once they are most of the queue, so it stays in proportion
// to the SimpleWebApps that wait.
func (s *upgradeSlots) compact() {
	if len(s.waiting) <= 2*len(s.queued)+16 {
		return
	}
	kept, seen := s.waiting[:0], map[types.NamespacedName]bool{}
	for _, k := range s.waiting {
		if s.queued[k] && !seen[k] {
			seen[k] = true
			kept = append(kept, k)
		}
	}
	s.waiting = kept
}

func (s *upgradeSlots) init() {
	if s.in == nil {
		s.in, s.queued, s.woken = map[types.NamespacedName]bool{}, map[types.NamespacedName]bool{}, map[types.NamespacedName]bool{}
	}
}

// release says key neither upgrades nor waits for a slot (it is done, gone,
// or never was an upgrade): its slot is freed and the longest waiting
// SimpleWebApp woken. A SimpleWebApp that was woken and no longer wants the
// slot passes the wake-up on.
func (s *upgradeSlots) release(key types.NamespacedName) {
	s.mu.Lock()
	s.init()
	passOn := s.in[key] || s.woken[key]
	delete(s.in, key)
	delete(s.queued, key)
	delete(s.woken, key)
	var next types.NamespacedName
	found := false
	for passOn && !found && len(s.waiting) > 0 {
		next, s.waiting = s.waiting[0], s.waiting[1:]
		// Taken off the queue: if it loses the slot to another, its next
		// refusal queues it again, last.
		found = s.queued[next]
		delete(s.queued, next)
	}
	if found {
		s.woken[next] = true
	}
	if len(s.waiting) == 0 {
		s.waiting = nil // let the array go
	}
	s.mu.Unlock()
	if found && s.wake != nil {
		s.wake(next)
	}
}

func (s *upgradeSlots) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.in)
}
