package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"sigs.k8s.io/yaml"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/apply"
	"example.com/simplewebapp-operator/internal/render"
)

// renderCmd prints the objects the operator would apply for each SimpleWebApp,
// in the format of the golden files (tests/golden): each object after a
// "---" line, then the handoff fields, which the operator applies as a
// separate field manager.
func renderCmd(args []string, stdout io.Writer) error {
	var c common
	var version, channel string
	fs := newFlags("render", &c, false)
	fs.StringVar(&version, "version", "", "render this package version (as spec.version)")
	fs.StringVar(&channel, "channel", "", "render the newest version of this channel (as spec.channel, spec.version unset)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if version != "" && channel != "" {
		return errors.New("render: --version and --channel exclude each other")
	}
	apps, err := c.load(os.Stdin, "default")
	if err != nil {
		return err
	}
	src := c.source()
	for _, swa := range apps {
		switch {
		case version != "":
			swa.Spec.Version = version
		case channel != "":
			swa.Spec.Version, swa.Spec.Channel = "", channel
		}
		out, err := renderOne(context.Background(), src, swa)
		if err != nil {
			return fmt.Errorf("SimpleWebApp %s/%s: %w", swa.Namespace, swa.Name, err)
		}
		if _, err := stdout.Write(out); err != nil {
			return err
		}
	}
	return nil
}

func renderOne(ctx context.Context, src render.Channels, swa *webappv1.SimpleWebApp) ([]byte, error) {
	rel, err := src.Resolve(ctx, swa.Spec)
	if err != nil {
		return nil, err
	}
	rendered, err := render.Render(rel, swa)
	if err != nil {
		return nil, err
	}
	var out []byte
	for _, o := range rendered.Objects {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, err
		}
		out = append(append(out, "---\n"...), b...)
	}
	for _, o := range rendered.Handoffs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			return nil, err
		}
		out = append(append(out, "--- # fields applied by "+apply.HandoffManager+"\n"...), b...)
	}
	return out, nil
}
