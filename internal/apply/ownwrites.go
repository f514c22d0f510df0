package apply

import (
	"strconv"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// OwnWrites remembers the operator's last write of each object: the
// resourceVersion the write returned, and when. With it, a copy read from
// the cache that is older than the operator's own write (the cache is
// behind: its watch event is on the way) is told from a change by someone
// else, and an object just created that the cache does not show yet from one
// that is gone. The applier records the children it writes; the reconciler's
// status writer records the SimpleWebApps (status and ApplySet metadata)
// and, for its batch window, when a child of one was written.
type OwnWrites struct {
	mu sync.Mutex
	m  map[Key]ownWrite
}

// Key names an object.
type Key struct {
	Group, Kind, Namespace, Name string
}

// KeyFor is the key of the object of gk named namespace/name.
func KeyFor(gk schema.GroupKind, namespace, name string) Key {
	return Key{gk.Group, gk.Kind, namespace, name}
}

type ownWrite struct {
	resourceVersion uint64
	at              time.Time
}

// resourceVersioned is what Record and Behind read of an object.
type resourceVersioned interface{ GetResourceVersion() string }

// Record notes a write of key; obj is what the write returned.
func (w *OwnWrites) Record(key Key, obj resourceVersioned) {
	rv, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[Key]ownWrite{}
	}
	w.m[key] = ownWrite{resourceVersion: rv, at: time.Now()}
}

// Touch notes that something was written on key's behalf now (a child of a
// SimpleWebApp), keeping key's own resourceVersion.
func (w *OwnWrites) Touch(key Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.m == nil {
		w.m = map[Key]ownWrite{}
	}
	e := w.m[key]
	e.at = time.Now()
	w.m[key] = e
}

// Behind reports whether obj, read from the cache, is older than the
// operator's last write of key.
func (w *OwnWrites) Behind(key Key, obj resourceVersioned) bool {
	rv, err := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
	if err != nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[key]
	return ok && rv < e.resourceVersion
}

// Within reports whether the operator wrote key (or touched it) less than
// d ago.
func (w *OwnWrites) Within(key Key, d time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, ok := w.m[key]
	return ok && time.Since(e.at) < d
}

// Forget drops key (the object was deleted).
func (w *OwnWrites) Forget(key Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.m, key)
}
