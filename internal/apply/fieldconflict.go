package apply

import (
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/step"
)

// Another field manager may keep changing fields the operator owns (a second
// controller, a GitOps tool forcing its own copy). Re-applying at once each
// time would make the two fight at full speed. After fightThreshold
// corrections of one object within fightWindow, the operator writes that
// object at most once per backoff (1s, doubling up to fightMaxBackoff) and
// reports the fight (FieldConflict, naming the other manager) until the
// object stays as rendered.
const (
	fightWindow     = 10 * time.Second
	fightThreshold  = 3
	fightMaxBackoff = 30 * time.Second
)

type fights struct {
	mu sync.Mutex
	m  map[Key]*fight
}

type fight struct {
	corrections []time.Time
	next        time.Time
	backoff     time.Duration
}

// correct is called before the operator re-applies an object that someone
// changed (manager, if known). It reports whether the write may go ahead now;
// when it may not, err says why.
func (f *fights) correct(key Key, kind, name, manager string, now time.Time) (ok bool, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[Key]*fight{}
	}
	st := f.m[key]
	if st == nil {
		st = &fight{}
		f.m[key] = st
	}
	st.corrections = slices.DeleteFunc(st.corrections, func(t time.Time) bool { return now.Sub(t) > fightWindow })
	if len(st.corrections) < fightThreshold {
		st.corrections = append(st.corrections, now)
		return true, nil
	}
	who := "another field manager"
	if manager != "" {
		who = "field manager " + quote(manager)
	}
	fightErr := &step.Error{Reason: webappv1.ReasonFieldConflict,
		Message: kind + " " + name + ": " + who + " keeps changing fields the operator owns; re-applying with backoff (at most every " + fightMaxBackoff.String() + ")"}
	if now.Before(st.next) {
		fightErr.RetryAfter = st.next.Sub(now)
		return false, fightErr
	}
	st.backoff = min(max(2*st.backoff, time.Second), fightMaxBackoff)
	st.next = now.Add(st.backoff)
	st.corrections = append(st.corrections, now)
	fightErr.RetryAfter = st.backoff
	return true, fightErr
}

// settled forgets a fight once the object is as rendered and has not been
// corrected for fightWindow. Right after each correction the object is as
// rendered too (the operator's own write comes back through the cache):
// forgetting the fight then would reset the backoff on every round, and a
// fight at 10 changes a second would be answered at full speed.
func (f *fights) settled(key Key, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.m[key]
	if st == nil {
		return
	}
	if n := len(st.corrections); n == 0 || now.Sub(st.corrections[n-1]) > fightWindow {
		delete(f.m, key)
	}
}

// lastForeignManager is the foreign field manager that wrote last (outside
// subresources), the likely party to a fight.
func lastForeignManager(entries []metav1.ManagedFieldsEntry) string {
	var who string
	var at time.Time
	for _, e := range entries {
		if !IsForeign(e) || e.Manager == "kube-controller-manager" {
			continue
		}
		if e.Time != nil && (who == "" || e.Time.After(at)) {
			who, at = e.Manager, e.Time.Time
		}
	}
	return who
}

func quote(s string) string { return `"` + s + `"` }
