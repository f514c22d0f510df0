package release_test

import (
	"archive/zip"
	"bytes"
	"debug/buildinfo"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// krewModule is the krew the test installs the plugin with, built from
// source (go install, cached by Go's build cache).
const krewModule = "sigs.k8s.io/krew/cmd/krew@v0.4.3"

func exe(goos string) string {
	if goos == "windows" {
		return "kubectl-swa.exe"
	}
	return "kubectl-swa"
}

// pluginFiles reads a kubectl-swa archive: exactly LICENSE and the binary,
// in that order, with their modes and the release's time.
func (r *releaseDir) pluginFiles(t *testing.T, goos, arch string) (bin, license []byte) {
	t.Helper()
	name := pluginArchive(goos, arch)
	type entry struct {
		name string
		mode os.FileMode
		data []byte
	}
	var es []entry
	if goos == "windows" {
		b := r.file(t, name)
		zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range zr.File {
			if !f.Modified.Equal(r.epoch) {
				t.Errorf("%s: %s: time %s, want %s", name, f.Name, f.Modified, r.epoch)
			}
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			data, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			es = append(es, entry{f.Name, f.Mode(), data})
		}
	} else {
		tes := readTarGz(t, r.file(t, name))
		r.checkEntries(t, name, tes)
		for _, e := range tes {
			es = append(es, entry{e.h.Name, e.h.FileInfo().Mode(), e.data})
		}
	}
	if len(es) != 2 || es[0].name != "LICENSE" || es[0].mode != 0o644 || es[1].name != exe(goos) || es[1].mode != 0o755 {
		var got []string
		for _, e := range es {
			got = append(got, e.name+" "+e.mode.String())
		}
		t.Fatalf("%s holds %q, want LICENSE (0644) and %s (0755)", name, got, exe(goos))
	}
	return es[1].data, es[0].data
}

// pluginArchives: each archive holds the LICENSE and kubectl-swa built for
// its platform, static (CGO_ENABLED=0), -trimpath, with the release's
// version stamped; the linux ones hold the image's kubectl-swa.
func (r *releaseDir) pluginArchives(t *testing.T) {
	license := readFile(t, filepath.Join(repoRoot, "LICENSE"))
	for _, p := range platforms {
		t.Run(p.os+"/"+p.arch, func(t *testing.T) {
			bin, lic := r.pluginFiles(t, p.os, p.arch)
			if !bytes.Equal(lic, license) {
				t.Error("LICENSE is not the repository's")
			}
			if err := checkExecutable(bin, p.os, p.arch); err != "" {
				t.Error(err)
			}
			info, err := buildinfo.Read(bytes.NewReader(bin))
			if err != nil {
				t.Fatal(err)
			}
			settings := map[string]string{}
			for _, s := range info.Settings {
				settings[s.Key] = s.Value
			}
			for k, v := range map[string]string{"GOOS": p.os, "GOARCH": p.arch, "-trimpath": "true", "CGO_ENABLED": "0"} {
				if settings[k] != v {
					t.Errorf("built with %s=%q, want %q", k, settings[k], v)
				}
			}
			// go build's VCS stamp counts untracked files as a modification:
			// it would make two builds of one commit differ.
			if v, ok := settings["vcs.modified"]; ok {
				t.Errorf("VCS-stamped (vcs.modified=%s): builds of one commit can differ", v)
			}
			if !bytes.Contains(bin, []byte(version)) {
				t.Errorf("kubectl-swa does not carry the version %s (hack/build.sh's -X)", version)
			}
			if p.os == "linux" {
				if img, ok := r.binaries["image/kubectl-swa_linux_"+p.arch]; !ok {
					t.Error("the image's kubectl-swa was not read (images failed)")
				} else if !bytes.Equal(img, bin) {
					t.Error("kubectl-swa differs from the image's /kubectl-swa")
				}
			}
			r.addBinary("kubectl-swa_"+p.os+"_"+p.arch, bin)
		})
	}
}

// checkExecutable says what is wrong with b as an executable for
// goos/arch, if anything.
func checkExecutable(b []byte, goos, arch string) string {
	rd := bytes.NewReader(b)
	switch goos {
	case "linux":
		f, err := elf.NewFile(rd)
		if err != nil || f.Machine != elfMachines[arch] {
			return "not an ELF executable for " + arch
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				return "dynamically linked"
			}
		}
	case "darwin":
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[arch]
		if f, err := macho.NewFile(rd); err != nil || f.Cpu != want || f.Type != macho.TypeExec {
			return "not a Mach-O executable for " + arch
		}
	case "windows":
		want := map[string]uint16{"amd64": pe.IMAGE_FILE_MACHINE_AMD64, "arm64": pe.IMAGE_FILE_MACHINE_ARM64}[arch]
		if f, err := pe.NewFile(rd); err != nil || f.Machine != want {
			return "not a PE executable for " + arch
		}
	}
	return ""
}

// krewPlugin is what the test reads of the manifest.
type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string
	Metadata   struct{ Name string }
	Spec       struct {
		Version          string
		ShortDescription string `json:"shortDescription"`
		Platforms        []struct {
			Selector struct{ MatchLabels map[string]string } `json:"selector"`
			URI      string
			Sha256   string
			Bin      string
		}
	}
}

// krew: the manifest names, per platform, the archive's URL under
// RELEASE_URL and its SHA-256; krew installs every platform's archive from
// it (it checks the SHA-256, unpacks, links the binary) and refuses an
// archive that is not the one named.
func (r *releaseDir) krew(t *testing.T) {
	manifest := filepath.Join(r.dir, "swa.yaml")
	var m krewPlugin
	if err := yaml.Unmarshal(readFile(t, manifest), &m); err != nil {
		t.Fatal(err)
	}
	if m.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || m.Kind != "Plugin" || m.Metadata.Name != "swa" || m.Spec.Version != "v"+version {
		t.Errorf("manifest %s %s %s version %s", m.APIVersion, m.Kind, m.Metadata.Name, m.Spec.Version)
	}
	if len(m.Spec.Platforms) != len(platforms) {
		t.Fatalf("%d platforms, want %d", len(m.Spec.Platforms), len(platforms))
	}
	for i, p := range platforms {
		got := m.Spec.Platforms[i]
		archive := pluginArchive(p.os, p.arch)
		if got.Selector.MatchLabels["os"] != p.os || got.Selector.MatchLabels["arch"] != p.arch || len(got.Selector.MatchLabels) != 2 {
			t.Errorf("platform %d: selector %v, want os %s arch %s", i, got.Selector.MatchLabels, p.os, p.arch)
		}
		if got.URI != url+"/"+archive || got.Sha256 != r.sums[archive] || got.Bin != exe(p.os) {
			t.Errorf("platform %s/%s: uri %s sha256 %s bin %s; want %s/%s %s %s", p.os, p.arch, got.URI, got.Sha256, got.Bin, url, archive, r.sums[archive], exe(p.os))
		}
	}

	gobin := t.TempDir()
	cmd := exec.CommandContext(t.Context(), "go", "install", krewModule)
	cmd.Dir = gobin // outside the module: krew's own go.mod
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install %s: %v\n%s", krewModule, err, out)
	}
	krew := func(goos, arch, archive string) (string, string, error) {
		root := t.TempDir()
		cmd := exec.CommandContext(t.Context(), filepath.Join(gobin, "krew"), "install", "--manifest="+manifest, "--archive="+filepath.Join(r.dir, archive))
		cmd.Env = append(os.Environ(), "KREW_ROOT="+root, "KREW_OS="+goos, "KREW_ARCH="+arch, "KREW_NO_UPGRADE_CHECK=1")
		out, err := cmd.CombinedOutput()
		return root, string(out), err
	}
	for _, p := range platforms {
		root, out, err := krew(p.os, p.arch, pluginArchive(p.os, p.arch))
		if err != nil {
			t.Errorf("krew install %s/%s: %v\n%s", p.os, p.arch, err, out)
			continue
		}
		bin, _ := r.pluginFiles(t, p.os, p.arch)
		store := filepath.Join(root, "store", "swa", "v"+version)
		if installed, err := os.ReadFile(filepath.Join(store, exe(p.os))); err != nil || !bytes.Equal(installed, bin) {
			t.Errorf("krew %s/%s: %s is not the archive's binary (%v)", p.os, p.arch, filepath.Join(store, exe(p.os)), err)
		}
		if _, err := os.Stat(filepath.Join(store, "LICENSE")); err != nil {
			t.Errorf("krew %s/%s: no LICENSE installed: %v", p.os, p.arch, err)
		}
		if link, err := os.Readlink(filepath.Join(root, "bin", exe(p.os))); err != nil || link != filepath.Join(store, exe(p.os)) {
			t.Errorf("krew %s/%s: bin/%s -> %q (%v)", p.os, p.arch, exe(p.os), link, err)
		}
	}
	if _, out, err := krew("linux", "amd64", pluginArchive("linux", "arm64")); err == nil || !strings.Contains(out, "checksum does not match") {
		t.Errorf("krew installed the linux/arm64 archive as linux/amd64's: %v\n%s", err, out)
	}
}
