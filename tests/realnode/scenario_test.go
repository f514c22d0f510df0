package realnode

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"example.com/simplewebapp-operator/internal/testkit"
)

// The user's sample files and what they serve.
const (
	appName        = "my-webapp"
	message        = "Welcome to my awesome web app!"
	updatedMessage = "Hello, updated message!"
)

// TestSeedScenarioOverHTTP is the user's scenario on real containers, judged
// by what the pods serve: the sample's 3 pods serve its message through the
// Service; scaled to 5, all 5 do; re-applied with a new message, every pod
// serves the new one.
func TestSeedScenarioOverHTTP(t *testing.T) {
	t.Parallel()
	ns := newNamespace(t)
	sample := func(name string) string { return filepath.Join(env.Root, "config/samples", name) }

	applied := time.Now()
	if _, err := env.Kubectl.Admin("apply", "-n", ns, "-f", sample("my-webapp.yaml")); err != nil {
		t.Fatal(err)
	}
	a := waitSettled(t, ns, appName, 3)
	testkit.WaitFor(t, timeout, "the message served through the Service", func(ctx context.Context) (bool, string) {
		body, err := get(ctx, a.serviceURL())
		return err == nil && trim(body) == message, fmt.Sprintf("%q %v", body, err)
	}, waitOpts(ns))
	t.Logf("FIGURE realnode: kubectl apply to the message served through the Service: %s", time.Since(applied).Round(time.Millisecond))
	testkit.WaitFor(t, timeout, "each of the 3 pods serving the message", func(ctx context.Context) (bool, string) {
		return everyPodServes(ctx, a, message)
	}, waitOpts(ns))

	scaled := time.Now()
	patchApp(t, ns, appName, `{"spec":{"replicas":5}}`)
	a = waitSettled(t, ns, appName, 5)
	testkit.WaitFor(t, timeout, "each of the 5 pods serving the message", func(ctx context.Context) (bool, string) {
		return everyPodServes(ctx, a, message)
	}, waitOpts(ns))
	t.Logf("FIGURE realnode: 3 -> 5 pods, all serving, in %s", time.Since(scaled).Round(time.Millisecond))

	changed := time.Now()
	if _, err := env.Kubectl.Admin("apply", "-n", ns, "-f", sample("my-webapp-updated.yaml")); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, timeout, "5 pods of the new template, each serving the new message", func(ctx context.Context) (bool, string) {
		var err error
		if a, err = observe(ctx, ns, appName); err != nil {
			return false, err.Error()
		}
		if done, seen := a.settled(5); !done {
			return false, seen
		}
		return everyPodServes(ctx, a, updatedMessage)
	}, waitOpts(ns))
	checkOnRealNode(t, a.pods)
	t.Logf("FIGURE realnode: message change to every pod serving it: %s", time.Since(changed).Round(time.Millisecond))
}
