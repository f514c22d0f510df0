package main

import (
	"crypto/sha1" //nolint:gosec // G505: RFC 9562 defines version 5 UUIDs with SHA-1 (a name, not a check)
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// sbomFile is the SBOM's file name (CycloneDX's .cdx.json convention).
const sbomFile = "sbom.cdx.json"

// The CycloneDX 1.5 JSON objects this SBOM uses.
type (
	bom struct {
		BOMFormat    string       `json:"bomFormat"`
		SpecVersion  string       `json:"specVersion"`
		SerialNumber string       `json:"serialNumber,omitempty"`
		Version      int          `json:"version"`
		Metadata     metadata     `json:"metadata"`
		Components   []component  `json:"components"`
		Dependencies []dependency `json:"dependencies"`
	}
	metadata struct {
		Timestamp string    `json:"timestamp"`
		Tools     tools     `json:"tools"`
		Component component `json:"component"`
	}
	tools struct {
		Components []component `json:"components"`
	}
	component struct {
		Type       string     `json:"type"`
		BOMRef     string     `json:"bom-ref,omitempty"`
		Name       string     `json:"name"`
		Version    string     `json:"version,omitempty"`
		PURL       string     `json:"purl,omitempty"`
		Hashes     []hash     `json:"hashes,omitempty"`
		Properties []property `json:"properties,omitempty"`
	}
	hash struct {
		Alg     string `json:"alg"`
		Content string `json:"content"`
	}
	property struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	dependency struct {
		Ref       string   `json:"ref"`
		DependsOn []string `json:"dependsOn,omitempty"`
	}
)

// sbom writes a CycloneDX SBOM of the released binaries: the operator
// (linux, in the images) and kubectl-swa (every platform), each an
// application with its SHA-256, depending on the Go standard library and
// the modules linked into it, as its build information records them (what
// `go version -m` prints). Builds for different platforms can link
// different modules. The timestamp is the release's time and the serial
// number a UUID derived from the rest of the document, so that it is as
// reproducible as the artifacts.
func (r *release) sbom() error {
	top := component{Type: "application", BOMRef: operatorBin + "@" + r.version, Name: operatorBin, Version: r.version}
	doc := bom{
		BOMFormat:   "CycloneDX",
		SpecVersion: "1.5",
		Version:     1,
		Metadata: metadata{
			Timestamp: r.epoch.UTC().Format(time.RFC3339),
			Tools:     tools{Components: []component{{Type: "application", Name: "hack/release", Version: r.version}}},
			Component: top,
		},
	}
	libs := map[string]component{}
	var apps []string
	var appDeps []dependency
	type binary struct {
		name string
		p    platform
	}
	var binaries []binary
	for _, arch := range imageArches {
		binaries = append(binaries, binary{operatorBin, platform{"linux", arch}})
	}
	for _, p := range pluginPlatforms {
		binaries = append(binaries, binary{pluginBin, p})
	}
	for _, b := range binaries {
		path := filepath.Join(r.binDir(b.p), b.p.exe(b.name))
		info, err := buildinfo.ReadFile(path)
		if err != nil {
			return err
		}
		sum, err := fileSHA256(path)
		if err != nil {
			return err
		}
		app := component{
			Type: "application", BOMRef: b.name + "_" + b.p.os + "_" + b.p.arch, Name: b.name, Version: r.version,
			Hashes: []hash{{"SHA-256", sum}},
			Properties: []property{
				{"cdx:gomod:build:env:GOOS", b.p.os},
				{"cdx:gomod:build:env:GOARCH", b.p.arch},
			},
		}
		doc.Components = append(doc.Components, app)
		apps = append(apps, app.BOMRef)

		std := goModule("stdlib", info.GoVersion)
		libs[std.BOMRef] = std
		deps := []string{std.BOMRef}
		for _, m := range info.Deps {
			if m.Replace != nil && m.Replace.Version != "" {
				m = m.Replace
			}
			if m.Version == "" {
				return fmt.Errorf("%s: module %s has no version (a local replacement?)", path, m.Path)
			}
			c := goModule(m.Path, m.Version)
			libs[c.BOMRef] = c
			deps = append(deps, c.BOMRef)
		}
		slices.Sort(deps)
		appDeps = append(appDeps, dependency{Ref: app.BOMRef, DependsOn: slices.Compact(deps)})
	}
	refs := make([]string, 0, len(libs))
	for ref := range libs {
		refs = append(refs, ref)
	}
	slices.Sort(refs)
	for _, ref := range refs {
		doc.Components = append(doc.Components, libs[ref])
	}
	doc.Dependencies = append([]dependency{{Ref: top.BOMRef, DependsOn: apps}}, appDeps...)

	// The serial number: a name-based (version 5) UUID of the document
	// without it, so that it changes exactly when the content does.
	unserialized, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	doc.SerialNumber = "urn:uuid:" + contentUUID(unserialized)
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.stage, sbomFile), append(b, '\n'), 0o644)
}

// goModule is a library component for the Go module path@version, its
// package URL the bom-ref.
func goModule(path, version string) component {
	purl := "pkg:golang/" + purlEscape(path, "/") + "@" + purlEscape(version, "")
	return component{Type: "library", BOMRef: purl, Name: path, Version: version, PURL: purl}
}

// purlEscape percent-encodes s for a package URL, keeping the characters
// in keep (the path separators of a namespace).
func purlEscape(s, keep string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', strings.IndexByte(".-_~", c) >= 0, strings.IndexByte(keep, c) >= 0:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// urlNamespace is RFC 9562's name space ID for URLs.
var urlNamespace = [16]byte{0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1, 0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8}

// contentUUID is the version 5 UUID, in the URL name space, of
// "urn:sha256:<hex SHA-256 of content>".
func contentUUID(content []byte) string {
	sum := sha256.Sum256(content)
	h := sha1.New() //nolint:gosec // G401: as the import above
	h.Write(urlNamespace[:])
	h.Write([]byte("urn:sha256:" + hex.EncodeToString(sum[:])))
	u := h.Sum(nil)[:16]
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 9562 variant
	x := hex.EncodeToString(u)
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}
