package release_test

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/layout"
)

var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

// images: each image archive is an OCI image layout (read by
// go-containerregistry) of one image for linux/<arch>, named by the release
// image, labelled with the version, made at the release's time, holding the
// operator for that architecture and the same kubectl-swa as the linux
// archive of that architecture.
func (r *releaseDir) images(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			dir := t.TempDir()
			for _, e := range readTar(t, bytes.NewReader(r.file(t, imageArchive(arch)))) {
				if !filepath.IsLocal(e.h.Name) {
					t.Fatalf("entry %q outside the layout", e.h.Name)
				}
				p := filepath.Join(dir, e.h.Name) //nolint:gosec // G305: e.h.Name is local (filepath.IsLocal above)
				if e.h.Typeflag == tar.TypeDir {
					if err := os.MkdirAll(p, 0o755); err != nil {
						t.Fatal(err)
					}
				} else if err := os.WriteFile(p, e.data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			idx, err := layout.ImageIndexFromPath(dir)
			if err != nil {
				t.Fatalf("not an OCI image layout: %v", err)
			}
			im, err := idx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			if len(im.Manifests) != 1 {
				t.Fatalf("%d manifests, want 1", len(im.Manifests))
			}
			desc := im.Manifests[0]
			if p := desc.Platform; p == nil || p.OS != "linux" || p.Architecture != arch {
				t.Errorf("index platform %v, want linux/%s", p, arch)
			}
			if got := desc.Annotations["io.containerd.image.name"]; got != image {
				t.Errorf("io.containerd.image.name %q, want %q", got, image)
			}
			img, err := idx.Image(desc.Digest)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if cf.OS != "linux" || cf.Architecture != arch {
				t.Errorf("config platform %s/%s", cf.OS, cf.Architecture)
			}
			if got := cf.Config.Labels["org.opencontainers.image.version"]; got != version {
				t.Errorf("version label %q, want %q", got, version)
			}
			if !cf.Created.Equal(r.epoch) {
				t.Errorf("created %s, want %s", cf.Created.Time, r.epoch)
			}

			layers, err := img.Layers()
			if err != nil || len(layers) != 1 {
				t.Fatalf("layers %d (%v), want 1", len(layers), err)
			}
			rc, err := layers[0].Uncompressed()
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			files := map[string][]byte{}
			for _, e := range readTar(t, rc) {
				files[e.h.Name] = e.data
			}
			op, plugin := files["simplewebapp-operator"], files["kubectl-swa"]
			f, err := elf.NewFile(bytes.NewReader(op))
			if err != nil || f.Machine != elfMachines[arch] {
				t.Errorf("/simplewebapp-operator: not an ELF executable for %s (%v)", arch, err)
			}
			if !bytes.Contains(op, []byte(version)) {
				t.Errorf("/simplewebapp-operator does not carry the version %s", version)
			}
			r.addBinary("simplewebapp-operator_linux_"+arch, op)
			r.addBinary("image/kubectl-swa_linux_"+arch, plugin)
		})
	}
}
