package plugin

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/internal/render"
)

// Exit codes, as `kubectl diff`: 0 no change, 1 changes, above 1 an error or
// a refusal by the operator's policy checks.
const (
	ExitOK      = 0
	ExitChanges = 1
	ExitError   = 2
)

// common are the flags every command shares.
type common struct {
	file        string
	namespace   string
	channelsDir string
	kubeconfig  string
	context     string
}

func newFlags(name string, c *common, cluster bool) *flag.FlagSet {
	fs := flag.NewFlagSet("kubectl swa "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.file, "f", "", "file holding SimpleWebApps (- for stdin)")
	fs.StringVar(&c.file, "filename", "", "same as -f")
	fs.StringVar(&c.namespace, "n", "", "namespace of SimpleWebApps that name none")
	fs.StringVar(&c.namespace, "namespace", "", "same as -n")
	fs.StringVar(&c.channelsDir, "channels-dir", "", "a channels tree laid over the embedded one, as the operator's --channels-dir")
	if cluster {
		fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
		fs.StringVar(&c.context, "context", "", "kubeconfig context")
	}
	return fs
}

// parse parses args; flags may follow positional words, as kubectl allows.
func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%s: %v", fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))
	}
	return nil
}

// source is the channels the operator reads: the embedded tree, with
// --channels-dir laid over it.
func (c *common) source() render.Channels {
	src := render.Channels{FS: channels.FS}
	if c.channelsDir != "" {
		src.Dir = os.DirFS(c.channelsDir)
	}
	return src
}

// load reads the SimpleWebApps of c.file. Each gets c.namespace, or
// fallback, when it names none.
func (c *common) load(stdin io.Reader, fallback string) ([]*webappv1.SimpleWebApp, error) {
	if c.file == "" {
		return nil, errors.New("no SimpleWebApp given: use -f FILE")
	}
	var raw []byte
	var err error
	if c.file == "-" {
		raw, err = io.ReadAll(stdin)
	} else {
		raw, err = os.ReadFile(c.file)
	}
	if err != nil {
		return nil, err
	}
	ns := c.namespace
	if ns == "" {
		ns = fallback
	}
	var out []*webappv1.SimpleWebApp
	for i, doc := range splitDocuments(raw) {
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal(doc, &head); err != nil {
			return nil, fmt.Errorf("%s document %d: %v", c.file, i+1, err)
		}
		if head.APIVersion == "" && head.Kind == "" {
			continue // comments only
		}
		if head.Kind != "SimpleWebApp" || head.APIVersion != webappv1.GroupVersion.String() {
			return nil, fmt.Errorf("%s document %d: %s %s is not a SimpleWebApp (%s)", c.file, i+1, head.APIVersion, head.Kind, webappv1.GroupVersion)
		}
		swa := &webappv1.SimpleWebApp{}
		if err := yaml.UnmarshalStrict(doc, swa); err != nil {
			return nil, fmt.Errorf("%s document %d: %v", c.file, i+1, err)
		}
		if swa.Name == "" {
			return nil, fmt.Errorf("%s document %d: the SimpleWebApp has no metadata.name", c.file, i+1)
		}
		switch {
		case swa.Namespace == "":
			swa.Namespace = ns
		case c.namespace != "" && swa.Namespace != c.namespace:
			return nil, fmt.Errorf("%s: SimpleWebApp %s is in namespace %s, not %s (-n)", c.file, swa.Name, swa.Namespace, c.namespace)
		}
		out = append(out, swa)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no SimpleWebApp", c.file)
	}
	return out, nil
}

// splitDocuments splits a YAML stream at its "---" lines.
func splitDocuments(raw []byte) [][]byte {
	var docs [][]byte
	var cur []string
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "---") && strings.TrimSpace(strings.SplitN(line[3:], "#", 2)[0]) == "" {
			docs = append(docs, []byte(strings.Join(cur, "\n")))
			cur = nil
			continue
		}
		cur = append(cur, line)
	}
	return append(docs, []byte(strings.Join(cur, "\n")))
}
