package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// krewManifest is the krew index file name of the plugin: the plugin's
// name, swa (kubectl swa), with .yaml.
const krewManifest = "swa.yaml"

// pluginArchive is the file name of kubectl-swa's archive for p.
func (r *release) pluginArchive(p platform) string {
	ext := ".tar.gz"
	if p.os == "windows" {
		ext = ".zip"
	}
	return pluginBin + "_" + r.version + "_" + p.os + "_" + p.arch + ext
}

// pluginArchives packs kubectl-swa for each platform with the LICENSE (a
// tar.gz, a zip for Windows; both at the archive's top level) and writes
// the krew manifest that installs them.
func (r *release) pluginArchives() error {
	license, err := os.ReadFile(filepath.Join(r.root, "LICENSE"))
	if err != nil {
		return err
	}
	sums := map[platform]string{}
	for _, p := range pluginPlatforms {
		bin, err := os.ReadFile(filepath.Join(r.binDir(p), p.exe(pluginBin)))
		if err != nil {
			return err
		}
		files := []file{{name: p.exe(pluginBin), mode: 0o755, data: bin}, {name: "LICENSE", mode: 0o644, data: license}}
		archive := tarGz
		if p.os == "windows" {
			archive = zipOf
		}
		b, err := archive(files, r.epoch)
		if err != nil {
			return err
		}
		out := filepath.Join(r.stage, r.pluginArchive(p))
		if err := os.WriteFile(out, b, 0o644); err != nil {
			return err
		}
		if sums[p], err = fileSHA256(out); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(r.stage, krewManifest), r.krew(sums), 0o644)
}

// krew is the plugin manifest (krew index format) for `kubectl krew install
// --manifest swa.yaml`, or a krew index: per platform the archive's URL
// under -url, its SHA-256 (which krew checks), and what to install of it.
func (r *release) krew(sums map[platform]string) []byte {
	q := func(s string) string {
		b, _ := json.Marshal(s) // a JSON string is a YAML one
		return string(b)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: swa
spec:
  version: %s
  shortDescription: Render, diff and check versions of SimpleWebApps
  description: |
    kubectl swa renders SimpleWebApps (example.com/v1) with the operator's
    own code, diffs them against a cluster and tells which package version
    each one would run. Version %s of the simplewebapp-operator.
  platforms:
`, q("v"+r.version), r.version)
	for _, p := range pluginPlatforms {
		fmt.Fprintf(&b, `  - selector:
      matchLabels:
        os: %s
        arch: %s
    uri: %s
    sha256: %s
    files:
    - from: %s
      to: .
    - from: LICENSE
      to: .
    bin: %s
`, p.os, p.arch, q(r.url+"/"+r.pluginArchive(p)), q(sums[p]), q(p.exe(pluginBin)), q(p.exe(pluginBin)))
	}
	return []byte(b.String())
}
