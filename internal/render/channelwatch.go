package render

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"

	webappv1 "example.com/simplewebapp-operator/api/v1"
)

// ChannelWatcher notices changes in the channels directory without a restart
// and wakes the SimpleWebApps they concern: those following a changed channel,
// and those running or pinned to a changed package version. It polls (a
// mounted ConfigMap swaps a symlink, which file events report poorly) and acts
// on a change only once the content has stayed the same for one more interval,
// so a directory caught half-written is not acted on.
type ChannelWatcher struct {
	Dir      fs.FS
	Interval time.Duration
	Reader   client.Reader
	Events   chan event.GenericEvent
}

// NeedLeaderElection is true: only the leader reconciles, so only it needs to know.
func (w *ChannelWatcher) NeedLeaderElection() bool { return true }

// Start polls until ctx ends. Every change seen between two polls is
// remembered until the content settles, even one that is undone before then
// (A → B → A): a reconcile may have read B in between.
func (w *ChannelWatcher) Start(ctx context.Context) error {
	logger := log.FromContext(ctx).WithName("channel-watcher")
	prev := fingerprint(w.Dir)
	channels, versions := map[string]bool{}, map[string]bool{}
	ticker := time.NewTicker(w.Interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		now := fingerprint(w.Dir)
		if !maps.Equal(now, prev) { // still changing: note what, wait for it to settle
			c, v := changes(prev, now)
			maps.Copy(channels, c)
			maps.Copy(versions, v)
			prev = now
			continue
		}
		if len(channels) == 0 && len(versions) == 0 {
			continue
		}
		logger.Info("channels directory changed", "channels", slices.Sorted(maps.Keys(channels)), "versions", slices.Sorted(maps.Keys(versions)))
		if err := w.wake(ctx, channels, versions); err != nil {
			logger.Error(err, "waking SimpleWebApps after a channel change")
		}
		channels, versions = map[string]bool{}, map[string]bool{}
	}
}

func (w *ChannelWatcher) wake(ctx context.Context, channels, versions map[string]bool) error {
	list := &webappv1.SimpleWebAppList{}
	if err := w.Reader.List(ctx, list); err != nil {
		return err
	}
	for i := range list.Items {
		swa := &list.Items[i]
		following := swa.Spec.Version == "" && channels[swa.Spec.Channel]
		// A withdrawal can concern any version, pinned or followed.
		if following || channels[WithdrawnFile] || versions[swa.Spec.Version] || versions[swa.Status.Version] || versions[swa.Status.LastHealthyVersion] {
			select {
			case w.Events <- event.GenericEvent{Object: swa}:
			case <-ctx.Done():
				return nil
			}
		}
	}
	return nil
}

// fingerprint maps each file below the directory to a hash of its content.
// It follows symlinks (a mounted ConfigMap is made of them) and skips the
// "..data"-style entries that such mounts keep next to the files.
func fingerprint(dir fs.FS) map[string]string {
	files := map[string]string{}
	var walk func(p string)
	walk = func(p string) {
		entries, err := fs.ReadDir(dir, p)
		if err != nil {
			return
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), "..") {
				continue
			}
			full := path.Join(p, e.Name())
			info, err := fs.Stat(dir, full) // follows symlinks
			if err != nil {
				continue
			}
			if info.IsDir() {
				walk(full)
				continue
			}
			if b, err := fs.ReadFile(dir, full); err == nil {
				sum := sha256.Sum256(b)
				files[full] = hex.EncodeToString(sum[:])
			}
		}
	}
	walk(".")
	return files
}

// changes names the channels (top-level files) and package versions
// (packages/<name>/<version>/...) whose files differ between a and b.
func changes(a, b map[string]string) (channels, versions map[string]bool) {
	channels, versions = map[string]bool{}, map[string]bool{}
	note := func(p string) {
		parts := strings.Split(p, "/")
		switch {
		case len(parts) == 1:
			channels[parts[0]] = true
		case len(parts) >= 4 && parts[0] == "packages" && parts[1] == PackageName:
			versions[parts[2]] = true
		}
	}
	for p, h := range a {
		if b[p] != h {
			note(p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			note(p)
		}
	}
	return channels, versions
}
