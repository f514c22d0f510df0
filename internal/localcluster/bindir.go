package localcluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
)

var binDirOnce = sync.OnceValues(buildBinDir)

// BinDir returns the directory with etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler, kubectl, kwok and metrics-server:
// $SWA_BIN_DIR when set, otherwise the cache directory of hack/tools/build.sh,
// which it runs with hack/tools/build-metrics-server.sh (a no-op when cached;
// minutes when cold). Safe to call concurrently, within a
// process and across processes (test binaries of several packages).
func BinDir() (string, error) {
	if d := os.Getenv("SWA_BIN_DIR"); d != "" {
		return d, nil
	}
	return binDirOnce()
}

func buildBinDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, "hack", "tools", "build.sh")
	out, err := exec.Command("bash", script, "--print").Output()
	if err != nil {
		return "", fmt.Errorf("%s --print: %w", script, err)
	}
	dir := lastLine(out)

	// Serialise builds between test binaries that go test runs in parallel:
	// the second waits, then finds everything cached.
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(filepath.Dir(dir), ".build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) //nolint:errcheck

	cmd := exec.Command("bash", script)
	cmd.Stderr = os.Stderr // progress of a cold build (minutes) stays visible
	out, err = cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s: %w", script, err)
	}
	if got := lastLine(out); got != "" {
		dir = got
	}
	// metrics-server (Options.Metrics) has a script and a cache key of its
	// own; it links the binary into dir.
	ms := exec.Command("bash", filepath.Join(root, "hack", "tools", "build-metrics-server.sh"))
	ms.Stderr = os.Stderr
	if err := ms.Run(); err != nil {
		return "", fmt.Errorf("%s: %w", ms.Args[1], err)
	}
	for _, b := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s did not produce %s: %w", script, b, err)
		}
	}
	return dir, nil
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(bytes.TrimSpace(b))), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// RepoRoot finds the module root: from this source file's location when the
// sources are on disk (go test, go run), else by walking up from the working
// directory to a go.mod next to hack/tools/build.sh.
func RepoRoot() (string, error) {
	isRoot := func(d string) bool {
		_, err1 := os.Stat(filepath.Join(d, "go.mod"))
		_, err2 := os.Stat(filepath.Join(d, "hack", "tools", "build.sh"))
		return err1 == nil && err2 == nil
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		if d := filepath.Join(filepath.Dir(file), "..", ".."); isRoot(d) {
			return filepath.Clean(d), nil
		}
	}
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if isRoot(d) {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", errors.New("cannot find the repository root (go.mod with hack/tools/build.sh)")
		}
		d = parent
	}
}
