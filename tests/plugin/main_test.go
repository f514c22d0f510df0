// Package plugin tests `kubectl swa` (cmd/kubectl-swa): render against the
// golden files, and diff and versions against a real API server on which the
// operator runs in-process (envop).
package plugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/cmd/kubectl-swa/plugin"
	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit/envop"
)

var env *envop.Env

func TestMain(m *testing.M) {
	if record := os.Getenv(fakeDiffEnv); record != "" {
		// Run by `kubectl swa diff` as $KUBECTL_EXTERNAL_DIFF.
		os.Exit(fakeDiff(record, os.Args[1:]))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	t0 := time.Now()
	var err error
	if env, err = envop.Start(render.Channels{FS: channels.FS}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer env.Stop()
	fmt.Fprintf(os.Stderr, "API server and operator started in %s\n", time.Since(t0).Round(time.Millisecond))
	return m.Run()
}

// testRevision stands for the revision hack/build.sh stamps into main.
const testRevision = "0123456789ab"

// swa runs `kubectl swa args...` as the plugin binary does and returns its
// exit code, stdout and stderr.
func swa(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return swaStdin(t, "", args...)
}

// swaStdin is swa with stdin.
func swaStdin(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := plugin.Run(args, genericiooptions.IOStreams{In: strings.NewReader(stdin), Out: &out, ErrOut: &errOut}, testRevision)
	return code, out.String(), errOut.String()
}

// swaCluster is swa against the test's API server.
func swaCluster(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return swa(t, append(args, "--kubeconfig", env.Kubeconfig)...)
}

// swaClusterStdin is swaCluster with stdin.
func swaClusterStdin(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	return swaStdin(t, stdin, append(args, "--kubeconfig", env.Kubeconfig)...)
}

// kubectlBin is the pinned kubectl (hack/tools/build.sh), not one on PATH.
func kubectlBin(t *testing.T) string {
	t.Helper()
	dir, err := localcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "kubectl")
}

// contextsKubeconfig is the test's kubeconfig with a current context whose
// server refuses connections, and a context "with-namespace" for the test's
// API server with namespace ns.
func contextsKubeconfig(t *testing.T, ns string) string {
	t.Helper()
	kc, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	good := kc.Contexts[kc.CurrentContext]
	kc.Clusters["broken"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1", InsecureSkipTLSVerify: true}
	kc.Contexts["broken"] = &clientcmdapi.Context{Cluster: "broken", AuthInfo: good.AuthInfo}
	kc.Contexts["with-namespace"] = &clientcmdapi.Context{Cluster: good.Cluster, AuthInfo: good.AuthInfo, Namespace: ns}
	kc.CurrentContext = "broken"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// fakeDiff is a diff program: it records its arguments and the files of the
// two directories it is given in the JSON file record, prints a line, and
// exits as diff does (0 same, 1 different) or with $SWA_TEST_DIFF_EXIT.
const (
	fakeDiffEnv     = "SWA_TEST_DIFF_RECORD"
	fakeDiffExitEnv = "SWA_TEST_DIFF_EXIT"
)

type fakeDiffRecord struct {
	Args         []string
	Live, Merged map[string]string
	Differ       bool
}

func fakeDiff(record string, args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "fake diff: want two directories, got", args)
		return 2
	}
	r := fakeDiffRecord{Args: args, Live: map[string]string{}, Merged: map[string]string{}}
	for dir, files := range map[string]map[string]string{args[0]: r.Live, args[1]: r.Merged} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake diff:", err)
			return 2
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				fmt.Fprintln(os.Stderr, "fake diff:", err)
				return 2
			}
			files[e.Name()] = string(b)
		}
	}
	r.Differ = !maps.Equal(r.Live, r.Merged)
	b, _ := json.Marshal(r)
	if err := os.WriteFile(record, b, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "fake diff:", err)
		return 2
	}
	fmt.Println("fake diff: 2 directories")
	if code, err := strconv.Atoi(os.Getenv(fakeDiffExitEnv)); err == nil {
		return code
	}
	if r.Differ {
		return 1
	}
	return 0
}

func readFakeDiff(t *testing.T, record string) fakeDiffRecord {
	t.Helper()
	var r fakeDiffRecord
	b, err := os.ReadFile(record)
	if err == nil {
		err = json.Unmarshal(b, &r)
	}
	if err != nil {
		t.Fatalf("the external diff program left no record: %v", err)
	}
	return r
}
