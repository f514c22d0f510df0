package apply

import (
	"errors"
	"strings"
	"testing"
	"time"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/step"
)

// A fight over a field: the first corrections go at once, then at most one
// write per growing backoff, each reported with the other manager's name.
func TestFightBackoff(t *testing.T) {
	var f fights
	key := Key{Kind: "Deployment", Name: "x"}
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	writes := 0
	var last error
	for i := range 100 { // another manager changes the object 10 times a second for 10 s
		at := now.Add(time.Duration(i) * 100 * time.Millisecond)
		ok, err := f.correct(key, "Deployment", "x-web", "fighter", at)
		if ok {
			writes++
			// The operator's own write comes back through the cache: the
			// object is as rendered until the other manager changes it again.
			f.settled(key, at.Add(20*time.Millisecond))
		}
		if err != nil {
			last = err
		}
	}
	if writes > fightThreshold+6 {
		t.Errorf("%d writes in 10 s of fighting", writes)
	}
	if last == nil || !strings.Contains(last.Error(), `"fighter"`) || reasonOf(last) != "" && reasonOf(last) != webappv1.ReasonFieldConflict {
		t.Errorf("fight reported as %v", last)
	}
	// A refused correction says when it may go: the reconcile comes back
	// then, not after the rate limiter's backoff, which grows with every
	// failure of the fight (the object would stay wrong for minutes after
	// the other manager stopped).
	ok, err := f.correct(key, "Deployment", "x-web", "fighter", now.Add(10*time.Second))
	var se *step.Error
	if ok || !errors.As(err, &se) || se.RetryAfter <= 0 || se.RetryAfter > fightMaxBackoff {
		t.Errorf("a correction during the backoff: %v, %v; want refused with a RetryAfter within (0, %s]", ok, err, fightMaxBackoff)
	}
	f.settled(key, now.Add(time.Hour))
	if ok, err := f.correct(key, "Deployment", "x-web", "fighter", now.Add(time.Hour)); !ok || err != nil {
		t.Errorf("after settling a correction is immediate again: %v %v", ok, err)
	}
}

// reasonOf is the reason of a terminal step.Error, else "".
func reasonOf(err error) string {
	if se, ok := errors.AsType[*step.Error](err); ok && se.Terminal {
		return se.Reason
	}
	return ""
}
