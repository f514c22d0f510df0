package render

import (
	"context"
	"errors"
	"sync"
	"time"
)

// slots bound the renders that run at once, and how many of them one
// namespace may hold: renders are CPU-bound, and a namespace whose renders are
// slow (or run on past their deadline, which kustomize cannot be stopped
// before) must leave a slot to everyone else.
type slots struct {
	mu      sync.Mutex
	free    int
	perNS   int
	held    map[string]int
	changed chan struct{} // closed and replaced whenever a slot is released
}

// newSlots returns n slots, of which one namespace may hold all but one.
func newSlots(n int) *slots {
	return &slots{free: n, perNS: max(1, n-1), held: map[string]int{}, changed: make(chan struct{})}
}

// errNoSlot: no slot came free for the namespace within the wait.
var errNoSlot = errors.New("no render slot came free")

// acquire takes a slot for namespace, waiting at most wait.
func (s *slots) acquire(ctx context.Context, namespace string, wait time.Duration) error {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		s.mu.Lock()
		if s.free > 0 && s.held[namespace] < s.perNS {
			s.free--
			s.held[namespace]++
			s.mu.Unlock()
			return nil
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-timer.C:
			return errNoSlot
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release gives back a slot namespace held.
func (s *slots) release(namespace string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free++
	if s.held[namespace]--; s.held[namespace] <= 0 {
		delete(s.held, namespace)
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// heldBy is how many slots namespace holds.
func (s *slots) heldBy(namespace string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.held[namespace]
}
