package reproducible

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSourceDateEpoch(t *testing.T) {
	for _, tc := range []struct {
		name, env, dir string
		want           time.Time
		wantErr        error
		anyErr         bool
	}{
		{name: "set", env: "1700000000", dir: t.TempDir(), want: time.Unix(1700000000, 0).UTC()},
		{name: "not a number", env: "yesterday", dir: t.TempDir(), anyErr: true},
		{name: "negative", env: "-5", dir: t.TempDir(), anyErr: true},
		{name: "unset, no git", dir: t.TempDir(), wantErr: ErrNoCommitTime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SOURCE_DATE_EPOCH", tc.env)
			t.Setenv("GIT_CEILING_DIRECTORIES", tc.dir)
			got, err := SourceDateEpoch(tc.dir)
			switch {
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			case tc.anyErr && err == nil:
				t.Fatalf("no error, got %v", got)
			case tc.wantErr == nil && !tc.anyErr && (err != nil || !got.Equal(tc.want)):
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestGzipHasNoTime: two compressions of the same bytes are
// equal, and the header's MTIME field (bytes 4-7) is zero.
func TestGzipHasNoTime(t *testing.T) {
	a, err := Gzip([]byte("same content"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Gzip([]byte("same content"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) || !bytes.Equal(a[4:8], []byte{0, 0, 0, 0}) {
		t.Fatalf("gzip output differs or carries a time: % x / % x", a[:10], b[:10])
	}
}

// TestWriteFileReplacesWhole: the file is created with its directories, mode
// 0644, replaced on a second write, and no temporary file stays behind.
func TestWriteFileReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "a.tar")
	for _, content := range []string{"first, longer content", "second"} {
		if err := WriteFile(p, strings.NewReader(content)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != content {
			t.Fatalf("read %q, %v; want %q", got, err, content)
		}
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v, %v; want 0644", fi.Mode(), err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(p)); len(entries) != 1 {
		t.Fatalf("%d entries in the directory, want only the file", len(entries))
	}
}
