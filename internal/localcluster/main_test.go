package localcluster_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/simplewebapp-operator/internal/localcluster"
)

// One full cluster per test binary, started by the first test that needs it
// and stopped by TestMain after all tests.
var (
	sharedOnce    sync.Once
	sharedCluster *localcluster.Cluster
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

// fullCluster returns the shared full-profile cluster and clients for it.
func fullCluster(t *testing.T) (*localcluster.Cluster, kubernetes.Interface, client.Client) {
	t.Helper()
	sharedOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		sharedCluster, sharedErr = localcluster.Start(ctx, localcluster.Options{Profile: localcluster.ProfileFull, LogWriter: os.Stderr})
	})
	if sharedErr != nil {
		t.Fatalf("start full cluster: %v", sharedErr)
	}
	cs, err := kubernetes.NewForConfig(sharedCluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(sharedCluster.RESTConfig(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return sharedCluster, cs, cl
}
