// Command mkimage writes an OCI image archive (oci-layout, index.json and
// blobs in one tar) of a single-layer linux/amd64 image holding one static
// binary, named for `ctr images import` by the io.containerd.image.name
// annotation:
//
//	mkimage -bin PATH -ref registry.local/swa/pause:1.0 -o pause.tar
package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path"
	"runtime"
	"strings"
	"time"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// A fixed time keeps the archive reproducible.
var epoch = time.Unix(0, 0).UTC()

func main() {
	bin := flag.String("bin", "", "static binary to put in the image")
	name := flag.String("name", "", "path of the binary in the image (default /<base name of -bin>)")
	ref := flag.String("ref", "", "image reference, e.g. registry.local/swa/pause:1.0")
	out := flag.String("o", "", "output archive")
	flag.Parse()
	if *bin == "" || *ref == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	if *name == "" {
		*name = "/" + path.Base(*bin)
	}
	data, err := os.ReadFile(*bin)
	if err != nil {
		log.Fatal(err)
	}

	// The layer: the binary and /tmp, uncompressed.
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: epoch}))
	must(tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(*name, "/"), Mode: 0o755, Size: int64(len(data)), ModTime: epoch}))
	_, err = tw.Write(data)
	must(err)
	must(tw.Close())
	layerDesc, layerBlob := blob("application/vnd.oci.image.layer.v1.tar", layer.Bytes())

	config, err := json.Marshal(map[string]any{
		"created":      epoch.Format(time.RFC3339),
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{*name}, "Env": []string{"PATH=/"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDesc.Digest}},
	})
	must(err)
	configDesc, configBlob := blob("application/vnd.oci.image.config.v1+json", config)

	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        configDesc,
		"layers":        []descriptor{layerDesc},
	})
	must(err)
	manifestDesc, manifestBlob := blob("application/vnd.oci.image.manifest.v1+json", manifest)
	tag := (*ref)[strings.LastIndex(*ref, ":")+1:]
	manifestDesc.Annotations = map[string]string{
		"io.containerd.image.name":          *ref,
		"org.opencontainers.image.ref.name": tag,
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []descriptor{manifestDesc},
	})
	must(err)

	var archive bytes.Buffer
	aw := tar.NewWriter(&archive)
	file := func(name string, b []byte) {
		must(aw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: epoch}))
		_, err := aw.Write(b)
		must(err)
	}
	file("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	file("index.json", index)
	for _, b := range []struct {
		d descriptor
		b []byte
	}{{layerDesc, layerBlob}, {configDesc, configBlob}, {manifestDesc, manifestBlob}} {
		file("blobs/sha256/"+strings.TrimPrefix(b.d.Digest, "sha256:"), b.b)
	}
	must(aw.Close())
	must(os.WriteFile(*out, archive.Bytes(), 0o644))
	fmt.Printf("%s %s\n", *ref, manifestDesc.Digest)
}

func blob(mediaType string, b []byte) (descriptor, []byte) {
	return descriptor{MediaType: mediaType, Digest: fmt.Sprintf("sha256:%x", sha256.Sum256(b)), Size: int64(len(b))}, b
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
