// Package run tests `make run` (hack/run.sh) against a given cluster: with
// KUBECONFIG reaching one, it builds only the operator (and hack/runctl),
// never the local control plane, uses no kubectl, says which cluster it uses,
// applies the sample and runs the operator until it is stopped.
package run

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	sigsyaml "sigs.k8s.io/yaml"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/testkit"
)

var swaGVR = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "simplewebapps"}

// syncBuffer is the output of make run, written by exec's copying goroutine
// and read by the test's polls.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMakeRunOnAGivenCluster runs `make run` with KUBECONFIG set to a full
// local cluster that the test starts. The tools cache of the make run
// (SWA_TOOLS_CACHE) lies under a regular file: it holds no control-plane
// binary and none can be built there, so any use of kube-apiserver, etcd, kwok
// or the tools' kubectl, or a start of hack/tools/build.sh, fails at once.
// The kubectl first on PATH fails and records that it was called. The make
// run must say which cluster it uses (context and server), apply the sample,
// start the operator, which makes my-webapp Ready, and stop the operator when
// it is stopped itself (SIGTERM to make, which passes it on to hack/run.sh).
func TestMakeRunOnAGivenCluster(t *testing.T) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	blocker := filepath.Join(tmp, "not-a-directory")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	stubDir := filepath.Join(tmp, "path")
	kubectlCalls := filepath.Join(tmp, "kubectl-calls")
	if err := os.MkdirAll(stubDir, 0o755); err != nil {
		t.Fatal(err)
	}
	stub := fmt.Sprintf("#!/bin/sh\necho \"kubectl $*\" >>%q\necho 'make run must not need kubectl' >&2\nexit 1\n", kubectlCalls)
	if err := os.WriteFile(filepath.Join(stubDir, "kubectl"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	gocache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOCACHE: %v", err)
	}
	// The environment of a user without the local control plane. GOCACHE
	// stays: XDG_CACHE_HOME would move it (a cold build).
	env := func(kubeconfig string) []string {
		return append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
			for _, k := range []string{"SWA_BIN_DIR=", "KUBEBUILDER_ASSETS=", "KUBECONFIG=", "PATH=", "MAKEFLAGS=", "MAKELEVEL="} {
				if strings.HasPrefix(kv, k) {
					return true
				}
			}
			return false
		}),
			"SWA_TOOLS_CACHE="+filepath.Join(blocker, "cache"),
			"XDG_CACHE_HOME="+filepath.Join(tmp, "xdg-cache"),
			"GOCACHE="+strings.TrimSpace(string(gocache)),
			"PATH="+stubDir+string(os.PathListSeparator)+os.Getenv("PATH"),
			"KUBECONFIG="+kubeconfig,
		)
	}
	bin := filepath.Join(tmp, "bin", "simplewebapp-operator")

	t.Run("make -n run has no tools prerequisite", func(t *testing.T) {
		cmd := exec.CommandContext(t.Context(), "make", "-n", "--no-print-directory", "run", "BIN="+bin)
		cmd.Dir, cmd.Env = root, env("")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n run: %v\n%s", err, out)
		}
		for _, want := range []string{"bash hack/build.sh " + filepath.Dir(bin), "bash hack/run.sh"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("make -n run does not run %q:\n%s", want, out)
			}
		}
		// The recipe of make tools: hack/tools/build.sh (--print only
		// computes SWA_BIN_DIR, and make -n shows its result).
		for _, unwanted := range []string{"hack/tools/build.sh", "build-metrics-server.sh"} {
			if strings.Contains(string(out), unwanted) {
				t.Errorf("make -n run runs %s (make tools):\n%s", unwanted, out)
			}
		}
	})

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Options{Profile: localcluster.ProfileFull})
	if err != nil {
		t.Fatalf("starting the full cluster: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stopping the cluster: %v", err)
		}
	})
	server := c.RESTConfig().Host
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}

	var out syncBuffer
	cmd := exec.Command("make", "--no-print-directory", "run", "BIN="+bin)
	cmd.Dir, cmd.Env = root, env(c.Kubeconfig)
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second // a grandchild holding the output open does not hold the test
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var opPID int
	t.Cleanup(func() { stop(t, cmd, exited, opPID) })

	diag := testkit.Diag(func() string { return "make run output:\n" + out.String() })
	// Fail at once when make run takes the local path or touches a tool.
	abort := testkit.Abort(func() error {
		o := out.String()
		for _, bad := range []string{"[tools", "using the local one", "Using the local cluster"} {
			if strings.Contains(o, bad) {
				return fmt.Errorf("make run went for the local control plane (%q)", bad)
			}
		}
		if b, err := os.ReadFile(kubectlCalls); err == nil {
			return fmt.Errorf("make run called kubectl: %s", b)
		}
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("make run exited: %v", err)
		default:
		}
		return nil
	})

	pidRE := regexp.MustCompile(`operator running \(pid (\d+)\)`)
	started := testkit.WaitFor(t, 4*time.Minute, "make run to start the operator", func(context.Context) (bool, string) {
		m := pidRE.FindStringSubmatch(out.String())
		if m == nil {
			return false, "no \"operator running\" line"
		}
		opPID, _ = strconv.Atoi(m[1])
		return true, m[0]
	}, testkit.Every(100*time.Millisecond), diag, abort)
	testkit.WaitFor(t, 2*time.Minute, "make run to report my-webapp Ready", func(context.Context) (bool, string) {
		return strings.Contains(out.String(), "my-webapp is Ready."), "not yet"
	}, testkit.Every(100*time.Millisecond), diag, abort)
	t.Logf("FIGURE make run on a given cluster (warm Go cache, no control plane): operator started after %s, my-webapp Ready after %s",
		started.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	o := out.String()
	wantLines := []string{
		// Which cluster: KUBECONFIG, its context and server.
		fmt.Sprintf("Using the cluster of KUBECONFIG=%s: context local, server %s\n", c.Kubeconfig, server),
		"simplewebapp.example.com/my-webapp created\n",
		"simplewebapp.example.com/my-webapp condition met\n",
		fmt.Sprintf("This operator (pid %d) is the leader: it reconciles.\n", opPID),
	}
	for _, w := range wantLines {
		if !strings.Contains(o, w) {
			t.Errorf("make run output lacks %q:\n%s", w, o)
		}
	}
	if err := syscall.Kill(opPID, 0); err != nil {
		t.Errorf("operator pid %d: %v", opPID, err)
	}

	// The sample as applied, made Ready by this operator.
	sample, err := os.ReadFile(filepath.Join(root, "config", "samples", "my-webapp.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want unstructured.Unstructured
	if err := sigsyaml.Unmarshal(sample, &want.Object); err != nil {
		t.Fatal(err)
	}
	swa, err := dyn.Resource(swaGVR).Namespace("default").Get(t.Context(), want.GetName(), metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the sample SimpleWebApp: %v", err)
	}
	for _, f := range []string{"replicas", "message"} {
		w, _, _ := unstructured.NestedFieldNoCopy(want.Object, "spec", f)
		g, _, _ := unstructured.NestedFieldNoCopy(swa.Object, "spec", f)
		if fmt.Sprint(w) != fmt.Sprint(g) {
			t.Errorf("spec.%s = %v, the sample says %v", f, g, w)
		}
	}
	if ready, _, _ := unstructured.NestedInt64(swa.Object, "status", "readyReplicas"); ready != 3 {
		t.Errorf("status.readyReplicas = %d, want 3; status: %v", ready, swa.Object["status"])
	}

	// Stopped, make run stops its operator.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "make run and its operator to exit", func(context.Context) (bool, string) {
		select {
		case err := <-exited:
			exited <- err
		default:
			return false, "make still running"
		}
		if err := syscall.Kill(opPID, 0); !errors.Is(err, syscall.ESRCH) {
			return false, fmt.Sprintf("operator pid %d: kill -0: %v", opPID, err)
		}
		return true, "both gone"
	}, diag)
	if !strings.Contains(out.String(), "operator stopped; its log: ") {
		t.Errorf("make run did not report stopping the operator:\n%s", out.String())
	}
	if _, err := os.Stat(kubectlCalls); err == nil {
		t.Errorf("make run called kubectl")
	}
}

// stop ends what the test started and is still running: make (SIGTERM, which
// make passes on to hack/run.sh, whose trap stops the operator), then, past a
// deadline, make and the operator by their PIDs.
func stop(t *testing.T, cmd *exec.Cmd, exited chan error, opPID int) {
	select {
	case err := <-exited:
		exited <- err
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		exited <- err
	case <-time.After(20 * time.Second):
		t.Errorf("make run did not exit on SIGTERM: killing make (pid %d) and the operator (pid %d)", cmd.Process.Pid, opPID)
		_ = cmd.Process.Kill()
		if opPID > 0 {
			_ = syscall.Kill(opPID, syscall.SIGKILL)
		}
	}
}
