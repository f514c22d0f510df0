package install_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// imageBin is hack/build.sh's output for linux/GOARCH: on Linux the release
// build the other tests use, built once for the package.
var imageBin = sync.OnceValues(func() (string, error) {
	if runtime.GOOS == "linux" {
		return releaseBin()
	}
	dir := filepath.Join(tmpDir, "image-bin")
	cmd := exec.Command("bash", "hack/build.sh", dir)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOOS=linux")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{err: err, out: string(out)}
	}
	return dir, nil
})

// elfMachines: the ELF machine of a linux/GOARCH binary.
var elfMachines = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "ppc64le": elf.EM_PPC64, "riscv64": elf.EM_RISCV, "s390x": elf.EM_S390,
}

// TestImage: `make image` (hack/image) writes the Dockerfile's final stage
// as an OCI archive without a container engine. Read back with ggcr's
// layout reader: the config (user 65532:65532, entrypoint, labels), exactly
// the expected files (the two binaries hack/build.sh built, static, for the
// requested architecture; distroless' passwd and group; no shell), and two
// builds of one commit give the same image, to the digest.
func TestImage(t *testing.T) {
	bin, err := imageBin()
	if err != nil {
		t.Fatal(err)
	}
	arch := runtime.GOARCH
	if _, ok := elfMachines[arch]; !ok {
		t.Fatalf("hack/image builds no image for %s: add its ELF machine to elfMachines", arch)
	}
	v := projectVersion(t)
	named := "registry.example:5000/team/simplewebapp-operator:" + v
	dir := t.TempDir()

	// Two builds from the same binaries: one named, one with the default
	// name (the Makefile's IMG).
	archiveA := filepath.Join(dir, "a.oci.tar")
	digestA := strings.TrimSpace(runIn(t, nil, "go", "run", "./hack/image", "-bin", bin, "-arch", arch, "-image", named, "-o", archiveA))
	archiveB := filepath.Join(dir, "b", "image.oci.tar")
	digestB := strings.TrimSpace(runIn(t, nil, "go", "run", "./hack/image", "-bin", bin, "-arch", arch, "-o", archiveB))
	if !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(digestA) {
		t.Fatalf("hack/image printed %q, want the digest", digestA)
	}

	idx, files := readArchive(t, archiveA)
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json: %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.Digest.String() != digestA {
		t.Errorf("index.json names %s, hack/image printed %s", desc.Digest, digestA)
	}
	if desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s", desc.MediaType)
	}
	if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != arch {
		t.Errorf("index.json platform %v, want linux/%s", desc.Platform, arch)
	}
	if got := desc.Annotations["org.opencontainers.image.ref.name"]; got != named {
		t.Errorf("ref.name %q, want %q", got, named)
	}
	if got := desc.Annotations["io.containerd.image.name"]; got != named {
		t.Errorf("io.containerd.image.name %q, want %q", got, named)
	}
	img, err := idx.Image(desc.Digest)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("config", func(t *testing.T) {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if c.User != "65532:65532" {
			t.Errorf("User %q, want 65532:65532 (numeric: the Deployment's runAsNonRoot checks it)", c.User)
		}
		if !slices.Equal(c.Entrypoint, []string{"/simplewebapp-operator"}) || len(c.Cmd) != 0 {
			t.Errorf("Entrypoint %q Cmd %q", c.Entrypoint, c.Cmd)
		}
		if c.WorkingDir != "/home/nonroot" {
			t.Errorf("WorkingDir %q, want distroless nonroot's /home/nonroot", c.WorkingDir)
		}
		if !slices.Equal(c.Env, []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}) {
			t.Errorf("Env %q", c.Env)
		}
		if cf.OS != "linux" || cf.Architecture != arch {
			t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, arch)
		}
		if got := c.Labels["org.opencontainers.image.version"]; got != v {
			t.Errorf("version label %q, VERSION %q", got, v)
		}
		head := strings.TrimSpace(runIn(t, nil, "git", "rev-parse", "--short=12", "HEAD"))
		if got := c.Labels["org.opencontainers.image.revision"]; strings.TrimSuffix(got, "-dirty") != head {
			t.Errorf("revision label %q, git HEAD %s", got, head)
		}
		want := commitTime(t)
		if !cf.Created.Equal(want) {
			t.Errorf("created %s, want %s (SOURCE_DATE_EPOCH or the commit time)", cf.Created.Time, want)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if m.Config.MediaType != types.OCIConfigJSON || len(m.Layers) != 1 || m.Layers[0].MediaType != types.OCILayer {
			t.Errorf("manifest: config %s, layers %v", m.Config.MediaType, m.Layers)
		}
	})

	t.Run("files", func(t *testing.T) {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		entries, data := layerFiles(t, img)
		type want struct {
			dir      bool
			mode     int64
			uid, gid int
		}
		wantFiles := map[string]want{
			"etc/":                  {dir: true, mode: 0o755},
			"etc/group":             {mode: 0o644},
			"etc/passwd":            {mode: 0o644},
			"home/":                 {dir: true, mode: 0o755},
			"home/nonroot/":         {dir: true, mode: 0o700, uid: 65532, gid: 65532},
			"root/":                 {dir: true, mode: 0o700},
			"tmp/":                  {dir: true, mode: 0o1777},
			"simplewebapp-operator": {mode: 0o755},
			"kubectl-swa":           {mode: 0o755},
		}
		var names []string
		for _, h := range entries {
			names = append(names, h.Name)
			w, ok := wantFiles[h.Name]
			if !ok {
				t.Errorf("the layer holds %s (%c), which the image should not", h.Name, h.Typeflag)
				continue
			}
			if (h.Typeflag == tar.TypeDir) != w.dir || (!w.dir && h.Typeflag != tar.TypeReg) {
				t.Errorf("%s: type %c", h.Name, h.Typeflag)
			}
			if h.Mode != w.mode || h.Uid != w.uid || h.Gid != w.gid {
				t.Errorf("%s: mode %o owner %d:%d, want %o %d:%d", h.Name, h.Mode, h.Uid, h.Gid, w.mode, w.uid, w.gid)
			}
			if !h.ModTime.Equal(cf.Created.Time) {
				t.Errorf("%s: mtime %s, want the image's time %s", h.Name, h.ModTime, cf.Created.Time)
			}
		}
		for n := range wantFiles {
			if !slices.Contains(names, n) {
				t.Errorf("the layer lacks %s", n)
			}
		}
		for _, n := range names {
			if base := path.Base(n); slices.Contains([]string{"sh", "bash", "dash", "ash", "zsh", "busybox", "apt", "apt-get", "dpkg", "apk"}, base) || strings.HasPrefix(n, "bin/") || strings.HasPrefix(n, "usr/") {
				t.Errorf("the image holds %s: no shell, no package manager", n)
			}
		}
		passwd := string(data["etc/passwd"])
		for _, line := range []string{"root:x:0:0:root:/root:/sbin/nologin", "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin"} {
			if !slices.Contains(strings.Split(passwd, "\n"), line) {
				t.Errorf("/etc/passwd lacks %q:\n%s", line, passwd)
			}
		}
		if group := string(data["etc/group"]); !slices.Contains(strings.Split(group, "\n"), "nonroot:x:65532:") || !slices.Contains(strings.Split(group, "\n"), "root:x:0:") {
			t.Errorf("/etc/group lacks root or nonroot 65532:\n%s", group)
		}

		// The binaries are hack/build.sh's, static, for linux/arch.
		for _, b := range []string{"simplewebapp-operator", "kubectl-swa"} {
			built, err := os.ReadFile(filepath.Join(bin, b))
			if err != nil {
				t.Fatal(err)
			}
			if sha256.Sum256(data[b]) != sha256.Sum256(built) {
				t.Errorf("/%s is not the binary hack/build.sh built", b)
			}
			f, err := elf.NewFile(bytes.NewReader(data[b]))
			if err != nil {
				t.Errorf("/%s: not ELF: %v", b, err)
				continue
			}
			if f.Machine != elfMachines[arch] || f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
				t.Errorf("/%s: %s %s, want an executable for %s (%s)", b, f.Machine, f.Type, arch, elfMachines[arch])
			}
			for _, p := range f.Progs {
				if p.Type == elf.PT_INTERP {
					t.Errorf("/%s has a PT_INTERP program header: dynamically linked, and the image has no libc", b)
				}
			}
			if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
				t.Errorf("/%s needs shared libraries %v", b, libs)
			}
		}
	})

	t.Run("reproducible", func(t *testing.T) {
		if digestB != digestA {
			t.Fatalf("two builds of one commit: %s and %s", digestA, digestB)
		}
		idxB, filesB := readArchive(t, archiveB)
		for name, a := range files {
			if name != "index.json" && !bytes.Equal(a, filesB[name]) {
				t.Errorf("the archives differ in %s", name)
			}
		}
		if len(files) != len(filesB) {
			t.Errorf("the archives hold %d and %d files", len(files), len(filesB))
		}
		// The default name is the Makefile's IMG; containerd gets it
		// normalized, as the kubelet asks for it.
		imB, err := idxB.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		ann := imB.Manifests[0].Annotations
		if got := ann["org.opencontainers.image.ref.name"]; got != defaultImage(t) {
			t.Errorf("default ref.name %q, want %q", got, defaultImage(t))
		}
		if got := ann["io.containerd.image.name"]; got != "docker.io/library/"+defaultImage(t) {
			t.Errorf("default io.containerd.image.name %q, want docker.io/library/%s", got, defaultImage(t))
		}
	})

	t.Run("refuses another architecture's binaries", func(t *testing.T) {
		other := "arm64"
		if arch == other {
			other = "amd64"
		}
		out := filepath.Join(t.TempDir(), "wrong.oci.tar")
		cmd := exec.CommandContext(t.Context(), "go", "run", "./hack/image", "-bin", bin, "-arch", other, "-o", out)
		cmd.Dir = repoRoot
		msg, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(msg), "not "+other) {
			t.Errorf("hack/image -arch %s with %s binaries: %v\n%s", other, arch, err, msg)
		}
		if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("it wrote %s anyway (%v)", out, err)
		}
	})

	t.Run("make image", func(t *testing.T) {
		out := runIn(t, nil, "make", "-n", "--no-print-directory", "image")
		hostArch := strings.TrimSpace(runIn(t, nil, "go", "env", "GOHOSTARCH"))
		for _, want := range []string{"go run ./hack/image ", "-arch " + hostArch + " ", "-image " + defaultImage(t) + " ", "-o dist/simplewebapp-operator-image-" + hostArch + ".oci.tar"} {
			if !strings.Contains(out, want) {
				t.Errorf("make image does not pass %q:\n%s", want, out)
			}
		}
		out = runIn(t, nil, "make", "-n", "--no-print-directory", "image", "IMG=r.example/swa:1", "ARCH=arm64")
		for _, want := range []string{"-arch arm64 ", "-image r.example/swa:1 ", "-o dist/simplewebapp-operator-image-arm64.oci.tar"} {
			if !strings.Contains(out, want) {
				t.Errorf("make image IMG=r.example/swa:1 ARCH=arm64 does not pass %q:\n%s", want, out)
			}
		}
	})
}

// readArchive unpacks an OCI archive and opens it with ggcr's layout
// reader; it also returns the archive's files by name.
func readArchive(t *testing.T, archive string) (v1.ImageIndex, map[string][]byte) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", archive, err)
		}
		if !filepath.IsLocal(h.Name) {
			t.Fatalf("%s: entry %q outside the layout", archive, h.Name)
		}
		p := filepath.Join(dir, h.Name) //nolint:gosec // G305: h.Name is local (filepath.IsLocal above)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		case tar.TypeReg:
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: %s is of type %c", archive, h.Name, h.Typeflag)
		}
	}
	var l struct{ ImageLayoutVersion string }
	if err := json.Unmarshal(files["oci-layout"], &l); err != nil || l.ImageLayoutVersion != "1.0.0" {
		t.Errorf("oci-layout %q (%v)", files["oci-layout"], err)
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("%s is no OCI image layout: %v", archive, err)
	}
	return idx, files
}

// layerFiles reads the image's one layer: its headers in order, and the
// regular files' contents by name.
func layerFiles(t *testing.T, img v1.Image) ([]*tar.Header, map[string][]byte) {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var hs []*tar.Header
	data := map[string][]byte{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
		if h.Typeflag == tar.TypeReg {
			if data[h.Name], err = io.ReadAll(tr); err != nil {
				t.Fatal(err)
			}
		}
	}
	return hs, data
}

// commitTime is the time every file and the config carry.
func commitTime(t *testing.T) time.Time {
	t.Helper()
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		s = strings.TrimSpace(runIn(t, nil, "git", "log", "-1", "--format=%ct", "HEAD"))
	}
	sec, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(sec, 0)
}
