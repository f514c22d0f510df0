package fleet

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
)

// IsUpgrade reports whether rel moves a SimpleWebApp that runs a healthy
// version to another.
func IsUpgrade(swa *webappv1.SimpleWebApp, rel render.Release) bool {
	st := swa.Status
	return st.LastHealthyVersion != "" && st.Version != "" && rel.Version != st.Version && rel.Version != st.LastHealthyVersion
}

// RollsOut reports whether moving swa to rel is part of rel's fleet
// roll-out (waves and halts): an upgrade picked by a channel, not by
// spec.version, and not held back after a rollback of its own.
func RollsOut(swa *webappv1.SimpleWebApp, rel render.Release) bool {
	return rel.Channel != "" && swa.Spec.Version == "" && !render.HeldBack(swa, rel) && IsUpgrade(swa, rel)
}

// KeyOf is rel's Key.
func KeyOf(rel render.Release) (Key, error) {
	h, err := rel.PackageHash()
	return NewKey(rel.Version, h), err
}

// WantsOf is the Wants of channels: what the reconciler would roll out. It
// resolves each channel once per running version and hashes each version's
// package once, not once per SimpleWebApp: make one per look at the fleet,
// since the channels may change in between.
func WantsOf(channels render.Channels) Wants {
	type resolved struct {
		rel render.Release
		err error
	}
	releases := map[string]resolved{}
	keys := map[string]Key{}
	return func(ctx context.Context, swa *webappv1.SimpleWebApp) (Key, bool) {
		// ResolveApp reads only these of a SimpleWebApp that follows a
		// channel (pinned ones are not asked about).
		memo := swa.Spec.Channel + "\x00" + swa.Status.Version
		r, ok := releases[memo]
		if !ok {
			r.rel, r.err = channels.ResolveApp(ctx, swa)
			releases[memo] = r
		}
		if r.err != nil || !RollsOut(swa, r.rel) {
			return Key{}, false
		}
		k, ok := keys[r.rel.Version]
		if !ok {
			var err error
			if k, err = KeyOf(r.rel); err != nil {
				return Key{}, false
			}
			keys[r.rel.Version] = k
		}
		return k, true
	}
}

// States reads state ConfigMaps (as listed by label StateLabel=true);
// malformed ones are left out.
func States(cms []corev1.ConfigMap) map[Key]*State {
	out := map[Key]*State{}
	for i := range cms {
		if st, err := FromConfigMap(&cms[i]); err == nil {
			st.resourceVersion = cms[i].ResourceVersion
			out[st.Key] = st
		}
	}
	return out
}

// Halts are the halted versions among states, as render.HaltedVersions.
type Halts map[Key]*State

// Halted implements render.HaltedVersions.
func (h Halts) Halted(version, packageHash string) (string, bool) {
	st := h[NewKey(version, packageHash)]
	if st == nil || st.Halted == nil {
		return "", false
	}
	return st.HaltMessage(), true
}

// Resume lifts a halt: failures before now no longer count, and the
// roll-out goes on from the wave it stopped in.
func (s *State) Resume(now metav1.Time) {
	s.Halted, s.Failures, s.Tried, s.CountSince = nil, nil, 0, now
}
