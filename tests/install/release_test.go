package install_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	sigsyaml "sigs.k8s.io/yaml"

	"example.com/simplewebapp-operator/internal/version"
)

// releaseBin builds the operator and the plugin once per test binary with
// hack/build.sh, the release build, and returns the directory.
var releaseBin = sync.OnceValues(func() (string, error) {
	dir := filepath.Join(tmpDir, "release-bin")
	cmd := exec.Command("bash", "hack/build.sh", dir)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{err: err, out: string(out)}
	}
	return dir, nil
})

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return "hack/build.sh: " + e.err.Error() + "\n" + e.out }

func releaseOperator(t *testing.T) string {
	t.Helper()
	dir, err := releaseBin()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "simplewebapp-operator")
}

// runIn runs a command in the repository root and returns its stdout.
func runIn(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s %s: %v\n%s%s", name, strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// buildInstaller runs `make build-installer` (with IMG unless empty) into a
// temporary file and returns what it wrote.
func buildInstaller(t *testing.T, img string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "install.yaml")
	args := []string{"--no-print-directory", "build-installer", "INSTALLER=" + out}
	if img != "" {
		args = append(args, "IMG="+img)
	}
	runIn(t, nil, "make", args...)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func operatorImage(t *testing.T, installYAML []byte) string {
	t.Helper()
	dep := as[appsv1.Deployment](t, find(t, parse(t, installYAML), "Deployment", deploymentName))
	return dep.Spec.Template.Spec.Containers[0].Image
}

// TestVersionAgrees: the VERSION file is the one version, and every place
// that carries it says the same: the release binary's --version (stamped by
// hack/build.sh), the operator's default when not stamped (what go test and
// go run report), the chart's version and appVersion, the chart's default
// image tag, config/default's image tag, and dist/install.yaml's image.
func TestVersionAgrees(t *testing.T) {
	v := projectVersion(t)
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`).MatchString(v) {
		t.Fatalf("VERSION %q is not MAJOR.MINOR.PATCH[-PRE]", v)
	}

	out := strings.TrimSpace(runIn(t, nil, releaseOperator(t), "--version"))
	m := regexp.MustCompile(`^simplewebapp-operator (\S+) \(revision (\S+), (go\S+)\)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("--version printed %q", out)
	}
	if m[1] != v {
		t.Errorf("--version: %s, VERSION %s", m[1], v)
	}
	if head := strings.TrimSpace(runIn(t, nil, "git", "rev-parse", "--short=12", "HEAD")); strings.TrimSuffix(m[2], "-dirty") != head {
		t.Errorf("--version revision %s, git HEAD %s", m[2], head)
	}
	t.Logf("--version: %s", out)

	if version.Operator != v {
		t.Errorf("version.Operator defaults to %q, VERSION is %q: make sync-version", version.Operator, v)
	}

	var chart struct{ Version, AppVersion string }
	if err := sigsyaml.Unmarshal(readFile(t, chartDir+"/Chart.yaml"), &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != v || chart.AppVersion != v {
		t.Errorf("Chart.yaml version %q, appVersion %q; VERSION %q: make sync-version", chart.Version, chart.AppVersion, v)
	}
	helmDep := as[appsv1.Deployment](t, find(t, parse(t, helmTemplate(t, chartRelease, namespace)), "Deployment", deploymentName))
	if got := helmDep.Spec.Template.Spec.Containers[0].Image; got != defaultImage(t) {
		t.Errorf("the chart's default image %q, want %q (tag = appVersion)", got, defaultImage(t))
	}

	if got := operatorImage(t, kustomizeDefault(t, "")); got != defaultImage(t) {
		t.Errorf("config/default's image %q, want %q", got, defaultImage(t))
	}
	if got := operatorImage(t, buildInstaller(t, "")); got != defaultImage(t) {
		t.Errorf("make build-installer: image %q, want %q", got, defaultImage(t))
	}
	if out := runIn(t, nil, "make", "-n", "--no-print-directory", "docker-build"); !strings.Contains(out, " -t "+defaultImage(t)+" ") {
		t.Errorf("make docker-build does not tag %s:\n%s", defaultImage(t), out)
	}
}

// TestBuildInstaller: dist/install.yaml is config/default with IMG, and an IMG
// with a digest pins the Deployment's image by that digest.
func TestBuildInstaller(t *testing.T) {
	base := buildInstaller(t, "")
	if got := keys(parse(t, base)); !slices.Equal(got, wantDefault) {
		t.Fatalf("install.yaml holds\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(wantDefault, "\n  "))
	}
	if !bytes.Equal(base, kustomizeDefault(t, "")) {
		t.Error("make build-installer differs from config/default")
	}
	digest := "sha256:" + strings.Repeat("0123456789abcdef", 4)
	const repo = "registry.example:5000/team/simplewebapp-operator"
	pinned := buildInstaller(t, repo+":"+projectVersion(t)+"@"+digest)
	got := operatorImage(t, pinned)
	if got != repo+"@"+digest && got != repo+":"+projectVersion(t)+"@"+digest {
		t.Errorf("IMG with a digest: image %q, want %s[:tag]@%s", got, repo, digest)
	}
	if want := bytes.Replace(base, []byte("image: "+defaultImage(t)+"\n"), []byte("image: "+got+"\n"), 1); !bytes.Equal(pinned, want) {
		t.Errorf("IMG with a digest changes more than the image:\n%s", pinned)
	}
	t.Logf("IMG=%s:%s@%s → image: %s", repo, projectVersion(t), digest, got)
}

// TestOneBuild: the Makefile, the Dockerfile and CI all build through
// hack/build.sh, so the image holds the binary that CI tested, with the same
// flags; nothing else runs `go build` for the operator.
func TestOneBuild(t *testing.T) {
	ldflags := strings.TrimSpace(runIn(t, nil, "bash", "hack/build.sh", "--ldflags"))
	for _, want := range []string{"-s -w", "-X example.com/simplewebapp-operator/internal/version.Operator=" + projectVersion(t), "-X main.revision="} {
		if !strings.Contains(ldflags, want) {
			t.Errorf("hack/build.sh --ldflags = %q, missing %q", ldflags, want)
		}
	}

	// -X does nothing, silently, when the variable it names has moved: a
	// build with another VERSION must report that version.
	stamped := filepath.Join(t.TempDir(), "stamped")
	runIn(t, []string{"VERSION=9.9.9-stamp"}, "bash", "hack/build.sh", stamped)
	if got := runIn(t, nil, filepath.Join(stamped, "simplewebapp-operator"), "--version"); !strings.HasPrefix(got, "simplewebapp-operator 9.9.9-stamp ") {
		t.Errorf("built with VERSION=9.9.9-stamp, --version says %q", got)
	}

	// Test failpoints stay out of the release build.
	if bin, err := os.ReadFile(releaseOperator(t)); err != nil || bytes.Contains(bin, []byte("SWA_TEST_EXIT_AFTER_WRITES")) {
		t.Errorf("the release binary holds the test failpoint SWA_TEST_EXIT_AFTER_WRITES (%v)", err)
	}

	// The release binary was built with them: its build settings (go version
	// -m; with -trimpath Go does not record -ldflags) and what -X stamped.
	info := runIn(t, nil, "go", "version", "-m", releaseOperator(t))
	for _, want := range []string{"build\t-trimpath=true", "build\tCGO_ENABLED=0"} {
		if !strings.Contains(info, want) {
			t.Errorf("the release binary was not built with %s:\n%s", want, info)
		}
	}
	rev := regexp.MustCompile(`-X main\.revision=(\S+)`).FindStringSubmatch(ldflags)
	if got := runIn(t, nil, releaseOperator(t), "--version"); rev == nil || !strings.Contains(got, "revision "+rev[1]+",") {
		t.Errorf("--version %q does not carry the revision of %q", got, ldflags)
	}

	for _, f := range []string{"Makefile", "Dockerfile", ".ci/run"} {
		if strings.Contains(string(readFile(t, f)), "go build") {
			t.Errorf("%s runs go build itself; it must build with hack/build.sh", f)
		}
	}
	if out := runIn(t, nil, "make", "-n", "--no-print-directory", "build"); !strings.Contains(out, "bash hack/build.sh") {
		t.Errorf("make build does not run hack/build.sh:\n%s", out)
	}
	if ci := string(readFile(t, ".ci/run")); !regexp.MustCompile(`(?m)^\s*(make build|bash hack/build\.sh)\b`).MatchString(ci) {
		t.Error(".ci/run does not build with make build or hack/build.sh")
	}

	// The Dockerfile: cross-compiled by hack/build.sh for TARGETOS/TARGETARCH,
	// the revision passed in, every base image pinned by digest, both
	// binaries in the image.
	df := string(readFile(t, "Dockerfile"))
	runs := regexp.MustCompile(`(?m)^RUN .*hack/build\.sh.*$`).FindAllString(df, -1)
	if len(runs) != 1 || !strings.Contains(runs[0], "GOOS=$TARGETOS") || !strings.Contains(runs[0], "GOARCH=$TARGETARCH") || !strings.Contains(runs[0], "REVISION=$REVISION") {
		t.Errorf("Dockerfile: want one RUN of hack/build.sh with GOOS=$TARGETOS GOARCH=$TARGETARCH REVISION=$REVISION, got %q", runs)
	}
	if !regexp.MustCompile(`(?m)^ARG TARGETOS TARGETARCH$`).MatchString(df) {
		t.Error("Dockerfile: no ARG TARGETOS TARGETARCH")
	}
	froms := regexp.MustCompile(`(?m)^FROM .*$`).FindAllString(df, -1)
	pinned := regexp.MustCompile(`^FROM (--platform=\$BUILDPLATFORM )?[a-z0-9./-]+:[\w.-]+@sha256:[0-9a-f]{64}( AS \w+)?$`)
	for _, f := range froms {
		if !pinned.MatchString(f) {
			t.Errorf("Dockerfile: %q is not pinned by digest", f)
		}
	}
	if len(froms) != 2 {
		t.Errorf("Dockerfile: %d stages, want 2 (build, distroless)", len(froms))
	}
	for _, bin := range []string{"simplewebapp-operator", "kubectl-swa"} {
		if !strings.Contains(df, "COPY --from=build /out/"+bin+" ") {
			t.Errorf("Dockerfile: %s is not copied into the image", bin)
		}
	}

	// The image targets pass the revision (no .git in the image build) and
	// buildx builds every platform asked for.
	if out := runIn(t, nil, "make", "-n", "--no-print-directory", "docker-build"); !regexp.MustCompile(`--build-arg REVISION=[0-9a-f]{12}`).MatchString(out) {
		t.Errorf("make docker-build passes no revision:\n%s", out)
	}
	out := runIn(t, nil, "make", "-n", "--no-print-directory", "docker-buildx", "IMG=r.example/swa:1")
	if !strings.Contains(out, "--platform=linux/amd64,linux/arm64") || !strings.Contains(out, "--push") || !strings.Contains(out, "--tag r.example/swa:1") {
		t.Errorf("make docker-buildx:\n%s", out)
	}
	if out := runIn(t, nil, "make", "-n", "--no-print-directory", "docker-buildx", "PLATFORMS=linux/arm64"); !strings.Contains(out, "--platform=linux/arm64 ") {
		t.Errorf("make docker-buildx PLATFORMS=linux/arm64:\n%s", out)
	}
}

// TestInstallTargetsNeedNoTools: install, uninstall, deploy, undeploy and
// build-installer use KUBECTL (the user's) and never build or use the local
// control plane.
func TestInstallTargetsNeedNoTools(t *testing.T) {
	for _, target := range []string{"install", "uninstall", "deploy", "undeploy", "build-installer"} {
		out := runIn(t, nil, "make", "-n", "--no-print-directory", target, "KUBECTL=/opt/my/kubectl", "INSTALLER="+filepath.Join(t.TempDir(), "i.yaml"))
		if strings.Contains(out, "hack/tools") || strings.Contains(out, "build.sh") && !strings.Contains(out, "hack/build.sh") {
			t.Errorf("make %s uses the local control plane:\n%s", target, out)
		}
		if target != "build-installer" && !strings.Contains(out, "/opt/my/kubectl ") {
			t.Errorf("make %s does not use KUBECTL:\n%s", target, out)
		}
	}
	// Without KUBECTL, the kubectl on PATH.
	if out := runIn(t, nil, "make", "-n", "--no-print-directory", "deploy"); !regexp.MustCompile(`\| kubectl apply --server-side`).MatchString(out) {
		t.Errorf("make deploy does not default to the kubectl on PATH:\n%s", out)
	}
}
