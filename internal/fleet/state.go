// Package fleet rolls a new package version out to the SimpleWebApps that
// follow a channel in waves, and halts the version for the whole fleet when
// its upgrades fail on apps that say something about it. Its state is one
// ConfigMap per version (by content) in the operator's namespace, shared by
// shards and kept across restarts; it is written only when a wave moves, a
// failure is counted or the version halts, never once per app.
package fleet

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Key is a version by its content: a manifest-only re-ship of a version is
// another Key, so it is rolled out (and may halt) on its own.
type Key struct {
	Version string `json:"version"`
	// Hash is the first 12 hex digits of render.PackageHash.
	Hash string `json:"hash"`
}

// NewKey shortens a package hash to a Key's.
func NewKey(version, packageHash string) Key {
	if len(packageHash) > 12 {
		packageHash = packageHash[:12]
	}
	return Key{Version: version, Hash: packageHash}
}

func (k Key) String() string { return k.Version + "@" + k.Hash }

// Labels and data of the state ConfigMaps.
const (
	// StateLabel marks a ConfigMap as a roll-out's state (value "true").
	StateLabel = "simplewebapp.example.com/rollout"
	// VersionAnnotation holds the Key's version (not a label: versions may
	// hold characters labels do not allow).
	VersionAnnotation = "simplewebapp.example.com/version"
	// StateKey is the data key of the state, as JSON.
	StateKey = "state.json"
)

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// ConfigMapName is the state ConfigMap's name for k: readable, and unique by
// the hash.
func (k Key) ConfigMapName() string {
	v := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(k.Version), "-"), "-")
	if len(v) > 40 {
		v = v[:40]
	}
	return strings.Trim("simplewebapp-rollout-"+v, "-") + "-" + k.Hash
}

// State is one version's roll-out over the fleet.
type State struct {
	Key       Key         `json:"key"`
	StartedAt metav1.Time `json:"startedAt"`
	// Waves are the members ("namespace/name") of the waves before the
	// last; the last wave is every other SimpleWebApp that wants the
	// version. Chosen by Plan.
	Waves [][]string `json:"waves"`
	// Wave is the wave in progress: len(Waves) is the last.
	Wave          int         `json:"wave"`
	WaveStartedAt metav1.Time `json:"waveStartedAt"`
	// CountSince: only upgrades rolled back after it count (StartedAt, or
	// the last resume).
	CountSince metav1.Time `json:"countSince"`
	// Failures are the counted failed upgrades since CountSince.
	Failures []Failure `json:"failures,omitempty"`
	// Tried is how many SimpleWebApps tried the version since CountSince,
	// when the failures were last counted.
	Tried int `json:"tried,omitempty"`
	// Halted is set when the version is halted for the fleet.
	Halted *Halt `json:"halted,omitempty"`
	// Superseded: a newer version's roll-out started since the halt, so
	// the halt no longer holds anything back that matters (it stays, and
	// is no longer reported as a halt in the metrics).
	Superseded bool `json:"superseded,omitempty"`
	// Complete: every SimpleWebApp that wanted the version has it (or
	// failed it); nothing more to watch.
	Complete bool `json:"complete,omitempty"`

	// resourceVersion of the ConfigMap this was read from: an update
	// applies only over it.
	resourceVersion string
}

// Failure is one counted failed upgrade.
type Failure struct {
	App          string      `json:"app"` // namespace/name
	RolledBackAt metav1.Time `json:"rolledBackAt"`
}

// Halt says why a version was halted.
type Halt struct {
	At     metav1.Time `json:"at"`
	Reason string      `json:"reason"`
}

// Admits reports whether app ("namespace/name") may start its upgrade now.
func (s *State) Admits(app string) bool {
	if s.Halted != nil {
		return false
	}
	if s.Wave >= len(s.Waves) {
		return true
	}
	for w := 0; w <= s.Wave; w++ {
		for _, m := range s.Waves[w] {
			if m == app {
				return true
			}
		}
	}
	return false
}

// WaveOf is the wave app belongs to (len(Waves) for the last).
func (s *State) WaveOf(app string) int {
	for w, members := range s.Waves {
		for _, m := range members {
			if m == app {
				return w
			}
		}
	}
	return len(s.Waves)
}

// Namespaces counts the namespaces of the counted failures.
func (s *State) Namespaces() int {
	seen := map[string]bool{}
	for _, f := range s.Failures {
		ns, _, _ := strings.Cut(f.App, "/")
		seen[ns] = true
	}
	return len(seen)
}

// HaltMessage says what a halt means to a SimpleWebApp held back by it.
func (s *State) HaltMessage() string {
	return fmt.Sprintf("version %s (content %s) is halted for the fleet: %s; lifted by a new version in the channel or `kubectl swa resume-version %s`",
		s.Key.Version, s.Key.Hash, s.Halted.Reason, s.Key.Version)
}

// ConfigMap is s as its ConfigMap in namespace.
func (s *State) ConfigMap(namespace string) (*corev1.ConfigMap, error) {
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name: s.Key.ConfigMapName(), Namespace: namespace,
			Labels:      map[string]string{StateLabel: "true", "app.kubernetes.io/managed-by": "simplewebapp-operator"},
			Annotations: map[string]string{VersionAnnotation: s.Key.Version},
		},
		Data: map[string]string{StateKey: string(b)},
	}, nil
}

// FromConfigMap reads a state ConfigMap.
func FromConfigMap(cm *corev1.ConfigMap) (*State, error) {
	var s State
	if err := json.Unmarshal([]byte(cm.Data[StateKey]), &s); err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s: %s: %w", cm.Namespace, cm.Name, StateKey, err)
	}
	if s.Key.Version == "" || s.Key.ConfigMapName() != cm.Name {
		return nil, fmt.Errorf("ConfigMap %s/%s: %s holds key %q, not the one its name says", cm.Namespace, cm.Name, StateKey, s.Key)
	}
	return &s, nil
}

// rank orders the SimpleWebApps for a version's waves: a hash of the version
// and the UID the API server gave each app, so neither names nor the order
// of creation put a tenant's app in an early wave, and every shard computes
// the same order.
func rank(k Key, uid types.UID) uint64 {
	h := sha256.Sum256([]byte(k.String() + "\x00" + string(uid)))
	return binary.BigEndian.Uint64(h[:8])
}
