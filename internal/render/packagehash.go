package render

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io/fs"
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
