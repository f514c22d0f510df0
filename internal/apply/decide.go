package apply

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// action is what the applier does with one object, decided from the cache
// alone (decide), before any request.
type action int

const (
	// actionNone: the object holds what the render says; no request.
	actionNone action = iota
	// actionWaitForCache: the cache has not caught up with the operator's
	// own last write (of a new object, or a newer version): its watch
	// event will wake the reconcile again.
	actionWaitForCache
	// actionCreate: the object does not exist; POST it (which fails if
	// another object took the name: nothing is adopted).
	actionCreate
	// actionRefuse: an object of that name exists and is not the
	// SimpleWebApp's.
	actionRefuse
	// actionApply: server-side-apply what differs (see decision).
	actionApply
)

// observed is what decide reads: the object as the cache holds it, and the
// operator's own record of writing it.
type observed struct {
	// exists: the cache holds the object; live is it as a map, when
	// controlled and not behind (only then is it compared).
	exists bool
	live   map[string]any
	// controlled: live is controlled by the SimpleWebApp.
	controlled bool
	// wroteRecently: the operator wrote the object recently (it may not be
	// in the cache yet); behind: live is older than that write.
	wroteRecently, behind bool
	// foreignSensitive: another field manager owns fields that matter for
	// security or exposure.
	foreignSensitive bool
}

// decision is decide's answer.
type decision struct {
	action action
	// applyObject: apply the object (it changed, drifted, or a reconcile
	// was requested); applyHandoff: apply its handoff fields first, as
	// HandoffManager.
	applyObject, applyHandoff bool
	// correction: the apply undoes someone else's change (not a change of
	// the render), so it counts toward a field fight.
	correction bool
}

// decide chooses what to do with one object: desired is the object as the
// operator writes it (with its applied-hash annotation), partial its handoff
// fields to apply (or nil), force a requested reconcile.
func decide(o observed, desired, partial *unstructured.Unstructured, force bool) decision {
	switch {
	case !o.exists && o.wroteRecently:
		// Written by us and not yet in the cache (a delete would have
		// made us forget it).
		return decision{action: actionWaitForCache}
	case !o.exists:
		return decision{action: actionCreate}
	case !o.controlled:
		return decision{action: actionRefuse}
	case o.behind:
		return decision{action: actionWaitForCache}
	}
	changed := annotation(o.live, AnnotationAppliedHash) != desired.GetAnnotations()[AnnotationAppliedHash]
	drifted := !contains(o.live, desired.Object) || o.foreignSensitive
	d := decision{
		applyObject: force || changed || drifted,
		// The handoff fields are written when they differ. Who owns them
		// does not matter until an apply would drop them: the take-over
		// gives the create's copy to HandoffManager (takeOverPatch).
		applyHandoff: partial != nil && (force || !contains(o.live, partial.Object)),
		correction:   drifted && !changed && !force,
	}
	if d.applyObject || d.applyHandoff {
		d.action = actionApply
	}
	return d
}

func annotation(obj map[string]any, key string) string {
	v, _, _ := unstructured.NestedString(obj, "metadata", "annotations", key)
	return v
}
