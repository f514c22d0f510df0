// Package reproducible holds what the artifact builders (hack/image,
// hack/release) share so that the same commit gives the same bytes: where
// the checkout is, the one time every artifact carries, and gzip without a
// name or a time in its header.
package reproducible

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// RepoRoot is the checkout that holds hack/build.sh, from the working
// directory up.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "build.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run it inside the repository: no hack/build.sh in any directory above")
		}
		dir = parent
	}
}

// ErrNoCommitTime says SOURCE_DATE_EPOCH is unset and git gives no commit time
// (a checkout without .git). Callers decide whether a fixed time will do.
var ErrNoCommitTime = errors.New("no SOURCE_DATE_EPOCH and no commit time")

// SourceDateEpoch is SOURCE_DATE_EPOCH, else the commit time of HEAD in root.
func SourceDateEpoch(root string) (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		cmd := exec.Command("git", "log", "-1", "--format=%ct", "HEAD")
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			return time.Time{}, fmt.Errorf("%w (git log: %v)", ErrNoCommitTime, err)
		}
		s = strings.TrimSpace(string(out))
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: not seconds since the Unix epoch", s)
	}
	return time.Unix(sec, 0).UTC(), nil
}

// Gzip compresses raw at the default level. compress/gzip writes neither a
// file name nor a time into the header, so the bytes depend on raw only.
func Gzip(raw []byte) ([]byte, error) {
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return gz.Bytes(), nil
}

// WriteFile replaces path with r's bytes (mode 0644) in one rename: a failed
// build leaves the previous file, never half of one.
func WriteFile(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".artifact-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, r); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
