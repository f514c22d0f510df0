package controllers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"

	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/loaders"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// PackageName is the package in channels/packages that renders a SimpleWebApp.
const PackageName = "simplewebapp"

// Release is one resolved version of the package: what to render and why.
type Release struct {
	// Channel the version was picked from; empty when spec.version pinned it.
	Channel string
	Version string
	// Files is the package directory (a kustomize base).
	Files fs.FS
}

// Channels resolves SimpleWebApps to package versions from a tree laid out as
// kdp's channels: `<channel>` files listing versions and `packages/<name>/<version>/`.
type Channels struct {
	FS fs.FS
}

// Resolve picks spec.version when set, else the newest version of the package
// in spec.channel (kdp's semantics: highest semver wins).
func (c Channels) Resolve(ctx context.Context, spec webappv1.SimpleWebAppSpec) (Release, error) {
	rel := Release{Version: spec.Version}
	if rel.Version == "" {
		rel.Channel = spec.Channel
		if rel.Channel == "" {
			rel.Channel = "stable"
		}
		raw, err := fs.ReadFile(c.FS, rel.Channel)
		if errors.Is(err, fs.ErrNotExist) {
			return rel, stalled(ReasonChannelNotFound, "channel %q does not exist", rel.Channel)
		}
		if err != nil {
			return rel, stalled(ReasonChannelNotFound, "reading channel %q: %v", rel.Channel, err)
		}
		var ch loaders.Channel
		if err := yaml.UnmarshalStrict(raw, &ch); err != nil {
			return rel, stalled(ReasonChannelNotFound, "channel %q is malformed: %v", rel.Channel, err)
		}
		latest, _ := ch.Latest(ctx, PackageName)
		if latest == nil {
			return rel, stalled(ReasonVersionNotFound, "channel %q lists no version of %s", rel.Channel, PackageName)
		}
		rel.Version = latest.Version
	}
	dir := path.Join("packages", PackageName, rel.Version)
	if _, err := fs.Stat(c.FS, path.Join(dir, "kustomization.yaml")); err != nil {
		if rel.Channel != "" {
			return rel, stalled(ReasonVersionNotFound, "channel %q lists version %s, which has no package", rel.Channel, rel.Version)
		}
		return rel, stalled(ReasonVersionNotFound, "version %s of %s does not exist", rel.Version, PackageName)
	}
	sub, err := fs.Sub(c.FS, dir)
	if err != nil {
		return rel, fmt.Errorf("opening package %s: %w", dir, err)
	}
	rel.Files = sub
	return rel, nil
}
