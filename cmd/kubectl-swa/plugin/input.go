package plugin

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/resource"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/internal/render"
)

// input is where a command reads SimpleWebApps: kubectl's -f, -k and -R,
// and the channels tree it resolves versions from.
type input struct {
	filenames   []string
	kustomize   string
	recursive   bool
	channelsDir string
}

func (in *input) addFlags(fs *pflag.FlagSet, verb string) {
	(&genericclioptions.FileNameFlags{
		Usage:     "Files, directories or URLs holding the SimpleWebApps to " + verb + " (- for stdin); other kinds are passed over. May be repeated.",
		Filenames: &in.filenames, Kustomize: &in.kustomize, Recursive: &in.recursive,
	}).AddFlags(fs)
	fs.StringVar(&in.channelsDir, "channels-dir", "", "A channels tree laid over the embedded one, as the operator's --channels-dir.")
}

func (in *input) given() bool { return len(in.filenames) > 0 || in.kustomize != "" }

// source is the channels the operator reads: the embedded tree, with
// --channels-dir laid over it.
func (in *input) source() render.Channels {
	src := render.Channels{FS: channels.FS}
	if in.channelsDir != "" {
		src.Dir = os.DirFS(in.channelsDir)
	}
	return src
}

// load reads the SimpleWebApps of -f and -k with the resource builder in
// local mode: no server is asked, so other kinds (even ones the cluster does
// not know) are passed over with a note on stderr, and Lists are flattened.
// A SimpleWebApp that names no namespace gets ns; with explicit (-n given)
// one in another namespace is refused, as kubectl refuses it.
func (in *input) load(stdin io.Reader, stderr io.Writer, ns string, explicit bool) ([]*unstructured.Unstructured, error) {
	if !in.given() {
		return nil, errors.New("no SimpleWebApp given: use -f FILE (- for stdin) or -k DIR")
	}
	if len(in.filenames) > 0 && in.kustomize != "" {
		return nil, errors.New("only one of -f or -k can be specified")
	}
	b := resource.NewLocalBuilder().Unstructured().Flatten()
	if in.kustomize != "" {
		b.FilenameParam(false, &resource.FilenameOptions{Kustomize: in.kustomize, Recursive: in.recursive})
	}
	stdinUsed := false
	for _, f := range in.filenames {
		if f != "-" {
			b.FilenameParam(false, &resource.FilenameOptions{Filenames: []string{f}, Recursive: in.recursive})
			continue
		}
		// The builder's own Stdin() reads os.Stdin; tests and callers pass
		// another reader.
		if stdinUsed {
			return nil, resource.StdinMultiUseError
		}
		stdinUsed = true
		b.Stream(stdin, "STDIN")
	}
	infos, err := b.Do().Infos()
	if err != nil {
		return nil, err
	}
	swaGVK := webappv1.GroupVersion.WithKind("SimpleWebApp")
	var out []*unstructured.Unstructured
	for _, info := range infos {
		u, ok := info.Object.(*unstructured.Unstructured)
		gvk := info.Object.GetObjectKind().GroupVersionKind()
		if !ok || gvk != swaGVK {
			fmt.Fprintf(stderr, "note: passing over %s %s %q from %s: not a SimpleWebApp of %s\n", gvk.GroupVersion(), gvk.Kind, info.Name, info.Source, webappv1.GroupVersion)
			continue
		}
		if u.GetName() == "" {
			return nil, fmt.Errorf("%s: a SimpleWebApp has no metadata.name", info.Source)
		}
		switch {
		case u.GetNamespace() == "":
			u.SetNamespace(ns)
		case explicit && u.GetNamespace() != ns:
			return nil, fmt.Errorf("the namespace from the provided object %q does not match the namespace %q. You must pass '--namespace=%s' to perform this operation", u.GetNamespace(), ns, u.GetNamespace())
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, errors.New("the input holds no SimpleWebApp")
	}
	return out, nil
}

// typed is u as a SimpleWebApp; fields the type does not have are an error,
// as with kubectl's strict field validation.
func typed(u *unstructured.Unstructured) (*webappv1.SimpleWebApp, error) {
	swa := &webappv1.SimpleWebApp{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, swa, true); err != nil {
		return nil, fmt.Errorf("SimpleWebApp %s/%s: %w", u.GetNamespace(), u.GetName(), err)
	}
	return swa, nil
}

// typedAll is typed for each of us.
func typedAll(us []*unstructured.Unstructured) ([]*webappv1.SimpleWebApp, error) {
	out := make([]*webappv1.SimpleWebApp, 0, len(us))
	for _, u := range us {
		swa, err := typed(u)
		if err != nil {
			return nil, err
		}
		out = append(out, swa)
	}
	return out, nil
}
