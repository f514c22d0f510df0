package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"io/fs"
	"slices"
	"strings"
	"time"

	"example.com/simplewebapp-operator/hack/internal/reproducible"
)

// file is one regular file of an archive.
type file struct {
	name string
	mode fs.FileMode
	data []byte
}

func sortFiles(files []file) {
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.name, b.name) })
}

// tarGz is a gzipped tar of files, sorted by name, each with the time epoch
// and owner 0:0 without names. compress/gzip writes neither a file name nor a
// time into the gzip header, so the bytes depend on files and epoch only.
func tarGz(files []file, epoch time.Time) ([]byte, error) {
	sortFiles(files)
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: int64(f.mode), Size: int64(len(f.data)), ModTime: epoch, Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return reproducible.Gzip(raw.Bytes())
}

// zipOf is a zip of files, sorted by name, deflated, each with the time
// epoch (in UTC, in the MS-DOS fields and the extended timestamp).
func zipOf(files []file, epoch time.Time) ([]byte, error) {
	sortFiles(files)
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, f := range files {
		h := &zip.FileHeader{Name: f.name, Method: zip.Deflate, Modified: epoch.UTC()}
		h.SetMode(f.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
