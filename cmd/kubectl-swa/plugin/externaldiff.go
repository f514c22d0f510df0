package plugin

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// external writes the live and the dry-run objects to two directories, as
// kubectl diff does (a file per object, absent where the object is), runs
// program ($KUBECTL_EXTERNAL_DIFF) on them and returns its exit code.
func (d *differ) external(program string, stdout io.Writer) (int, error) {
	live, err := os.MkdirTemp("", "LIVE-")
	if err != nil {
		return 0, err
	}
	defer func() { _ = os.RemoveAll(live) }()
	merged, err := os.MkdirTemp("", "MERGED-")
	if err != nil {
		return 0, err
	}
	defer func() { _ = os.RemoveAll(merged) }()
	for _, p := range d.pairs {
		for dir, obj := range map[string]*unstructured.Unstructured{live: p.before, merged: p.after} {
			if obj == nil {
				continue
			}
			text, err := comparable(obj)
			if err != nil {
				return 0, err
			}
			if err := os.WriteFile(filepath.Join(dir, fileName(obj)), []byte(text), 0o600); err != nil {
				return 0, err
			}
		}
	}
	cmd := externalCommand(program, live, merged)
	cmd.Stdout, cmd.Stderr = stdout, d.log
	err = cmd.Run()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.ExitCode() > 0 {
		return exitErr.ExitCode(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("failed to run %q: %w", cmd.Path, err)
	}
	return 0, nil
}

// kubectl diff passes the words of KUBECTL_EXTERNAL_DIFF after the first
// only when they match this.
var externalDiffArg = regexp.MustCompile(`^[a-zA-Z0-9-=]+$`)

// externalCommand is kubectl diff's command for KUBECTL_EXTERNAL_DIFF: its
// first word, the two directories, then the other words that are plain
// flags.
func externalCommand(program, from, to string) *exec.Cmd {
	words := strings.Split(program, " ")
	args := []string{from, to}
	for _, w := range words[1:] {
		if externalDiffArg.MatchString(w) {
			args = append(args, w)
		}
	}
	return exec.Command(words[0], args...) //nolint:gosec // G204: the user's own KUBECTL_EXTERNAL_DIFF, run as kubectl diff runs it.
}

// fileName is kubectl diff's name for obj: [group.]version.kind.namespace.name.
func fileName(obj *unstructured.Unstructured) string {
	gvk := obj.GroupVersionKind()
	name := fmt.Sprintf("%s.%s.%s.%s", gvk.Version, gvk.Kind, obj.GetNamespace(), obj.GetName())
	if gvk.Group != "" {
		name = gvk.Group + "." + name
	}
	return name
}
