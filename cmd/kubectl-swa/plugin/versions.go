package plugin

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/blang/semver/v4"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
)

// versions lists the channels and package versions the operator knows and,
// for each SimpleWebApp of -f, the version it would run and why.
func versions(args []string, stdout, stderr io.Writer) error {
	var c common
	var offline bool
	fs := newFlags("versions", &c, true)
	fs.BoolVar(&offline, "offline", false, "do not read the SimpleWebApps' status from the cluster")
	if err := parse(fs, args); err != nil {
		return err
	}
	ctx := context.Background()
	src := c.source()

	if err := printChannels(ctx, stdout, src); err != nil {
		return err
	}
	if c.file == "" {
		return nil
	}

	var cl client.Client
	fallback := "default"
	if !offline {
		var ns string
		var err error
		if cl, ns, err = c.connect(); err != nil {
			fmt.Fprintf(stderr, "warning: no cluster (%v): answering from the file alone (--offline)\n", oneLine(err.Error()))
			cl = nil
		} else {
			fallback = ns
		}
	}
	apps, err := c.load(os.Stdin, fallback)
	if err != nil {
		return err
	}
	for _, swa := range apps {
		if err := printApp(ctx, stdout, src, cl, swa); err != nil {
			return err
		}
	}
	return nil
}

// printChannels prints each channel's versions and the package's.
func printChannels(ctx context.Context, stdout io.Writer, src render.Channels) error {
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "CHANNEL\tNEWEST\tVERSIONS\tFROM")
	for _, ch := range channelNames(src) {
		listed, from, err := channelVersions(src, ch)
		newest := "-"
		if rel, rerr := src.Resolve(ctx, webappv1.SimpleWebAppSpec{Channel: ch}); rerr == nil {
			newest = rel.Version
		} else if err == nil {
			err = rerr
		}
		if err != nil {
			fmt.Fprintf(w, "%s\t-\t%s\t%s\n", ch, oneLine(err.Error()), from)
			continue
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", ch, newest, strings.Join(listed, ", "), from)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nPACKAGE %s: %s\n", render.PackageName, strings.Join(packageVersions(src), ", "))
	withdrawn, err := src.Withdrawals()
	if err != nil {
		fmt.Fprintf(stdout, "WITHDRAWN: %s\n", oneLine(err.Error()))
		return nil
	}
	for _, v := range slices.Sorted(maps.Keys(withdrawn)) {
		fmt.Fprintf(stdout, "WITHDRAWN %s: %s\n", v, withdrawn[v].Reason)
	}
	return nil
}

// printApp prints what runs of swa (when the cluster is reachable: cl), the
// version it would get, and the move.
func printApp(ctx context.Context, stdout io.Writer, src render.Channels, cl client.Client, swa *webappv1.SimpleWebApp) error {
	fmt.Fprintf(stdout, "\nSimpleWebApp %s/%s:\n", swa.Namespace, swa.Name)
	// The reconciler decides from the stored object: the spec of the file
	// as the API server would store it, and the live status.
	var live *webappv1.SimpleWebApp
	target := swa
	if cl != nil {
		var err error
		if live, target, err = dryRunSimpleWebApp(ctx, cl, swa); err != nil {
			return fmt.Errorf("SimpleWebApp %s/%s: %w", swa.Namespace, swa.Name, err)
		}
		if live == nil {
			fmt.Fprintln(stdout, "  running:  nothing (not in the cluster)")
		} else {
			fmt.Fprintf(stdout, "  running:  %s\n", running(live))
		}
	}
	rel, why, err := targetRelease(ctx, src, target)
	if err != nil {
		fmt.Fprintf(stdout, "  would:    stall: %v\n", err)
		return nil
	}
	fmt.Fprintf(stdout, "  desired:  %s: %s\n", rel.Version, why)
	switch {
	case live == nil && cl != nil:
		fmt.Fprintf(stdout, "  would:    install %s\n", rel.Version)
	case live == nil:
		fmt.Fprintf(stdout, "  would:    run %s\n", rel.Version)
	case live.Status.Version == rel.Version:
		fmt.Fprintf(stdout, "  would:    stay at %s\n", rel.Version)
	case live.Status.Version == "":
		fmt.Fprintf(stdout, "  would:    install %s\n", rel.Version)
	default:
		fmt.Fprintf(stdout, "  would:    move %s -> %s (%s)\n", live.Status.Version, rel.Version, direction(live.Status.Version, rel.Version))
	}
	return nil
}

func running(live *webappv1.SimpleWebApp) string {
	st := live.Status
	if st.Version == "" {
		return "nothing applied yet"
	}
	s := st.Version
	if st.Channel != "" {
		s += fmt.Sprintf(" (from channel %q)", st.Channel)
	} else {
		s += " (pinned)"
	}
	for _, c := range st.Conditions {
		if c.Type == webappv1.ConditionReady {
			s += fmt.Sprintf(", Ready=%s %s", c.Status, c.Reason)
		}
	}
	return s
}

func direction(from, to string) string {
	a, errA := semver.Parse(from)
	b, errB := semver.Parse(to)
	switch {
	case errA != nil || errB != nil:
		return "change"
	case b.GT(a):
		return "upgrade; rolled back if not Ready within spec.upgradeTimeout"
	default:
		return "downgrade"
	}
}

// channelNames are the channel files of the embedded tree and --channels-dir.
func channelNames(src render.Channels) []string {
	var names []string
	for _, fsys := range []fs.FS{src.Dir, src.FS} {
		if fsys == nil {
			continue
		}
		entries, _ := fs.ReadDir(fsys, ".")
		for _, e := range entries {
			if e.IsDir() || strings.HasPrefix(e.Name(), ".") || strings.Contains(e.Name(), ".") {
				continue // channel names are lowercase letters (the CRD's pattern)
			}
			if !slices.Contains(names, e.Name()) {
				names = append(names, e.Name())
			}
		}
	}
	slices.Sort(names)
	return names
}

// channelVersions lists the versions of the package a channel file names,
// and which tree it comes from (--channels-dir wins, as in the operator).
func channelVersions(src render.Channels, name string) ([]string, string, error) {
	from := "embedded"
	raw, err := fs.ReadFile(orEmpty(src.Dir), name)
	if err == nil {
		from = "--channels-dir"
	} else {
		raw, err = fs.ReadFile(src.FS, name)
	}
	if err != nil {
		return nil, from, err
	}
	var ch struct {
		Manifests []struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"manifests"`
	}
	if err := yaml.Unmarshal(raw, &ch); err != nil {
		return nil, from, err
	}
	var out []string
	for _, m := range ch.Manifests {
		if m.Name == render.PackageName {
			out = append(out, m.Version)
		}
	}
	return out, from, nil
}

// packageVersions lists the package versions of both trees, oldest first.
func packageVersions(src render.Channels) []string {
	var out []string
	for _, fsys := range []fs.FS{src.Dir, src.FS} {
		if fsys == nil {
			continue
		}
		dir := path.Join("packages", render.PackageName)
		entries, _ := fs.ReadDir(fsys, dir)
		for _, e := range entries {
			if _, err := fs.Stat(fsys, path.Join(dir, e.Name(), "kustomization.yaml")); err == nil && !slices.Contains(out, e.Name()) {
				out = append(out, e.Name())
			}
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		va, errA := semver.Parse(a)
		vb, errB := semver.Parse(b)
		if errA != nil || errB != nil {
			return strings.Compare(a, b)
		}
		return va.Compare(vb)
	})
	return out
}

type emptyFS struct{}

func (emptyFS) Open(string) (fs.File, error) { return nil, fs.ErrNotExist }

func orEmpty(f fs.FS) fs.FS {
	if f == nil {
		return emptyFS{}
	}
	return f
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
