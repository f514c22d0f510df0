package testkit

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing/fstest"

	"github.com/blang/semver/v4"
	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/loaders"
	"sigs.k8s.io/yaml"

	"example.com/simplewebapp-operator/channels"
)

// PackageName is the package in channels/packages that renders a
// SimpleWebApp (render.PackageName).
const PackageName = "simplewebapp"

// TB is the part of testing.TB that the channel helpers use. A *testing.T
// is one; TestMain, which has none, passes Main.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Main is a TB for TestMain: Fatalf panics with the message.
var Main TB = mainTB{}

type mainTB struct{}

func (mainTB) Helper()                           {}
func (mainTB) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// Versions are the versions of the package in the embedded channels/packages,
// lowest first. Tests that mean "every version" iterate over them.
func Versions(t TB) []string {
	t.Helper()
	dir := path.Join("packages", PackageName)
	entries, err := fs.ReadDir(channels.FS, dir)
	if err != nil || len(entries) == 0 {
		t.Fatalf("embedded %s: %d versions (%v)", dir, len(entries), err)
	}
	var vs []semver.Version
	for _, e := range entries {
		v, err := semver.Parse(e.Name())
		if err != nil || !e.IsDir() {
			t.Fatalf("embedded %s/%s is not a package version directory: %v", dir, e.Name(), err)
		}
		vs = append(vs, v)
	}
	semver.Sort(vs)
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v.String()
	}
	return out
}

// ChannelNames are the embedded channel files (stable, rapid, ...).
func ChannelNames(t TB) []string {
	t.Helper()
	entries, err := fs.ReadDir(channels.FS, ".")
	if err != nil {
		t.Fatalf("embedded channels: %v", err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && !strings.HasSuffix(e.Name(), ".go") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatalf("no channel files embedded")
	}
	return names
}

// ChannelVersion is the version that the embedded channel file decides for
// SimpleWebApps following it: the highest semver it lists for the package,
// by the operator's rule (kdp's Channel.Latest, as internal/render/release.go).
// Tests that mean "the stable version" ask ChannelVersion(t, "stable").
func ChannelVersion(t TB, channel string) string {
	t.Helper()
	raw, err := fs.ReadFile(channels.FS, channel)
	if err != nil {
		t.Fatalf("embedded channel %q: %v", channel, err)
	}
	var ch loaders.Channel
	if err := yaml.UnmarshalStrict(raw, &ch); err != nil {
		t.Fatalf("embedded channel %q is malformed: %v", channel, err)
	}
	latest, err := ch.Latest(context.Background(), PackageName)
	if err != nil || latest == nil {
		t.Fatalf("embedded channel %q lists no version of %s (%v)", channel, PackageName, err)
	}
	return latest.Version
}

// NewVersion is a test-only version, newer than every embedded package
// version: <highest major + 1>.<n>.0. Tests that need a version newer than
// the stable one write it into a channels directory with CopyPackage; each
// test uses its own n.
func NewVersion(t TB, n int) string {
	t.Helper()
	vs := Versions(t)
	top := semver.MustParse(vs[len(vs)-1])
	return fmt.Sprintf("%d.%d.0", top.Major+1, n)
}

// ChannelYAML is a channel file listing versions of the package.
func ChannelYAML(versions ...string) string {
	var b strings.Builder
	b.WriteString("# written by a test\nmanifests:\n")
	for _, v := range versions {
		fmt.Fprintf(&b, "- name: %s\n  version: %s\n", PackageName, v)
	}
	return b.String()
}

// Tree is a channels tree (the layout of channels/) that tests write into:
// a directory on disk, such as the operator's --channels-dir (DirTree), or an
// fstest.MapFS (MapTree).
type Tree interface {
	// Write puts files (slash-separated paths relative to the tree) into the
	// tree, replacing what is there.
	Write(files map[string]string) error
	String() string
}

// DirTree is the directory root on disk. Every file is written atomically
// (written next to root, then renamed into place), as a ConfigMap mount or a
// sync tool would, so a reader never sees half a file; files that make up a
// new directory (a package version) appear at once, with one rename of that
// directory.
func DirTree(root string) Tree { return dirTree(root) }

type dirTree string

func (d dirTree) String() string { return string(d) }

func (d dirTree) Write(files map[string]string) error {
	if len(files) == 0 {
		return nil
	}
	root := string(d)
	// The staging directory is a sibling of root: on the same file system,
	// so renames are atomic, and outside what the operator reads.
	stage, err := os.MkdirTemp(filepath.Dir(root), ".kit-staging-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	if err := os.Chmod(stage, 0o755); err != nil {
		return err
	}
	// A new directory holding every file: build it in stage, rename it in.
	if dir := commonDir(files); dir != "." {
		dst := filepath.Join(root, filepath.FromSlash(dir))
		if _, err := os.Stat(dst); errors.Is(err, fs.ErrNotExist) {
			for name, content := range files {
				p := filepath.Join(stage, filepath.FromSlash(strings.TrimPrefix(name, dir+"/")))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					return err
				}
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			return os.Rename(stage, dst)
		}
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		tmp := filepath.Join(stage, fmt.Sprintf("file-%d", i))
		if err := os.WriteFile(tmp, []byte(files[name]), 0o644); err != nil {
			return err
		}
		dst := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.Rename(tmp, dst); err != nil {
			return err
		}
	}
	return nil
}

// commonDir is the deepest directory that holds every file, "." for the root.
func commonDir(files map[string]string) string {
	dir := ""
	first := true
	for name := range files {
		d := path.Dir(name)
		if first {
			dir, first = d, false
			continue
		}
		for dir != "." && d != dir && !strings.HasPrefix(d, dir+"/") {
			dir = path.Dir(dir)
		}
	}
	return dir
}

// MapTree writes into m. An fstest.MapFS is not safe for concurrent use:
// write it before the operator reads it.
func MapTree(m fstest.MapFS) Tree { return mapTree(m) }

type mapTree fstest.MapFS

func (m mapTree) String() string { return "an fstest.MapFS" }

func (m mapTree) Write(files map[string]string) error {
	for name, content := range files {
		m[name] = &fstest.MapFile{Data: []byte(content), Mode: 0o644}
	}
	return nil
}

// Embedded is a copy of the embedded channels and packages (channels.FS) as
// an fstest.MapFS, for tests to add channels and versions to.
func Embedded(t TB) fstest.MapFS {
	t.Helper()
	m := fstest.MapFS{}
	err := fs.WalkDir(channels.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(channels.FS, p)
		m[p] = &fstest.MapFile{Data: b, Mode: 0o644}
		return err
	})
	if err != nil {
		t.Fatalf("copying the embedded channels: %v", err)
	}
	return m
}

// WriteChannel (re)writes the channel file name in tree, listing versions.
func WriteChannel(t TB, tree Tree, name string, versions ...string) {
	t.Helper()
	WriteChannelFile(t, tree, name, ChannelYAML(versions...))
}

// WriteChannelFile (re)writes the channel file name in tree with content,
// which need not be a valid channel.
func WriteChannelFile(t TB, tree Tree, name, content string) {
	t.Helper()
	if err := tree.Write(map[string]string{name: content}); err != nil {
		t.Fatalf("writing channel %s into %s: %v", name, tree, err)
	}
}

// Edit changes the files (name → content) of a package version being
// copied: it may change, add or delete files.
type Edit func(files map[string]string) error

// CopyPackage copies the embedded package version from into tree as version
// to, with edits applied in order. The files appear at once.
func CopyPackage(t TB, tree Tree, from, to string, edits ...Edit) {
	t.Helper()
	src := path.Join("packages", PackageName, from)
	entries, err := fs.ReadDir(channels.FS, src)
	if err != nil || len(entries) == 0 {
		t.Fatalf("embedded package %s: %d files (%v)", src, len(entries), err)
	}
	files := map[string]string{}
	for _, e := range entries {
		b, err := fs.ReadFile(channels.FS, path.Join(src, e.Name()))
		if err != nil {
			t.Fatalf("embedded package %s: %v", src, err)
		}
		files[e.Name()] = string(b)
	}
	for _, edit := range edits {
		if err := edit(files); err != nil {
			t.Fatalf("editing package %s as %s: %v", from, to, err)
		}
	}
	dst := path.Join("packages", PackageName, to)
	out := make(map[string]string, len(files))
	for name, content := range files {
		out[path.Join(dst, name)] = content
	}
	if err := tree.Write(out); err != nil {
		t.Fatalf("writing package %s (from %s) into %s: %v", dst, from, tree, err)
	}
}

// AddResource is an Edit that adds the file name with content to the package
// and lists it in the kustomization's resources.
func AddResource(name, content string) Edit {
	return func(files map[string]string) error {
		k, ok := files["kustomization.yaml"]
		if !ok {
			return errors.New("no kustomization.yaml")
		}
		if _, dup := files[name]; dup {
			return fmt.Errorf("the package has a %s already", name)
		}
		const list = "\nresources:\n"
		i := strings.Index(k, list)
		if i < 0 {
			return errors.New("kustomization.yaml has no block list of resources")
		}
		i += len(list)
		files["kustomization.yaml"] = k[:i] + "- " + name + "\n" + k[i:]
		files[name] = content
		return nil
	}
}

// MarkerName is the ConfigMap that MarkVersion adds (rendered as
// <SimpleWebApp name>-marker).
const MarkerName = "marker"

// MarkVersion is an Edit that makes a copied package observably version:
// it adds the ConfigMap MarkerName (data: version) and a comment to the
// nginx configuration, whose content-hashed ConfigMap the pod template names,
// so pods roll when an app moves to or from the copy.
func MarkVersion(version string) Edit {
	return func(files map[string]string) error {
		conf, ok := files["nginx.conf"]
		if !ok {
			return errors.New("no nginx.conf: make MarkVersion change the pod template in another way")
		}
		files["nginx.conf"] = "# test version " + version + "\n" + conf
		return AddResource(MarkerName+".yaml", fmt.Sprintf(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  version: %q\n", MarkerName, version))(files)
	}
}

// PodLabels is an Edit that puts labels on the pod template of the package's
// Deployment "web" with a kustomize patch, for example the label a test kwok
// stage acts on (localcluster.NeverReadyLabel) to play a version whose pods
// never become Ready.
func PodLabels(labels map[string]string) Edit {
	return func(files map[string]string) error {
		k := files["kustomization.yaml"]
		if strings.Contains(k, "\npatches:") {
			return errors.New("kustomization.yaml has patches already; merge the label patch into them")
		}
		keys := make([]string, 0, len(labels))
		for key := range labels {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		var b strings.Builder
		for _, key := range keys {
			fmt.Fprintf(&b, "            %s: %q\n", key, labels[key])
		}
		files["kustomization.yaml"] = "# A test version with pod template labels " + strings.Join(keys, ", ") + ".\n" + k + `patches:
- target: {kind: Deployment, name: web}
  patch: |
    apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: web
    spec:
      template:
        metadata:
          labels:
` + b.String()
		return nil
	}
}
