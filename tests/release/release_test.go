// Package release_test runs `make release` (hack/release) twice, into two
// directories, and checks that the two releases are the same to the byte
// and that every artifact is what it claims to be: checksums, the install
// YAMLs, the chart (read by the pinned helm), the images (OCI layouts for
// their platform), the kubectl-swa archives (installed by krew from the
// manifest) and the SBOM.
package release_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"example.com/simplewebapp-operator/internal/localcluster"
)

const (
	// Not the VERSION file's: the release must stamp the version it is
	// given into every artifact.
	version = "9.8.7-rc.1"
	image   = "docker.io/library/simplewebapp-operator:" + version
	url     = "https://downloads.example/swa/v" + version
	chart   = "simplewebapp-operator"
)

// platforms are those kubectl-swa is released for; the linux ones are the
// image's.
var platforms = []struct{ os, arch string }{
	{"linux", "amd64"}, {"linux", "arm64"},
	{"darwin", "amd64"}, {"darwin", "arm64"},
	{"windows", "amd64"}, {"windows", "arm64"},
}

func pluginArchive(goos, arch string) string {
	if goos == "windows" {
		return "kubectl-swa_" + version + "_" + goos + "_" + arch + ".zip"
	}
	return "kubectl-swa_" + version + "_" + goos + "_" + arch + ".tar.gz"
}

func imageArchive(arch string) string {
	return "simplewebapp-operator_" + version + "_linux_" + arch + ".oci.tar"
}

// wantFiles is every file a release holds.
func wantFiles() []string {
	files := []string{"SHA256SUMS", "install.yaml", "install-namespaced.yaml", chart + "-" + version + ".tgz",
		"sbom.cdx.json", "swa.yaml", imageArchive("amd64"), imageArchive("arm64")}
	for _, p := range platforms {
		files = append(files, pluginArchive(p.os, p.arch))
	}
	slices.Sort(files)
	return files
}

var repoRoot string

func TestMain(m *testing.M) {
	var err error
	if repoRoot, err = localcluster.RepoRoot(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// run runs a command in the repository root and returns its stdout. env
// adds NAME=VALUE to the environment and removes a bare NAME from it.
func run(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = repoRoot
	cmd.Env = os.Environ()
	for _, e := range env {
		if !strings.Contains(e, "=") {
			cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool { return strings.HasPrefix(kv, e+"=") })
			continue
		}
		cmd.Env = append(cmd.Env, e)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// epoch is the time every artifact carries: SOURCE_DATE_EPOCH or the
// commit time of HEAD.
func epoch(t *testing.T) time.Time {
	t.Helper()
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		s = strings.TrimSpace(run(t, nil, "git", "log", "-1", "--format=%ct", "HEAD"))
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(sec, 0).UTC()
}

// makeRelease runs make release into dir, IMG unset: the default image.
func makeRelease(t *testing.T, dir string, env ...string) {
	t.Helper()
	start := time.Now()
	run(t, append(env, "IMG"), "make", "--no-print-directory", "release", "VERSION="+version, "RELEASE_DIR="+dir, "RELEASE_URL="+url)
	t.Logf("make release into %s: %s", dir, time.Since(start).Round(time.Second))
}

// TestRelease: two releases of one commit, made at different times into
// different directories (with different temporary directories), are the
// same to the byte; then what the first holds is checked.
func TestRelease(t *testing.T) {
	dirA, dirB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	startA := time.Now()
	makeRelease(t, dirA)
	// Nothing in the release may depend on the wall clock: start the
	// second at least a second after the first, in another second.
	if d := time.Since(startA); d < time.Second {
		time.Sleep(time.Second - d)
	}
	makeRelease(t, dirB, "TMPDIR="+t.TempDir())

	sumsA, sumsB := readFile(t, filepath.Join(dirA, "SHA256SUMS")), readFile(t, filepath.Join(dirB, "SHA256SUMS"))
	if !bytes.Equal(sumsA, sumsB) {
		linesB := strings.Split(string(sumsB), "\n")
		var differ []string
		for _, l := range strings.Split(string(sumsA), "\n") {
			if !slices.Contains(linesB, l) {
				differ = append(differ, l)
			}
		}
		t.Fatalf("two releases of one commit differ in\n  %s\nSHA256SUMS of the second:\n%s", strings.Join(differ, "\n  "), sumsB)
	}

	dir := dirA
	sums := checkSums(t, dir, sumsA)
	r := &releaseDir{dir: dir, sums: sums, epoch: epoch(t)}
	t.Run("install YAMLs", r.installYAMLs)
	t.Run("chart", r.chart)
	t.Run("images", r.images)
	t.Run("kubectl-swa archives", r.pluginArchives)
	t.Run("krew", r.krew)
	t.Run("SBOM", r.sbom)
}

// releaseDir is one release and what the subtests learn from it.
type releaseDir struct {
	dir   string
	sums  map[string]string
	epoch time.Time
	// The binaries, by bom-ref of the SBOM (name_os_arch), filled by images
	// and pluginArchives for sbom.
	binaries map[string][]byte
}

func (r *releaseDir) file(t *testing.T, name string) []byte {
	t.Helper()
	return readFile(t, filepath.Join(r.dir, name))
}

func (r *releaseDir) addBinary(ref string, b []byte) {
	if r.binaries == nil {
		r.binaries = map[string][]byte{}
	}
	r.binaries[ref] = b
}

// checkSums: SHA256SUMS lists exactly the release's other files, each with
// its SHA-256, in sha256sum's format (sha256sum -c accepts it).
func checkSums(t *testing.T, dir string, sums []byte) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := wantFiles(); !slices.Equal(names, want) {
		t.Fatalf("the release holds\n  %s\nwant\n  %s", strings.Join(names, "\n  "), strings.Join(want, "\n  "))
	}
	got := map[string]string{}
	var listed []string
	sc := bufio.NewScanner(bytes.NewReader(sums))
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			t.Fatalf("SHA256SUMS line %q", sc.Text())
		}
		got[name] = sum
		listed = append(listed, name)
		if actual := sha(readFile(t, filepath.Join(dir, name))); actual != sum {
			t.Errorf("%s: SHA256SUMS says %s, it is %s", name, sum, actual)
		}
	}
	want := slices.DeleteFunc(wantFiles(), func(n string) bool { return n == "SHA256SUMS" })
	if !slices.Equal(listed, want) {
		t.Errorf("SHA256SUMS lists\n  %s\nwant (sorted)\n  %s", strings.Join(listed, "\n  "), strings.Join(want, "\n  "))
	}
	cmd := exec.CommandContext(t.Context(), "sha256sum", "--strict", "-c", "SHA256SUMS")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c SHA256SUMS: %v\n%s", err, out)
	}
	return got
}

// installYAMLs: install.yaml is what make build-installer writes for the
// release image, install-namespaced.yaml config/namespaced rendered the same
// way.
func (r *releaseDir) installYAMLs(t *testing.T) {
	installer := filepath.Join(t.TempDir(), "install.yaml")
	run(t, nil, "make", "--no-print-directory", "build-installer", "IMG="+image, "INSTALLER="+installer)
	if !bytes.Equal(r.file(t, "install.yaml"), readFile(t, installer)) {
		t.Error("install.yaml differs from make build-installer IMG=" + image)
	}
	namespaced := run(t, nil, "go", "run", "./hack/render", "--image", image, "config/namespaced")
	if got := r.file(t, "install-namespaced.yaml"); string(got) != namespaced {
		t.Error("install-namespaced.yaml differs from go run ./hack/render --image " + image + " config/namespaced")
	}
	for _, name := range []string{"install.yaml", "install-namespaced.yaml"} {
		if !strings.Contains(string(r.file(t, name)), "image: "+image+"\n") {
			t.Errorf("%s does not run %s", name, image)
		}
	}
	if !strings.Contains(namespaced, "--watch-namespaces=default") {
		t.Error("install-namespaced.yaml is not namespace mode (no --watch-namespaces)")
	}
}

// tarEntry is one entry of a tar, header and content.
type tarEntry struct {
	h    *tar.Header
	data []byte
}

func readTar(t *testing.T, r io.Reader) []tarEntry {
	t.Helper()
	var es []tarEntry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return es
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, tarEntry{h, b})
	}
}

// readTarGz reads a .tar.gz whose gzip header must carry no name and no
// time.
func readTarGz(t *testing.T, b []byte) []tarEntry {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("gzip header: name %q, time %s; want neither", zr.Name, zr.ModTime)
	}
	return readTar(t, zr)
}

// checkEntries: regular files only, sorted by name, owner 0:0, time epoch.
func (r *releaseDir) checkEntries(t *testing.T, what string, es []tarEntry) {
	t.Helper()
	for i, e := range es {
		h := e.h
		if h.Typeflag != tar.TypeReg || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(r.epoch) {
			t.Errorf("%s: %s: type %c owner %d:%d (%q:%q) time %s; want a regular file, 0:0, %s", what, h.Name, h.Typeflag, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, r.epoch)
		}
		if i > 0 && es[i-1].h.Name >= h.Name {
			t.Errorf("%s: %s after %s: not sorted", what, h.Name, es[i-1].h.Name)
		}
	}
}

// chart: the packaged chart is helm's layout (the same files as helm
// package writes, under the chart's name), with the release's version and
// image, and the pinned helm lints, shows and renders it.
func (r *releaseDir) chart(t *testing.T) {
	archive := filepath.Join(r.dir, chart+"-"+version+".tgz")
	ours := readTarGz(t, readFile(t, archive))
	r.checkEntries(t, "chart", ours)
	for _, e := range ours {
		if e.h.Mode != 0o644 {
			t.Errorf("chart: %s mode %o, want 0644 (helm's)", e.h.Name, e.h.Mode)
		}
	}

	bin, err := localcluster.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	helm := filepath.Join(bin, "helm")
	pkgDir := t.TempDir()
	run(t, nil, helm, "package", "config/helm/"+chart, "-d", pkgDir, "--version", version, "--app-version", version)
	theirs := map[string][]byte{}
	for _, e := range readTarGz(t, readFile(t, filepath.Join(pkgDir, chart+"-"+version+".tgz"))) {
		theirs[e.h.Name] = e.data
	}
	ourFiles := map[string][]byte{}
	for _, e := range ours {
		ourFiles[e.h.Name] = e.data
		want, ok := theirs[e.h.Name]
		base := strings.TrimPrefix(e.h.Name, chart+"/")
		switch {
		case !ok:
			t.Errorf("chart: %s, which helm package does not write", e.h.Name)
		case base == "Chart.yaml", base == "values.yaml", base == "README.md":
			// Changed on purpose: compared below.
		case !bytes.Equal(e.data, want):
			t.Errorf("chart: %s differs from helm package's", e.h.Name)
		}
	}
	if len(ourFiles) != len(theirs) {
		t.Errorf("chart: %d files, helm package writes %d", len(ourFiles), len(theirs))
	}

	run(t, nil, helm, "lint", "--strict", archive)
	var meta struct{ Name, Version, AppVersion string }
	if err := yaml.Unmarshal([]byte(run(t, nil, helm, "show", "chart", archive)), &meta); err != nil {
		t.Fatal(err)
	}
	if meta.Name != chart || meta.Version != version || meta.AppVersion != version {
		t.Errorf("helm show chart: %+v, want %s %s, appVersion %s", meta, chart, version, version)
	}
	var values struct {
		Image struct{ Repository, Tag string }
	}
	if err := yaml.Unmarshal([]byte(run(t, nil, helm, "show", "values", archive)), &values); err != nil {
		t.Fatal(err)
	}
	if repo := strings.TrimSuffix(image, ":"+version); values.Image.Repository != repo || values.Image.Tag != "" {
		t.Errorf("values image %+v, want repository %s and no tag (appVersion)", values.Image, repo)
	}
	rendered := run(t, nil, helm, "template", "simplewebapp", archive, "--namespace", "simplewebapp-system", "--include-crds")
	for _, want := range []string{`image: "` + image + `"`, "kind: CustomResourceDefinition", "name: simplewebapp-controller-manager"} {
		if !strings.Contains(rendered, want) {
			t.Errorf("helm template of the chart lacks %q", want)
		}
	}
	// values.yaml's default image and the README's values table name the
	// release image; nothing else in them changes.
	repo := strings.TrimSuffix(image, ":"+version)
	onlyLineDiffers(t, ourFiles, theirs, "values.yaml", `  repository: "`+repo+`"`)
	onlyLineDiffers(t, ourFiles, theirs, "README.md", "| `image.repository` | string | `\""+repo+"\"` |")
}

// onlyLineDiffers: the chart file name is helm package's but for one line,
// which starts with want.
func onlyLineDiffers(t *testing.T, ours, theirs map[string][]byte, name, want string) {
	t.Helper()
	a := strings.Split(string(ours[chart+"/"+name]), "\n")
	b := strings.Split(string(theirs[chart+"/"+name]), "\n")
	if len(a) != len(b) {
		t.Errorf("the chart's %s has %d lines, helm package's %d", name, len(a), len(b))
		return
	}
	changed := 0
	for i := range a {
		if a[i] != b[i] {
			changed++
			if !strings.HasPrefix(a[i], want) {
				t.Errorf("%s line %d: %q, helm package's %q", name, i+1, a[i], b[i])
			}
		}
	}
	if changed != 1 {
		t.Errorf("%s: %d lines differ from helm package's, want 1 (%s)", name, changed, want)
	}
}

// TestMakeRelease: make release passes VERSION, IMG (when given, else the
// docker.io/library name of the version), RELEASE_URL and RELEASE_DIR to
// hack/release.
func TestMakeRelease(t *testing.T) {
	v := strings.TrimSpace(string(readFile(t, filepath.Join(repoRoot, "VERSION"))))
	out := run(t, []string{"IMG"}, "make", "-n", "--no-print-directory", "release")
	for _, want := range []string{"go run ./hack/release ", "-version '" + v + "'", "-image 'docker.io/library/simplewebapp-operator:" + v + "'",
		"-url 'https://github.com/example/simplewebapp-operator/releases/download/v" + v + "'", "-o 'dist'"} {
		if !strings.Contains(out, want) {
			t.Errorf("make release does not pass %q:\n%s", want, out)
		}
	}
	out = run(t, nil, "make", "-n", "--no-print-directory", "release", "VERSION=1.2.3", "IMG=r.example/team/op:1.2.3", "RELEASE_URL=https://dl.example/1.2.3", "RELEASE_DIR=/tmp/x")
	for _, want := range []string{"-version '1.2.3'", "-image 'r.example/team/op:1.2.3'", "-url 'https://dl.example/1.2.3'", "-o '/tmp/x'"} {
		if !strings.Contains(out, want) {
			t.Errorf("make release VERSION=1.2.3 IMG=... RELEASE_URL=... RELEASE_DIR=... does not pass %q:\n%s", want, out)
		}
	}
}
