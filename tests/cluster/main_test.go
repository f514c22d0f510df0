package cluster_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"example.com/simplewebapp-operator/tests/cluster"
)

// One full cluster per test binary, started by the first test that needs it
// and stopped by TestMain after all tests.
var (
	sharedOnce    sync.Once
	sharedCluster *cluster.Cluster
	sharedErr     error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if sharedCluster != nil {
		if err := sharedCluster.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the shared cluster:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// fullCluster returns the shared full-profile cluster and a client for it.
func fullCluster(t *testing.T) (*cluster.Cluster, kubernetes.Interface) {
	t.Helper()
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		sharedCluster, sharedErr = cluster.Start(ctx, cluster.Options{Profile: cluster.ProfileFull, LogWriter: os.Stderr})
	})
	if sharedErr != nil {
		t.Fatalf("start full cluster: %v", sharedErr)
	}
	cs, err := kubernetes.NewForConfig(sharedCluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return sharedCluster, cs
}

// poll waits up to timeout for cond, failing the test with what it waited for.
func poll(t *testing.T, ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (bool, error)) {
	t.Helper()
	t0 := time.Now()
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
	t.Logf("%s after %s", what, time.Since(t0).Round(time.Millisecond))
}

// newNamespace creates a namespace (deleted on cleanup) and waits for its
// default ServiceAccount, without which pods are not admitted.
func newNamespace(t *testing.T, ctx context.Context, cs kubernetes.Interface, labels map[string]string) string {
	t.Helper()
	ns, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "proof-", Labels: labels},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
	})
	poll(t, ctx, 30*time.Second, "default ServiceAccount in "+ns.Name, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().ServiceAccounts(ns.Name).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	return ns.Name
}
