package render

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"hash"
	"io/fs"
	"sync"
)

// hashFiles writes every file of a package, with its path, into h.
func hashFiles(h hash.Hash, files fs.FS) error {
	return fs.WalkDir(files, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(files, p)
		if err != nil {
			return err
		}
		h.Write([]byte(p))
		h.Write([]byte{0})
		h.Write(b)
		h.Write([]byte{0})
		return nil
	})
}

// PackageHash identifies a package's content: a manifest-only re-ship of a
// version has another one.
func PackageHash(files fs.FS) (string, error) {
	h := sha256.New()
	err := hashFiles(h, files)
	return hex.EncodeToString(h.Sum(nil)), err
}

// embeddedPackage names a package directory of an embed.FS, whose content
// cannot change while the process runs.
type embeddedPackage struct {
	fs  embed.FS
	dir string
}

// embeddedHashes memoizes PackageHash of embedded packages: every pass of
// every SimpleWebApp asks for it (render cache, halts, roll-out keys).
var embeddedHashes sync.Map // embeddedPackage → string

// PackageHash is PackageHash(r.Files), computed once per embedded package;
// a package from the channels directory is hashed each time, as its files
// may change under it.
func (r Release) PackageHash() (string, error) {
	if r.embedded == nil {
		return PackageHash(r.Files)
	}
	if h, ok := embeddedHashes.Load(*r.embedded); ok {
		return h.(string), nil
	}
	h, err := PackageHash(r.Files)
	if err == nil {
		embeddedHashes.Store(*r.embedded, h)
	}
	return h, err
}
