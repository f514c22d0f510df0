package localcluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/testkit"
)

// TestStopLeavesNoProcess starts an "api" profile cluster, stops it and checks
// that every recorded process is gone and the temporary state is removed.
func TestStopLeavesNoProcess(t *testing.T) {
	c, err := localcluster.Start(t.Context(), localcluster.Options{Profile: localcluster.ProfileAPI, LogWriter: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.PIDs) != 2 {
		t.Fatalf("PIDs = %v, want etcd and kube-apiserver", c.PIDs)
	}
	for name, pid := range c.PIDs {
		if !localcluster.Alive(name, pid) {
			t.Fatalf("%s (pid %d) not running after Start", name, pid)
		}
	}
	t0 := time.Now()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop took %s", time.Since(t0).Round(time.Millisecond))
	for name, pid := range c.PIDs {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) after Stop: kill(pid, 0) = %v, want ESRCH", name, pid, err)
		}
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Errorf("state dir %s still there after Stop (stat: %v)", c.Dir, err)
	}
}

// TestStopFromDirDetached is what "localcluster down" does: stop a detached
// cluster only from its recorded pids file.
func TestStopFromDirDetached(t *testing.T) {
	dir := t.TempDir()
	c, err := localcluster.Start(t.Context(), localcluster.Options{Profile: localcluster.ProfileAPI, Dir: dir, Detach: true, LogWriter: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() }) // no-op when the test got through
	if err := localcluster.StopFromDir(dir); err != nil {
		t.Fatal(err)
	}
	// A detached child of this test process is reaped by it asynchronously,
	// so ESRCH (not just "zombie") may take a moment.
	for name, pid := range c.PIDs {
		_, seen, err := testkit.Poll(t.Context(), 20*time.Millisecond, 5*time.Second, func(context.Context) (bool, string, error) {
			err := syscall.Kill(pid, 0)
			return errors.Is(err, syscall.ESRCH), fmt.Sprintf("kill(pid, 0) = %v", err), nil
		})
		if err != nil {
			t.Errorf("%s (pid %d) still exists after StopFromDir: %s", name, pid, seen)
		}
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("StopFromDir must leave the state dir to its caller: %v", err)
	}
}

// TestNeverReadyStageMatchesItsLabel checks that the never-ready kwok stage
// (a YAML file) selects pods by NeverReadyLabel, as the tests that use the
// label expect.
func TestNeverReadyStageMatchesItsLabel(t *testing.T) {
	var stage struct {
		Kind     string `json:"kind"`
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"selector"`
			Weight int `json:"weight"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(localcluster.NeverReadyStage), &stage); err != nil {
		t.Fatal(err)
	}
	if stage.Kind != "Stage" || stage.Spec.Selector.MatchLabels[localcluster.NeverReadyLabel] != "true" || stage.Spec.Weight < 1 {
		t.Errorf("kwok-stage-never-ready.yaml: kind %q, matchLabels %v, weight %d; want a Stage for %s=true with a weight above the standard stages' 0",
			stage.Kind, stage.Spec.Selector.MatchLabels, stage.Spec.Weight, localcluster.NeverReadyLabel)
	}
}
