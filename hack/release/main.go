// Command release writes everything a release publishes into one directory
// (make release): the install YAMLs, the packaged Helm chart, the operator
// image as OCI archives, the kubectl-swa archives with their krew manifest,
// an SBOM and SHA256SUMS over all of them.
//
//	go run ./hack/release [-version X.Y.Z] [-image NAME[:TAG]] [-url BASE] [-o dist]
//
// The output is reproducible: every binary is built with -trimpath and the
// linker flags of hack/build.sh, every time in an archive, the SBOM's
// timestamp included, is SOURCE_DATE_EPOCH or else the commit time of HEAD,
// archive entries have a fixed order, mode and owner, and the SBOM's serial
// number is derived from its content. Two runs on one commit with one Go
// toolchain write the same bytes.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/kustomize/api/pkg/util"

	"example.com/simplewebapp-operator/hack/install"
	"example.com/simplewebapp-operator/hack/internal/reproducible"
)

// platform is a GOOS/GOARCH pair.
type platform struct{ os, arch string }

func (p platform) String() string { return p.os + "/" + p.arch }

// exe is the file name of a binary on p.
func (p platform) exe(name string) string {
	if p.os == "windows" {
		return name + ".exe"
	}
	return name
}

// pluginPlatforms are the platforms kubectl-swa is released for; the linux
// ones are also the image's (imageArches).
var pluginPlatforms = []platform{
	{"linux", "amd64"}, {"linux", "arm64"},
	{"darwin", "amd64"}, {"darwin", "arm64"},
	{"windows", "amd64"}, {"windows", "arm64"},
}

var imageArches = []string{"amd64", "arm64"}

const (
	operatorBin = "simplewebapp-operator"
	pluginBin   = "kubectl-swa"
	chartDir    = "config/helm/simplewebapp-operator"
	// The GitHub release of the tag v<version>: a placeholder, the project
	// has no public home; RELEASE_URL (make) or -url replaces it.
	defaultURL = "https://github.com/example/simplewebapp-operator/releases/download/v{version}"
	sumsFile   = "SHA256SUMS"
)

var semverRE = regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

func main() {
	version := flag.String("version", "", "the release's version, MAJOR.MINOR.PATCH[-PRE] (default: the VERSION file)")
	image := flag.String("image", "", "the operator image, NAME[:TAG] (default docker.io/library/"+install.ImageName+":<version>; the tag defaults to the version)")
	url := flag.String("url", "", "where the kubectl-swa archives will be downloaded from, for the krew manifest (default "+defaultURL+")")
	out := flag.String("o", "dist", "the directory to write the release into")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: go run ./hack/release [flags]\n\nWrites the release artifacts and SHA256SUMS into -o. SOURCE_DATE_EPOCH (default: the commit time of HEAD) sets every time in them; REVISION as for hack/build.sh.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*version, *image, *url, *out); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

// release is one run: what goes into the artifacts and where they are made.
type release struct {
	root     string // the checkout
	version  string
	revision string // hack/build.sh's, fixed for every build of this run
	ldflags  string
	image    string // name:tag
	url      string
	epoch    time.Time
	work     string // binaries, by platform
	stage    string // the artifacts, until they are all made
}

func run(version, image, url, out string) error {
	root, err := reproducible.RepoRoot()
	if err != nil {
		return err
	}
	if version == "" {
		b, err := os.ReadFile(filepath.Join(root, "VERSION"))
		if err != nil {
			return err
		}
		version = strings.TrimSpace(string(b))
	}
	if !semverRE.MatchString(version) {
		return fmt.Errorf("version %q: not MAJOR.MINOR.PATCH[-PRE] (krew and Helm need semantic versions)", version)
	}
	image, err = releaseImage(image, version)
	if err != nil {
		return err
	}
	if url == "" {
		url = strings.ReplaceAll(defaultURL, "{version}", version)
	}
	out, err = filepath.Abs(out)
	if err != nil {
		return err
	}
	r := &release{root: root, version: version, image: image, url: strings.TrimSuffix(url, "/")}
	if r.epoch, err = reproducible.SourceDateEpoch(root); err != nil {
		return err
	}
	if err := r.stamp(); err != nil {
		return err
	}
	if strings.HasSuffix(r.revision, "-dirty") {
		fmt.Fprintf(os.Stderr, "release: warning: uncommitted changes; the binaries carry revision %s\n", r.revision)
	}
	// Outside the checkout: files appearing in it while Go builds would
	// change the builds' VCS stamp.
	tmp, err := os.MkdirTemp("", "swa-release-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	r.work, r.stage = filepath.Join(tmp, "bin"), filepath.Join(tmp, "stage")
	if err := os.MkdirAll(r.stage, 0o755); err != nil {
		return err
	}

	steps := []struct {
		what string
		do   func() error
	}{
		{"binaries", r.buildBinaries},
		{"images", r.images},
		{"install YAMLs", r.installYAMLs},
		{"Helm chart", r.chart},
		{"kubectl-swa archives and krew manifest", r.pluginArchives},
		{"SBOM", r.sbom},
		{sumsFile, r.sums},
	}
	for _, s := range steps {
		start := time.Now()
		if err := s.do(); err != nil {
			return fmt.Errorf("%s: %w", s.what, err)
		}
		fmt.Fprintf(os.Stderr, "release: %s done in %s\n", s.what, time.Since(start).Round(time.Second))
	}
	names, err := r.publish(out)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "release: %s (image %s, revision %s, time %s): %s\n", version, image, r.revision, r.epoch.Format(time.RFC3339), out)
	for _, n := range names {
		fmt.Println(filepath.Join(out, n))
	}
	return nil
}

// releaseImage is image as name:tag, the tag defaulting to version. A digest
// is refused: the image's digest is what this build computes.
func releaseImage(image, version string) (string, error) {
	if image == "" {
		return "docker.io/library/" + install.ImageName + ":" + version, nil
	}
	name, tag, digest := util.SplitImageName(image)
	if name == "" || digest != "" {
		return "", fmt.Errorf("-image %q: want NAME[:TAG], without a digest", image)
	}
	if tag == "" {
		tag = version
	}
	return name + ":" + tag, nil
}

// stamp takes the linker flags from hack/build.sh (with VERSION set to the
// release's), so that every binary carries the version and revision the
// way make build stamps them.
func (r *release) stamp() error {
	cmd := exec.Command("bash", "hack/build.sh", "--ldflags")
	cmd.Dir = r.root
	cmd.Env = append(os.Environ(), "VERSION="+r.version)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("hack/build.sh --ldflags: %w", err)
	}
	r.ldflags = strings.TrimSpace(string(b))
	m := regexp.MustCompile(`-X main\.revision=(\S+)`).FindStringSubmatch(r.ldflags)
	if m == nil || !strings.Contains(r.ldflags, "version.Operator="+r.version+" ") {
		return fmt.Errorf("hack/build.sh --ldflags: no revision or version %s in %q", r.version, r.ldflags)
	}
	r.revision = m[1]
	return nil
}

// env is the environment of every build and hack/ program this run starts.
func (r *release) env(extra ...string) []string {
	return append(os.Environ(), append([]string{
		"VERSION=" + r.version,
		"REVISION=" + r.revision,
		"SOURCE_DATE_EPOCH=" + strconv.FormatInt(r.epoch.Unix(), 10),
		"CGO_ENABLED=0",
		// No VCS stamp: go build's vcs.modified counts untracked files, which
		// would make two builds of one commit differ. The revision is in the
		// binaries anyway, by hack/build.sh's -X.
		"GOFLAGS=" + strings.TrimSpace(os.Getenv("GOFLAGS")+" -buildvcs=false"),
	}, extra...)...)
}

func (r *release) binDir(p platform) string { return filepath.Join(r.work, p.os+"_"+p.arch) }

// buildBinaries builds both binaries for linux with hack/build.sh (what the
// images hold, the linux kubectl-swa archives take the same plugin), and
// kubectl-swa alone for the other platforms, with hack/build.sh's flags.
func (r *release) buildBinaries() error {
	for _, p := range pluginPlatforms {
		dir := r.binDir(p)
		var cmd *exec.Cmd
		if p.os == "linux" {
			cmd = exec.Command("bash", "hack/build.sh", dir)
		} else {
			cmd = exec.Command("go", "build", "-trimpath", "-ldflags", r.ldflags, "-o", filepath.Join(dir, p.exe(pluginBin)), "./cmd/kubectl-swa")
		}
		cmd.Dir = r.root
		cmd.Env = r.env("GOOS="+p.os, "GOARCH="+p.arch)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		fmt.Fprintf(os.Stderr, "release: built %s in %s\n", p, time.Since(start).Round(time.Second))
	}
	return nil
}

// imageArchive is the file name of the image for linux/arch.
func (r *release) imageArchive(arch string) string {
	return install.ImageName + "_" + r.version + "_linux_" + arch + ".oci.tar"
}

// images writes the image for each of imageArches with hack/image, from the
// binaries built above.
func (r *release) images() error {
	for _, arch := range imageArches {
		cmd := exec.Command("go", "run", "./hack/image", "-bin", r.binDir(platform{"linux", arch}), "-arch", arch,
			"-image", r.image, "-o", filepath.Join(r.stage, r.imageArchive(arch)))
		cmd.Dir = r.root
		cmd.Env = r.env()
		cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("hack/image -arch %s: %w", arch, err)
		}
	}
	return nil
}

// installYAMLs renders config/default (what make build-installer writes)
// and config/namespaced with the release image.
func (r *release) installYAMLs() error {
	for dir, name := range map[string]string{"config/default": "install.yaml", "config/namespaced": "install-namespaced.yaml"} {
		b, err := install.Kustomize(filepath.Join(r.root, dir), r.image)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(r.stage, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// sums writes SHA256SUMS over every artifact, in the format of sha256sum
// (two spaces, sorted by name), for `sha256sum -c SHA256SUMS`.
func (r *release) sums() error {
	names, err := r.artifacts()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	for _, n := range names {
		sum, err := fileSHA256(filepath.Join(r.stage, n))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, n)
	}
	return os.WriteFile(filepath.Join(r.stage, sumsFile), b.Bytes(), 0o644)
}

// artifacts are the staged files but SHA256SUMS, sorted.
func (r *release) artifacts() ([]string, error) {
	entries, err := os.ReadDir(r.stage)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if !e.Type().IsRegular() {
			return nil, fmt.Errorf("%s in the stage is not a regular file", e.Name())
		}
		if e.Name() != sumsFile {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// publish copies the staged artifacts into out, each replaced in one
// rename, SHA256SUMS last: a failed run leaves no SHA256SUMS that lists
// files it did not write. Other files in out stay.
func (r *release) publish(out string) ([]string, error) {
	names, err := r.artifacts()
	if err != nil {
		return nil, err
	}
	names = append(names, sumsFile)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	for _, n := range names {
		if err := copyFile(filepath.Join(r.stage, n), filepath.Join(out, n)); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// copyFile publishes one staged file (reproducible.WriteFile).
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	return reproducible.WriteFile(to, in)
}

func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
