package apply

import (
	"slices"
	"testing"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// Prune deletes only what the recorded inventory lists and the render no
// longer holds, of kinds the operator manages.
func TestPruneCandidates(t *testing.T) {
	cm := func(n string) webappv1.ObjectReference { return webappv1.ObjectReference{Kind: "ConfigMap", Name: n} }
	dep := webappv1.ObjectReference{Group: "apps", Kind: "Deployment", Name: "a-web"}
	secret := webappv1.ObjectReference{Kind: "Secret", Name: "s"}
	for _, tc := range []struct {
		name            string
		inventory, keep []webappv1.ObjectReference
		want            []string
	}{
		{"nothing recorded", nil, []webappv1.ObjectReference{dep}, nil},
		{"all kept", []webappv1.ObjectReference{dep, cm("c1")}, []webappv1.ObjectReference{cm("c1"), dep}, nil},
		{"an old ConfigMap", []webappv1.ObjectReference{dep, cm("c1"), cm("c2")}, []webappv1.ObjectReference{dep, cm("c2")}, []string{"c1"}},
		{"in inventory order", []webappv1.ObjectReference{cm("c3"), dep, cm("c1")}, []webappv1.ObjectReference{dep}, []string{"c3", "c1"}},
		{"a kind not managed is never deleted", []webappv1.ObjectReference{secret, cm("c1")}, nil, []string{"c1"}},
		{"a ConfigMap of another group is not a managed kind", []webappv1.ObjectReference{{Group: "apps", Kind: "ConfigMap", Name: "c1"}}, []webappv1.ObjectReference{cm("c1")}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, c := range pruneCandidates(tc.inventory, tc.keep) {
				got = append(got, c.ref.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("candidates %v, want %v", got, tc.want)
			}
		})
	}
}
