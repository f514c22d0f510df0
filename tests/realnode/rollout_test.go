package realnode

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/utils/ptr"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/testkit"
)

// requestsPerSecond is the steady client's rate during roll-outs.
const requestsPerSecond = 25

// TestMessageRolloutDropsNoRequest changes the message while a client sends
// requests through the Service's ClusterIP at a steady rate, without
// retries: every request is answered (with the old message or the new one),
// and once the roll-out is complete no pod serves the old message. It runs
// the rapid channel's version: graceful termination (the preStop sleep that
// lets kube-proxy stop sending a pod connections before nginx stops) came with
// package version 1.2.0; stable's version drops requests here.
func TestMessageRolloutDropsNoRequest(t *testing.T) {
	ctx := t.Context()
	ns := newNamespace(t)
	const name, before, after = "rollout", "Before the roll-out", "After the roll-out"
	rapid := testkit.ChannelVersion(t, "rapid")
	createApp(t, ns, name, webappv1.SimpleWebAppSpec{Replicas: ptr.To[int32](3), Message: before, Channel: "rapid"})
	a := waitSettled(t, ns, name, 3)
	if a.swa.Status.Version != rapid {
		t.Fatalf("status.version %q, want the rapid channel's %s", a.swa.Status.Version, rapid)
	}
	testkit.WaitFor(t, timeout, "every pod serving the first message", func(ctx context.Context) (bool, string) {
		return everyPodServes(ctx, a, before)
	}, waitOpts(ns))

	load := startSteadyClient(ctx, a.serviceURL(), requestsPerSecond)
	// A few answers before the change: the client works.
	testkit.WaitFor(t, 30*time.Second, "a second of the client's answers", func(context.Context) (bool, string) {
		return load.answered(before) >= requestsPerSecond, fmt.Sprint(load.answered(before), " answers")
	}, waitOpts(ns))

	changed := time.Now()
	patchApp(t, ns, name, `{"spec":{"message":"`+after+`"}}`)
	testkit.WaitFor(t, timeout, "3 pods of the new template, each serving the new message, no other pod left", func(ctx context.Context) (bool, string) {
		var err error
		if a, err = observe(ctx, ns, name); err != nil {
			return false, err.Error()
		}
		if done, seen := a.settled(3); !done || a.swa.Generation < 2 {
			return false, seen
		}
		return everyPodServes(ctx, a, after)
	}, waitOpts(ns))
	rolled := time.Since(changed)
	// A second more of requests after the roll-out.
	done := load.answered(after)
	testkit.WaitFor(t, 30*time.Second, "a second of the client's answers after the roll-out", func(context.Context) (bool, string) {
		return load.answered(after) >= done+requestsPerSecond, fmt.Sprint(load.answered(after)-done, " answers")
	}, waitOpts(ns))
	res := load.stop()
	checkOnRealNode(t, a.pods)
	t.Logf("FIGURE realnode: message roll-out of 3 pods under %d requests/s through the ClusterIP in %s: %s", requestsPerSecond, rolled.Round(time.Millisecond), res)
	if len(res.failures) > 0 {
		t.Errorf("%d of %d requests failed during the roll-out", len(res.failures), res.sent)
	}
	if res.bodies[before] == 0 || res.bodies[after] == 0 || len(res.bodies) != 2 {
		t.Errorf("want answers with the old and the new message only: %s", res)
	}
	if least := int(rolled.Seconds()) * requestsPerSecond / 2; res.sent < least {
		t.Errorf("only %d requests in a roll-out of %s: the client did not keep its rate", res.sent, rolled)
	}
	for i := 0; i < 10; i++ {
		body, err := get(ctx, a.serviceURL())
		if err != nil || trim(body) != after {
			t.Errorf("after the roll-out, the Service answered %q (%v), want %q", body, err, after)
		}
	}
}
