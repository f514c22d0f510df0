package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// importImages packs the pause and test binaries into OCI image archives
// (mkimage) and imports them, then the archives of Options.NodeImages.
// Nothing is ever pulled.
func (n *RealNode) importImages(ctx context.Context, extra []string) error {
	for _, img := range []struct{ bin, ref string }{{"pause", realNodePauseImage}, {"swa-node-test", RealNodeTestImage}} {
		archive := n.path("images", img.bin+".tar")
		if err := run(filepath.Join(n.BinDir, "mkimage"), "-bin", filepath.Join(n.BinDir, img.bin), "-ref", img.ref, "-o", archive); err != nil {
			return err
		}
		if err := n.ImportImage(ctx, archive); err != nil {
			return err
		}
	}
	for _, archive := range extra {
		if err := n.ImportImage(ctx, archive); err != nil {
			return err
		}
	}
	return nil
}

// ImportImage imports an OCI image archive into the node's containerd (the
// CRI's namespace k8s.io) under the names in its index annotations
// (io.containerd.image.name). Pods use it with imagePullPolicy IfNotPresent
// or Never.
func (n *RealNode) ImportImage(ctx context.Context, archive string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := n.ctr(ctx, "images", "import", archive); err != nil {
		return fmt.Errorf("import %s: %w", archive, err)
	}
	return nil
}

// ctr runs the node's ctr against its containerd in the namespace k8s.io.
func (n *RealNode) ctr(ctx context.Context, args ...string) error {
	_, err := n.ctrOutput(ctx, args...)
	return err
}

func (n *RealNode) ctrOutput(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(n.BinDir, "ctr"),
		append([]string{"--address", n.containerdSocket(), "--namespace", "k8s.io"}, args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}
