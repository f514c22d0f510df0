package fleet

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// App is what a roll-out needs to know of one SimpleWebApp, for one Key.
type App struct {
	Name      string // namespace/name
	Namespace string
	UID       types.UID
	// Wants: it follows a channel that resolves to the version, as an
	// upgrade from a healthy one (the reconciler's own decision).
	Wants bool
	// Upgrading: its upgrade to the version is under way.
	Upgrading bool
	// On: it runs the version and was Ready on it.
	On bool
	// FailedAt is when its upgrade to the version was rolled back, if it was.
	FailedAt *metav1.Time
	// Recovered: all its pods Ready on the version it went back to (so the
	// app itself works and the failure says something about the version).
	Recovered bool
	Ready     bool
	// Own: it has spec.patches or spec.image, whose failures are its own.
	Own bool
}

// AppOf reads what a roll-out of k needs from a SimpleWebApp; wants is the
// reconciler's decision that it would upgrade to k.
func AppOf(swa *webappv1.SimpleWebApp, k Key, wants bool) App {
	st := swa.Status
	ready := meta.IsStatusConditionTrue(st.Conditions, webappv1.ConditionReady)
	a := App{
		Name: swa.Namespace + "/" + swa.Name, Namespace: swa.Namespace, UID: swa.UID,
		Wants:     wants,
		Upgrading: st.Upgrade != nil && st.Upgrade.To == k.Version,
		On:        st.Version == k.Version && st.LastHealthyVersion == k.Version,
		Ready:     ready,
		Own:       len(swa.Spec.Patches) > 0 || swa.Spec.Image != "",
	}
	if swa.Spec.Suspend {
		// Nothing is done for it: it must not hold a wave.
		a.Wants, a.Upgrading = false, false
	}
	if fu := st.FailedUpgrade; fu != nil && fu.Version == k.Version {
		at := fu.RolledBackAt
		a.FailedAt = &at
		// Its Ready condition stays False while it is held back from the
		// failed version, so its pods say whether the old version runs.
		a.Recovered = st.Version == st.LastHealthyVersion && st.Version != k.Version &&
			st.ReadyReplicas > 0 && st.ReadyReplicas == st.Replicas && st.UpdatedReplicas == st.Replicas
	}
	return a
}

// Relevant reports whether the app has anything to do with the roll-out of
// its Key.
func (a App) Relevant() bool {
	return a.Wants || a.Upgrading || a.On || a.FailedAt != nil
}
