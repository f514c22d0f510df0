package localcluster

import (
	"strings"
	"testing"
)

// Without the node's binaries profile node falls back to profile full with
// kwok nodes, and says so.
func TestRealNodeFallsBackWithoutBinaries(t *testing.T) {
	var log strings.Builder
	opts := realNodeOrFallback(Options{Profile: ProfileNode, NodeBinDir: t.TempDir(), LogWriter: &log})
	if opts.Profile != ProfileFull || opts.Nodes != 3 {
		t.Errorf("profile %q with %d kwok nodes, want %q with 3", opts.Profile, opts.Nodes, ProfileFull)
	}
	if !strings.Contains(log.String(), "falling back to kwok nodes") {
		t.Errorf("log %q does not say it falls back", log.String())
	}
}

// The cleanup script deletes only the KUBE-*/CNI-* chains that were not
// there before, and the jumps to them first.
func TestIPTablesCleanup(t *testing.T) {
	base := "*filter\n:INPUT ACCEPT\n:KUBE-OLD - \n-A INPUT -j KUBE-OLD\nCOMMIT\n"
	current := "*filter\n:INPUT ACCEPT\n:KUBE-OLD - \n:KUBE-FIREWALL - \n:OTHER - \n" +
		"-A INPUT -j KUBE-OLD\n-A INPUT -m comment --comment \"x\" -j KUBE-FIREWALL\n-A KUBE-FIREWALL -j DROP\nCOMMIT\n" +
		"*nat\n:POSTROUTING ACCEPT\nCOMMIT\n"
	want := "*filter\n-D INPUT -m comment --comment \"x\" -j KUBE-FIREWALL\n-F KUBE-FIREWALL\n-X KUBE-FIREWALL\nCOMMIT\n"
	if got := iptablesCleanup(current, base); got != want {
		t.Errorf("iptablesCleanup:\n%s\nwant:\n%s", got, want)
	}
	if got := iptablesCleanup(base, base); got != "" {
		t.Errorf("nothing new: got %q, want no script", got)
	}
}
