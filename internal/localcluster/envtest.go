package localcluster

import (
	"os"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// EnvtestEnvironment returns an envtest.Environment (etcd + kube-apiserver,
// profile "api") that installs the CRDs under crdPaths. The binaries come
// from $KUBEBUILDER_ASSETS when set, else from BinDir(). With
// USE_EXISTING_CLUSTER=true nothing is built and envtest uses $KUBECONFIG.
// The caller calls Start and Stop.
func EnvtestEnvironment(crdPaths ...string) (*envtest.Environment, error) {
	env := &envtest.Environment{
		CRDDirectoryPaths:     crdPaths,
		ErrorIfCRDPathMissing: len(crdPaths) > 0,
	}
	if strings.EqualFold(os.Getenv("USE_EXISTING_CLUSTER"), "true") {
		return env, nil
	}
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		dir, err := BinDir()
		if err != nil {
			return nil, err
		}
		env.BinaryAssetsDirectory = dir
	}
	// By default kube-apiserver advertises the host's first non-loopback
	// address; keep everything on loopback. v1.37 then needs the endpoint
	// reconciler off, else it refuses to start (envtest would time out).
	env.ControlPlane.GetAPIServer().Configure().
		Set("advertise-address", "127.0.0.1").
		Set("endpoint-reconciler-type", "none")
	return env, nil
}
