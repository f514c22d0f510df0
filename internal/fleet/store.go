package fleet

import (
	"fmt"
	"sync"

	"github.com/blang/semver/v4"
)

// Store is this process's copy of the roll-out states, read by the
// reconciler (Admit, Halted) and kept by the Roller.
type Store struct {
	// OnChange, when set, is called with the versions whose roll-out now
	// admits other apps: it was planned, a wave moved on, it halted or
	// resumed. Their waiting SimpleWebApps may start (or their status
	// changes), and nothing else would reconcile those stalled after a
	// rollback.
	OnChange func(versions map[string]bool)

	mu     sync.Mutex
	loaded bool
	states map[Key]*State
	wanted map[Key]bool
	poke   chan struct{}
}

// NewStore returns an empty Store, not loaded yet.
func NewStore() *Store {
	return &Store{states: map[Key]*State{}, wanted: map[Key]bool{}, poke: make(chan struct{}, 1)}
}

// Halted implements render.HaltedVersions.
func (s *Store) Halted(version, packageHash string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.states[NewKey(version, packageHash)]
	if st == nil || st.Halted == nil {
		return "", false
	}
	return st.HaltMessage(), true
}

// State returns a copy of k's state, nil if it has none.
func (s *Store) State(k Key) *State {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st := s.states[k]; st != nil {
		c := *st
		return &c
	}
	return nil
}

// Admit says why app ("namespace/name") may not start its upgrade to k yet,
// or "" when it may. A roll-out that has no state yet is asked for.
func (s *Store) Admit(k Key, app string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.states[k]
	switch {
	case !s.loaded:
		return "waits for the roll-out states to be read"
	case st == nil:
		if !s.wanted[k] {
			s.wanted[k] = true
			select {
			case s.poke <- struct{}{}:
			default:
			}
		}
		return waitMessage(k)
	case st.Halted != nil:
		return "waits: " + st.HaltMessage()
	case !st.Admits(app):
		return waitMessage(k)
	}
	return ""
}

// set replaces the states with what the cluster holds.
func (s *Store) set(states map[Key]*State) {
	s.mu.Lock()
	changed := admitChanges(s.states, states)
	s.states, s.loaded = states, true
	for k := range s.wanted {
		if states[k] != nil {
			delete(s.wanted, k)
		}
	}
	s.mu.Unlock()
	s.admitsChanged(changed)
}

// put records one state just written.
func (s *Store) put(st *State) {
	s.mu.Lock()
	changed := admitChanges(map[Key]*State{st.Key: s.states[st.Key]}, map[Key]*State{st.Key: st})
	s.states[st.Key] = st
	delete(s.wanted, st.Key)
	s.mu.Unlock()
	s.admitsChanged(changed)
}

func (s *Store) admitsChanged(versions map[string]bool) {
	if len(versions) > 0 && s.OnChange != nil {
		s.OnChange(versions)
	}
}

// admitChanges are the versions whose roll-out admits other apps in b than
// in a: planned, at another wave, halted or resumed.
func admitChanges(a, b map[Key]*State) map[string]bool {
	type admits struct {
		planned, halted bool
		wave            int
	}
	of := func(m map[Key]*State, k Key) admits {
		st := m[k]
		if st == nil {
			return admits{}
		}
		return admits{planned: true, halted: st.Halted != nil, wave: st.Wave}
	}
	out := map[string]bool{}
	for _, m := range []map[Key]*State{a, b} {
		for k := range m {
			if of(a, k) != of(b, k) {
				out[k.Version] = true
			}
		}
	}
	return out
}

// work is what the Roller looks at: states not done, and keys asked for.
func (s *Store) work() (active []*State, wanted []Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.states {
		if st.Halted == nil && !st.Complete {
			c := *st
			active = append(active, &c)
		}
	}
	for k := range s.wanted {
		wanted = append(wanted, k)
	}
	return active, wanted
}

// all returns copies of every state (for metrics).
func (s *Store) all() []State {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]State, 0, len(s.states))
	for _, st := range s.states {
		out = append(out, *st)
	}
	return out
}

// supersededBy returns the halted states of versions older than k that a
// roll-out of k supersedes, marked so.
func (s *Store) supersededBy(k Key) []*State {
	newer, err := semver.ParseTolerant(k.Version)
	if err != nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*State
	for _, st := range s.states {
		v, err := semver.ParseTolerant(st.Key.Version)
		if st.Halted != nil && !st.Superseded && err == nil && v.LT(newer) {
			c := *st
			c.Superseded = true
			out = append(out, &c)
		}
	}
	return out
}

// waitMessage is the same before the roll-out is planned and in every wave
// before the app's: the status of a waiting app is written once, not once
// per wave (the state and the metrics say which wave is under way).
func waitMessage(k Key) string {
	return fmt.Sprintf("waits for its wave of the fleet roll-out of %s", k)
}
