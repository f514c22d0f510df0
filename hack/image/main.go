// Command image builds the operator's container image as an OCI image
// archive (an OCI image layout in a tar, what `ctr images import` and
// `skopeo copy oci-archive:` read), without a container engine: for
// `make image`, on machines and CI runners that have none.
//
//	go run ./hack/image [-arch amd64] [-image simplewebapp-operator:<VERSION>] [-o dist/...oci.tar] [-bin DIR]
//	go run ./hack/image -web-standin [-o dist/web-standin-<arch>.oci.tar]
//
// The image is the Dockerfile's final stage without the distroless base
// image: the binaries of hack/build.sh (GOOS=linux, GOARCH=-arch) at
// /simplewebapp-operator and /kubectl-swa, and of distroless/static:nonroot
// only what the operator uses (/etc/passwd and /etc/group with root, nobody
// and nonroot 65532, /root, /home/nonroot, /tmp). It has one layer. Every
// time in it is SOURCE_DATE_EPOCH, by default the commit time of HEAD, so
// two builds of one commit are the same image, to the digest, which it
// prints on stdout.
//
// With -web-standin it builds instead a local stand-in of the web server
// image the packages run, from this machine's Debian nginx (standin.go), for
// clusters that reach no registry.
package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"example.com/simplewebapp-operator/hack/internal/reproducible"
)

// The image's name in config/default (hack/install.ImageName, not imported:
// that package brings kustomize into this build).
const imageName = "simplewebapp-operator"

// The binaries hack/build.sh builds, at the root of the image.
var binaries = []string{"simplewebapp-operator", "kubectl-swa"}

// What the Dockerfile's image gets from distroless/static:nonroot and keeps.
const (
	nonroot = 65532
	// distroless' PATH, unused (the entrypoint is absolute), kept so that
	// the config is the Dockerfile image's.
	envPATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// The base's WORKDIR, which the Dockerfile does not change.
	workingDir = "/home/nonroot"
	// distroless' user and group databases, verbatim: container runtimes
	// take $HOME and supplementary groups from them, and os/user (pure Go
	// here) reads them when $HOME is unset, as controller-runtime's
	// ~/.kube/config lookup does.
	etcPasswd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	etcGroup = "root:x:0:\nnobody:x:65534:\ntty:x:5:\nstaff:x:50:\nnonroot:x:65532:\n"
)

// arches are the GOARCH values the image can be built for (distroless'
// platforms, 32-bit arm left out), with the ELF machine of their binaries
// and the OCI platform variant distroless gives them.
var arches = map[string]struct {
	machine elf.Machine
	data    elf.Data
	variant string
}{
	"amd64":   {elf.EM_X86_64, elf.ELFDATA2LSB, ""},
	"arm64":   {elf.EM_AARCH64, elf.ELFDATA2LSB, "v8"},
	"ppc64le": {elf.EM_PPC64, elf.ELFDATA2LSB, ""},
	"riscv64": {elf.EM_RISCV, elf.ELFDATA2LSB, ""},
	"s390x":   {elf.EM_S390, elf.ELFDATA2MSB, ""},
}

func main() {
	arch := flag.String("arch", runtime.GOARCH, "GOARCH of the image (GOOS is linux): "+strings.Join(sortedArches(), ", "))
	image := flag.String("image", "", "the image's name, in the archive's org.opencontainers.image.ref.name (default "+imageName+":<VERSION>, the Makefile's IMG)")
	out := flag.String("o", "", "the OCI archive to write (default dist/"+imageName+"-image-<arch>.oci.tar)")
	bin := flag.String("bin", "", "take the binaries from `DIR`, where hack/build.sh of this checkout wrote them for linux/<arch>, instead of running it")
	web := flag.Bool("web-standin", false, "build instead the local stand-in of the packages' web server image ("+webImage+") from this machine's Debian nginx: -image defaults to that name, -o to dist/"+webArchivePrefix+"<arch>.oci.tar")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./hack/image [flags]\n\nBuilds the operator image as an OCI archive from hack/build.sh's binaries, without a container engine, and prints its digest.\nSOURCE_DATE_EPOCH (default: the commit time of HEAD) sets every time in it; VERSION and REVISION as for hack/build.sh.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	run := run
	if *web {
		if *bin != "" {
			fmt.Fprintln(os.Stderr, "image: -bin is for the operator image, not -web-standin")
			os.Exit(2)
		}
		run = func(arch, image, out, _ string) error { return runWebStandin(arch, image, out) }
	}
	if err := run(*arch, *image, *out, *bin); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func sortedArches() []string {
	var out []string
	for a := range arches {
		out = append(out, a)
	}
	slices.Sort(out)
	return out
}

func run(arch, image, out, bin string) error {
	if _, ok := arches[arch]; !ok {
		return fmt.Errorf("-arch %q: one of %s", arch, strings.Join(sortedArches(), ", "))
	}
	root, err := reproducible.RepoRoot()
	if err != nil {
		return err
	}
	// hack/build.sh decides the version and revision the binaries carry; the
	// labels say the same, and the build below gets this revision so that a
	// file saved in between cannot make them differ.
	version, revision, err := stamps(root)
	if err != nil {
		return err
	}
	if image == "" {
		image = imageName + ":" + version
	}
	ref, err := name.NewTag(image)
	if err != nil {
		return fmt.Errorf("-image %q: a name[:tag] (no digest: the digest is what this computes): %w", image, err)
	}
	if out == "" {
		out = filepath.Join(root, "dist", imageName+"-image-"+arch+".oci.tar")
	}
	epoch, err := sourceDateEpoch(root)
	if err != nil {
		return err
	}

	if bin == "" {
		tmp, err := os.MkdirTemp("", "swa-image-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		cmd := exec.Command("bash", "hack/build.sh", tmp)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "REVISION="+revision)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("hack/build.sh for linux/%s: %w", arch, err)
		}
		bin = tmp
	}
	files := map[string][]byte{}
	for _, b := range binaries {
		data, err := os.ReadFile(filepath.Join(bin, b))
		if err != nil {
			return err
		}
		if err := checkBinary(data, arch); err != nil {
			return fmt.Errorf("%s: %w", filepath.Join(bin, b), err)
		}
		files[b] = data
	}

	img, err := build(files, arch, version, revision, epoch)
	if err != nil {
		return err
	}
	digest, err := writeArchive(out, img, ref, image, epoch, nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "image: %s: %s (linux/%s, %s, revision %s, time %s)\n", out, image, arch, version, revision, epoch.UTC().Format(time.RFC3339))
	fmt.Println(digest)
	return nil
}

// stamps reads the version and revision that hack/build.sh stamps into the
// binaries from its linker flags.
func stamps(root string) (version, revision string, err error) {
	cmd := exec.Command("bash", "hack/build.sh", "--ldflags")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	ldflags, err := cmd.Output()
	if err != nil {
		return "", "", fmt.Errorf("hack/build.sh --ldflags: %w", err)
	}
	v := regexp.MustCompile(`-X \S+/internal/version\.Operator=(\S+)`).FindSubmatch(ldflags)
	r := regexp.MustCompile(`-X main\.revision=(\S+)`).FindSubmatch(ldflags)
	if v == nil || r == nil {
		return "", "", fmt.Errorf("hack/build.sh --ldflags: no version or revision in %q", ldflags)
	}
	return string(v[1]), string(r[1]), nil
}

// sourceDateEpoch is reproducible.SourceDateEpoch, with the Unix epoch when
// there is no commit time: an image built from a tarball of the source is
// still reproducible.
func sourceDateEpoch(root string) (time.Time, error) {
	t, err := reproducible.SourceDateEpoch(root)
	if errors.Is(err, reproducible.ErrNoCommitTime) {
		return time.Unix(0, 0).UTC(), nil
	}
	return t, err
}

// checkBinary refuses what the image cannot run: another architecture (a
// -bin built for the wrong GOARCH), or a dynamically linked binary (no
// loader or libc in the image).
func checkBinary(data []byte, arch string) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not a Linux ELF binary: %w", err)
	}
	want := arches[arch]
	if f.Machine != want.machine || f.Data != want.data {
		return fmt.Errorf("built for %s (%s), not %s: build it with GOOS=linux GOARCH=%s", f.Machine, f.Data, arch, arch)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return errors.New("dynamically linked (PT_INTERP): the image has no libc; hack/build.sh builds with CGO_ENABLED=0")
		}
	}
	return nil
}

// entry is one file, directory or symbolic link of the layer.
type entry struct {
	name     string // without a leading "/"; directories end in "/"
	mode     int64
	uid, gid int
	data     []byte
	link     string // a symbolic link's target
}

// layerEntries is the image's file system, in tar order (parents first).
func layerEntries(bins map[string][]byte) []entry {
	es := []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(etcGroup)},
		{name: "etc/passwd", mode: 0o644, data: []byte(etcPasswd)},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: nonroot, gid: nonroot},
		{name: "root/", mode: 0o700},
		// Sticky and world-writable, as in distroless: with a read-only root
		// file system (the Deployment's) it is not writable anyway.
		{name: "tmp/", mode: 0o1777},
	}
	for _, b := range binaries {
		es = append(es, entry{name: b, mode: 0o755, data: bins[b]})
	}
	slices.SortFunc(es, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	return es
}

// build assembles the image: one layer, the config of the Dockerfile's
// final stage plus the OCI version and revision labels.
func build(bins map[string][]byte, arch, version, revision string, epoch time.Time) (v1.Image, error) {
	return oneLayerImage(layerEntries(bins), arch, epoch,
		"hack/image: "+strings.Join(binaries, ", ")+" (hack/build.sh), /etc/passwd, /etc/group, /root, /home/nonroot, /tmp",
		v1.Config{
			User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
			Entrypoint: []string{"/simplewebapp-operator"},
			WorkingDir: workingDir,
			Env:        []string{envPATH},
			Labels: map[string]string{
				"org.opencontainers.image.version":  version,
				"org.opencontainers.image.revision": revision,
			},
		})
}

// oneLayerImage is an OCI image for linux/arch of es as its one layer and
// the config c, created at epoch.
func oneLayerImage(es []entry, arch string, epoch time.Time, createdBy string, c v1.Config) (v1.Image, error) {
	layer, err := layerOf(es, epoch)
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: epoch}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{Created: created, CreatedBy: createdBy}})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = created
	cf.OS, cf.Architecture, cf.Variant = "linux", arch, arches[arch].variant
	cf.Config = c
	return mutate.ConfigFile(img, cf)
}

// layerOf is the gzipped tar of es, in their order, every time epoch.
func layerOf(es []entry, epoch time.Time) (v1.Layer, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, e := range es {
		h := &tar.Header{
			Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: epoch,
			Typeflag: tar.TypeReg, Size: int64(len(e.data)), Format: tar.FormatPAX,
		}
		switch {
		case strings.HasSuffix(e.name, "/"):
			h.Typeflag, h.Size = tar.TypeDir, 0
		case e.link != "":
			h.Typeflag, h.Size, h.Linkname = tar.TypeSymlink, 0, e.link
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	// Compressed here, not by ggcr, so that the level (and so the digest)
	// is this file's choice.
	gz, err := reproducible.Gzip(raw.Bytes())
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// ociArchive is an OCI image layout holding img, in a tar: oci-layout,
// index.json naming img, the blobs. Every header has the same time and
// owner, so the bytes depend on the image only.
func ociArchive(img v1.Image, ref name.Tag, image string, epoch time.Time, annotations map[string]string) ([]byte, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	// ref.name is the name as given. containerd names the image it imports
	// by io.containerd.image.name before ref.name, and the kubelet asks for
	// the normalized name (docker.io/library/... for a short one): without it
	// a Pod's `image: simplewebapp-operator:0.3.0` would not find the image
	// that `ctr images import` loaded.
	registry := ref.RegistryStr()
	if registry == name.DefaultRegistry {
		registry = "docker.io"
	}
	ann := map[string]string{
		"org.opencontainers.image.ref.name": image,
		"io.containerd.image.name":          registry + "/" + ref.RepositoryStr() + ":" + ref.TagStr(),
	}
	for k, v := range annotations {
		ann[k] = v
	}
	idx := mutate.AppendManifests(empty.Index, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{
		Platform:    cf.Platform(),
		Annotations: ann,
	}})
	index, err := idx.RawManifest()
	if err != nil {
		return nil, err
	}

	manifest, err := img.RawManifest()
	if err != nil {
		return nil, err
	}
	config, err := img.RawConfigFile()
	if err != nil {
		return nil, err
	}
	configDigest, err := img.ConfigName()
	if err != nil {
		return nil, err
	}
	blobs := map[string][]byte{
		digest.Hex:       manifest,
		configDigest.Hex: config,
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		rc, err := l.Compressed()
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, err
		}
		blobs[d.Hex] = b
	}
	layout, err := json.Marshal(map[string]string{"imageLayoutVersion": "1.0.0"})
	if err != nil {
		return nil, err
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(name string, data []byte) error {
		h := &tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg, Size: int64(len(data)), ModTime: epoch, Format: tar.FormatPAX}
		if strings.HasSuffix(name, "/") {
			h.Mode, h.Typeflag, h.Size = 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := add("oci-layout", layout); err != nil {
		return nil, err
	}
	if err := add("index.json", index); err != nil {
		return nil, err
	}
	if err := add("blobs/", nil); err != nil {
		return nil, err
	}
	if err := add("blobs/sha256/", nil); err != nil {
		return nil, err
	}
	hexes := make([]string, 0, len(blobs))
	for h := range blobs {
		hexes = append(hexes, h)
	}
	slices.Sort(hexes)
	for _, h := range hexes {
		if err := add(path.Join("blobs", "sha256", h), blobs[h]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeArchive writes img to out as an OCI archive (ociArchive) and
// returns its digest.
func writeArchive(out string, img v1.Image, ref name.Tag, image string, epoch time.Time, annotations map[string]string) (v1.Hash, error) {
	archive, err := ociArchive(img, ref, image, epoch, annotations)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := reproducible.WriteFile(out, bytes.NewReader(archive)); err != nil {
		return v1.Hash{}, err
	}
	return img.Digest()
}
