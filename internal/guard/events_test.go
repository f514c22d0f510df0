package guard

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

func TestEventOfASimpleWebApp(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := webappv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	w := &EventWriter{scheme: scheme, controller: "simplewebapp-operator", instance: "simplewebapp-operator-pod-1"}
	swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "team-a", UID: "u-1", ResourceVersion: "7"}}
	now := time.Unix(1700000000, 42)
	ev, err := w.event(swa, nil, "Normal", "Applied", "Apply", strings.Repeat("é", 600), now)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Namespace != "team-a" || ev.Name != fmt.Sprintf("web.%x", now.UnixNano()) || ev.Regarding.Kind != "SimpleWebApp" ||
		ev.Regarding.APIVersion != "example.com/v1" || ev.Regarding.UID != "u-1" || ev.Related != nil {
		t.Errorf("event %s/%s about %+v", ev.Namespace, ev.Name, ev.Regarding)
	}
	if ev.ReportingController != "simplewebapp-operator" || ev.ReportingInstance != w.instance || ev.Reason != "Applied" || ev.Action != "Apply" || ev.Type != "Normal" || !ev.EventTime.Time.Equal(now) {
		t.Errorf("event fields %+v", ev)
	}
	// The API server refuses a note over 1 KiB: cut on a rune boundary.
	if len(ev.Note) != 1024 || !strings.HasPrefix(strings.Repeat("é", 600), ev.Note) {
		t.Errorf("note of %d bytes, a prefix of the message: %v", len(ev.Note), strings.HasPrefix(strings.Repeat("é", 600), ev.Note))
	}
	if _, err := w.event(&runtime.Unknown{}, nil, "Normal", "X", "Y", "z", now); err == nil {
		t.Error("an object of no registered kind: no error")
	}
}

func TestTruncate(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"abc", 5, "abc"},
		{"abcdef", 3, "abc"},
		{"aé", 2, "a"}, // é is 2 bytes: not cut in half
		{"éé", 3, "é"},
	} {
		if got := truncate(c.s, c.n); got != c.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}
