package render

import (
	"context"
	"errors"
	"io/fs"

	"sigs.k8s.io/kubebuilder-declarative-pattern/pkg/patterns/addon/pkg/loaders"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/step"
)

// WithdrawnFile lists package versions that no SimpleWebApp may move to, for
// example because their patch policy proved too wide. It sits next to the
// channel files (channel names are lowercase letters, so it is never read as
// a channel), in the embedded tree and in --channels-dir; a version either
// one withdraws is withdrawn. Operators that do not know the file ignore it,
// so a channels directory that uses it still works with older operators.
const WithdrawnFile = "withdrawn.yaml"

// Withdrawal is one withdrawn version and why.
type Withdrawal struct {
	Package string `json:"name"`
	Version string `json:"version"`
	Reason  string `json:"reason"`
}

type withdrawnList struct {
	Withdrawn []Withdrawal `json:"withdrawn"`
}

// Withdrawals returns the withdrawn versions of the package, by version.
// A malformed file is an error (ChannelInvalid) rather than no withdrawals:
// ignoring it could move SimpleWebApps onto a version someone withdrew.
func (c Channels) Withdrawals() (map[string]Withdrawal, error) {
	out := map[string]Withdrawal{}
	for _, src := range []struct {
		fsys fs.FS
		name string
	}{{c.FS, "the embedded channels"}, {c.Dir, "the channels directory"}} {
		if src.fsys == nil {
			continue
		}
		raw, err := fs.ReadFile(src.fsys, WithdrawnFile)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var list withdrawnList
		if err == nil {
			err = yaml.UnmarshalStrict(raw, &list)
		}
		if err != nil {
			return nil, step.Stalled(webappv1.ReasonChannelInvalid, "%s in %s: %v", WithdrawnFile, src.name, err)
		}
		for _, w := range list.Withdrawn {
			if w.Package == PackageName {
				out[w.Version] = w
			}
		}
	}
	return out, nil
}

// ResolveApp is Resolve for a SimpleWebApp, with withdrawn and halted
// versions honoured. A channel resolves to its newest version that is not
// withdrawn or halted (the Release then names the halted version it passed
// over); a pinned withdrawn version is refused (Stalled/VersionWithdrawn)
// unless the SimpleWebApp already runs it: then it keeps running it, and the
// Release says it is withdrawn, until its owner moves it. Moving it off by
// force could be a downgrade the owner did not ask for. A pinned version is
// never held back by a halt: its owner chose it.
func (c Channels) ResolveApp(ctx context.Context, swa *webappv1.SimpleWebApp) (Release, error) {
	withdrawn, err := c.Withdrawals()
	if err != nil {
		return Release{}, err
	}
	running := swa.Status.Version
	halted := map[string]Withdrawal{}
	skip := func(v string) bool {
		_, w := withdrawn[v]
		_, h := halted[v]
		return (w || h) && v != running
	}
	rel, err := c.resolve(ctx, swa.Spec, skip)
	// Each pass skips one more halted version: the next newest may be
	// halted too.
	var first *Withdrawal
	for err == nil && c.Halts != nil && rel.Channel != "" && rel.Version != running {
		reason, ok := c.halted(rel)
		if !ok {
			break
		}
		w := Withdrawal{Package: PackageName, Version: rel.Version, Reason: reason}
		halted[rel.Version] = w
		if first == nil {
			first = &w
		}
		channel, revision := rel.Channel, rel.ChannelRevision
		if rel, err = c.resolve(ctx, swa.Spec, skip); err != nil && running != "" {
			// The channel lists nothing else: the running version stays.
			rel, err = c.resolve(ctx, webappv1.SimpleWebAppSpec{Version: running}, nil)
			rel.Channel, rel.ChannelRevision = channel, revision
		}
	}
	if err != nil {
		return rel, err
	}
	rel.Halted = first
	w, ok := withdrawn[rel.Version]
	switch {
	case !ok:
	case rel.Version == running:
		rel.Withdrawn = &w
	default:
		return rel, step.Stalled(webappv1.ReasonVersionWithdrawn, "version %s is withdrawn (%s): pin another version or follow a channel", rel.Version, w.Reason)
	}
	return rel, nil
}

// halted asks Halts about rel's version by its content.
func (c Channels) halted(rel Release) (string, bool) {
	hash, err := rel.PackageHash()
	if err != nil {
		return "", false
	}
	return c.Halts.Halted(rel.Version, hash)
}

// latestNotSkipped is the channel's newest version of the package that skip
// does not exclude (kdp's semantics for the rest), and whether skip excluded
// any.
func latestNotSkipped(ctx context.Context, ch loaders.Channel, skip func(string) bool) (*loaders.Version, bool) {
	kept := loaders.Channel{}
	skipped := false
	for _, m := range ch.Manifests {
		if skip != nil && (m.Package == "" || m.Package == PackageName) && skip(m.Version) {
			skipped = true
			continue
		}
		kept.Manifests = append(kept.Manifests, m)
	}
	latest, _ := kept.Latest(ctx, PackageName)
	return latest, skipped
}
