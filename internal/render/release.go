package render

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/loaders"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/step"
)

// PackageName is the package in channels/packages that renders a SimpleWebApp.
const PackageName = "simplewebapp"

// Release is one resolved version of the package: what to render and why.
type Release struct {
	// Channel the version was picked from; empty when spec.version pinned it.
	Channel string
	// ChannelRevision identifies the content of the channel file (a hash):
	// a rolled-back version is retried only when it changes.
	ChannelRevision string
	Version         string
	// Files is the package directory (a kustomize base).
	Files fs.FS
	// embedded is set when Files comes from an embed.FS (PackageHash).
	embedded *embeddedPackage
	// Withdrawn is set when the version is withdrawn (WithdrawnFile) and the
	// SimpleWebApp keeps it only because it already runs it (ResolveApp).
	Withdrawn *Withdrawal
	// Halted is the newest version of the channel that the operator halted
	// for the fleet (Halts) and that the SimpleWebApp was held back from.
	Halted *Withdrawal
}

// Channels resolves SimpleWebApps to package versions from trees laid out as
// kdp's channels: `<channel>` files listing versions and
// `packages/<name>/<version>/`. Dir, when set (--channels-dir), is looked at
// first: a channel file or a package version there wins over the embedded one
// in FS, which stays the default and the fallback for what Dir lacks.
type Channels struct {
	FS  fs.FS
	Dir fs.FS
	// Halts, when set, are versions the operator withdrew by itself for the
	// fleet (internal/fleet): ResolveApp passes over them as over withdrawn
	// ones, for SimpleWebApps that follow a channel.
	Halts HaltedVersions
}

// HaltedVersions says whether a version, by its content (PackageHash), is
// halted, and why.
type HaltedVersions interface {
	Halted(version, packageHash string) (reason string, halted bool)
}

// Resolve picks spec.version when set, else the newest version of the package
// in spec.channel (kdp's semantics: highest semver wins).
// Withdrawn versions are not looked at: ResolveApp does that.
func (c Channels) Resolve(ctx context.Context, spec webappv1.SimpleWebAppSpec) (Release, error) {
	return c.resolve(ctx, spec, nil)
}

// resolve is Resolve, a channel picking its newest version that skip does
// not exclude.
func (c Channels) resolve(ctx context.Context, spec webappv1.SimpleWebAppSpec, skip func(version string) bool) (Release, error) {
	rel := Release{Version: spec.Version}
	if rel.Version == "" {
		rel.Channel = spec.Channel
		if rel.Channel == "" {
			rel.Channel = "stable"
		}
		raw, source, err := c.read(rel.Channel)
		if errors.Is(err, fs.ErrNotExist) {
			return rel, step.Stalled(webappv1.ReasonChannelNotFound, "channel %q does not exist", rel.Channel)
		}
		if err != nil {
			return rel, step.Stalled(webappv1.ReasonChannelInvalid, "reading channel %q from %s: %v", rel.Channel, source, err)
		}
		sum := sha256.Sum256(raw)
		rel.ChannelRevision = hex.EncodeToString(sum[:8])
		// A malformed channel is never replaced by the embedded one: that
		// could silently move apps to another version.
		var ch loaders.Channel
		if err := yaml.UnmarshalStrict(raw, &ch); err != nil {
			return rel, step.Stalled(webappv1.ReasonChannelInvalid, "channel %q in %s is malformed: %v", rel.Channel, source, err)
		}
		latest, skipped := latestNotSkipped(ctx, ch, skip)
		if latest == nil && skipped {
			return rel, step.Stalled(webappv1.ReasonVersionWithdrawn, "every version of %s that channel %q lists is withdrawn (%s)", PackageName, rel.Channel, WithdrawnFile)
		}
		if latest == nil {
			return rel, step.Stalled(webappv1.ReasonChannelInvalid, "channel %q in %s lists no version of %s", rel.Channel, source, PackageName)
		}
		rel.Version = latest.Version
	}
	dir := path.Join("packages", PackageName, rel.Version)
	files, embedded, err := c.sub(dir)
	if err != nil {
		if rel.Channel != "" {
			return rel, step.Stalled(webappv1.ReasonVersionNotFound, "channel %q lists version %s, which has no package", rel.Channel, rel.Version)
		}
		return rel, step.Stalled(webappv1.ReasonVersionNotFound, "version %s of %s does not exist", rel.Version, PackageName)
	}
	rel.Files, rel.embedded = files, embedded
	return rel, nil
}

// read returns a file from Dir if it is there, else from FS, and which.
func (c Channels) read(name string) ([]byte, string, error) {
	if c.Dir != nil {
		b, err := fs.ReadFile(c.Dir, name)
		if !errors.Is(err, fs.ErrNotExist) {
			return b, "the channels directory", err
		}
	}
	b, err := fs.ReadFile(c.FS, name)
	return b, "the embedded channels", err
}

// sub returns a package directory (one with a kustomization.yaml) from Dir if
// it is there, else from FS, and where in an embed.FS it is, if it is in one.
func (c Channels) sub(dir string) (fs.FS, *embeddedPackage, error) {
	for _, src := range []fs.FS{c.Dir, c.FS} {
		if src == nil {
			continue
		}
		if _, err := fs.Stat(src, path.Join(dir, "kustomization.yaml")); err == nil {
			files, err := fs.Sub(src, dir)
			var embedded *embeddedPackage
			if e, ok := src.(embed.FS); ok {
				embedded = &embeddedPackage{fs: e, dir: dir}
			}
			return files, embedded, err
		}
	}
	return nil, nil, fmt.Errorf("%s: %w", dir, fs.ErrNotExist)
}
