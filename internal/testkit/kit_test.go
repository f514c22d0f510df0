package testkit_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"

	"example.com/simplewebapp-operator/internal/testkit"
)

func TestVersionsAndChannels(t *testing.T) {
	vs := testkit.Versions(t)
	for i := 1; i < len(vs); i++ {
		if semver.MustParse(vs[i-1]).GTE(semver.MustParse(vs[i])) {
			t.Errorf("versions not ascending: %v", vs)
		}
	}
	for _, ch := range testkit.ChannelNames(t) {
		if v := testkit.ChannelVersion(t, ch); !slices.Contains(vs, v) {
			t.Errorf("channel %s decides %s, which is not a package version (%v)", ch, v, vs)
		}
	}
	if !slices.Contains(testkit.ChannelNames(t), "stable") {
		t.Errorf("no stable channel among %v", testkit.ChannelNames(t))
	}
	top := semver.MustParse(vs[len(vs)-1])
	for n := range 3 {
		if v := semver.MustParse(testkit.NewVersion(t, n)); !v.GT(top) {
			t.Errorf("NewVersion(%d) = %s, not newer than %s", n, v, top)
		}
	}
	t.Logf("versions %v, stable %s, NewVersion(1) %s", vs, testkit.ChannelVersion(t, "stable"), testkit.NewVersion(t, 1))
}

func TestDirTree(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "channels")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	tree := testkit.DirTree(root)
	stable := testkit.ChannelVersion(t, "stable")
	v := testkit.NewVersion(t, 1)
	testkit.CopyPackage(t, tree, stable, v, testkit.MarkVersion(v))
	testkit.WriteChannel(t, tree, "mine", stable, v)
	testkit.WriteChannelFile(t, tree, "mine", testkit.ChannelYAML(v)) // replaced

	pkg := filepath.Join(root, "packages", testkit.PackageName, v)
	kust, err := os.ReadFile(filepath.Join(pkg, "kustomization.yaml"))
	if err != nil || !strings.Contains(string(kust), "\n- "+testkit.MarkerName+".yaml\n") {
		t.Errorf("kustomization.yaml does not list the marker (err %v):\n%s", err, kust)
	}
	marker, err := os.ReadFile(filepath.Join(pkg, testkit.MarkerName+".yaml"))
	if err != nil || !strings.Contains(string(marker), v) {
		t.Errorf("marker %q (err %v)", marker, err)
	}
	conf, err := os.ReadFile(filepath.Join(pkg, "nginx.conf"))
	if err != nil || !strings.HasPrefix(string(conf), "# test version "+v+"\n") {
		t.Errorf("nginx.conf not marked (err %v): %.80q", err, conf)
	}
	ch, err := os.ReadFile(filepath.Join(root, "mine"))
	if err != nil || string(ch) != testkit.ChannelYAML(v) {
		t.Errorf("channel file %q (err %v), want %q", ch, err, testkit.ChannelYAML(v))
	}
	left, _ := filepath.Glob(filepath.Join(parent, ".kit-staging-*"))
	if len(left) > 0 {
		t.Errorf("staging directories left behind: %v", left)
	}
}

func TestMapTree(t *testing.T) {
	m := testkit.Embedded(t)
	stable := testkit.ChannelVersion(t, "stable")
	if _, err := fs.Stat(m, "packages/"+testkit.PackageName+"/"+stable+"/kustomization.yaml"); err != nil {
		t.Fatal(err)
	}
	v := testkit.NewVersion(t, 2)
	testkit.CopyPackage(t, testkit.MapTree(m), stable, v, testkit.AddResource("extra.yaml", "kind: ConfigMap\n"), func(files map[string]string) error {
		delete(files, "hpa.yaml")
		return nil
	})
	testkit.WriteChannel(t, testkit.MapTree(m), "testing", v)
	if b, err := fs.ReadFile(m, "packages/"+testkit.PackageName+"/"+v+"/extra.yaml"); err != nil || string(b) != "kind: ConfigMap\n" {
		t.Errorf("extra.yaml %q (err %v)", b, err)
	}
	if _, err := fs.Stat(m, "packages/"+testkit.PackageName+"/"+v+"/hpa.yaml"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("deleted file copied: %v", err)
	}
	if err := fstestValid(m); err != nil {
		t.Error(err)
	}
}

// fstestValid reads every file of the tree.
func fstestValid(fsys fs.FS) error {
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			_, err = fs.ReadFile(fsys, p)
		}
		return err
	})
}

func TestWaits(t *testing.T) {
	n := 0
	testkit.WaitFor(t, 5*time.Second, "the third poll", func(context.Context) (bool, string) {
		n++
		return n == 3, "poll " + strconv.Itoa(n)
	}, testkit.Every(time.Millisecond))

	_, seen, err := testkit.Poll(t.Context(), time.Millisecond, 20*time.Millisecond, func(context.Context) (bool, string, error) {
		return false, "never", nil
	})
	if err == nil || seen != "never" {
		t.Errorf("Poll of a condition that never holds: seen %q, err %v", seen, err)
	}
	stop := errors.New("stop")
	if _, _, err := testkit.Poll(t.Context(), time.Millisecond, time.Second, func(context.Context) (bool, string, error) {
		return false, "", stop
	}); !errors.Is(err, stop) {
		t.Errorf("Poll ended by its condition: %v", err)
	}

	if polls := testkit.HoldsFor(t, 50*time.Millisecond, "true", func(context.Context) (bool, string) { return true, "" },
		testkit.Every(5*time.Millisecond)); polls < 2 {
		t.Errorf("HoldsFor polled %d times", polls)
	}
}

func TestDeploymentRolledOut(t *testing.T) {
	d := &appsv1.Deployment{}
	d.Generation = 2
	d.Spec.Replicas = ptr.To[int32](3)
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3}
	if ok, seen := testkit.DeploymentRolledOut(d); !ok {
		t.Errorf("rolled out, but: %s", seen)
	}
	for name, change := range map[string]func(*appsv1.DeploymentStatus){
		"old generation":  func(s *appsv1.DeploymentStatus) { s.ObservedGeneration = 1 },
		"an old pod left": func(s *appsv1.DeploymentStatus) { s.Replicas = 4 },
		"not updated":     func(s *appsv1.DeploymentStatus) { s.UpdatedReplicas = 2 },
		"not available":   func(s *appsv1.DeploymentStatus) { s.AvailableReplicas = 2 },
	} {
		d2 := d.DeepCopy()
		change(&d2.Status)
		if ok, _ := testkit.DeploymentRolledOut(d2); ok {
			t.Errorf("%s: reported rolled out", name)
		}
	}
}
