package render

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/step"
)

// ImagePolicy is which container images an admin lets SimpleWebApps run
// (the operator's --allowed-images and --require-image-digest). A tenant
// chooses spec.image; without it they could run any image with the
// operator's pull access and in its name.
type ImagePolicy struct {
	// Allowed are registry hosts ("registry.example.com",
	// "localhost:5000") and repository prefixes
	// ("docker.io/nginxinc/nginx-unprivileged", "registry.example.com/team"),
	// matched on whole path segments after Docker Hub short names are
	// expanded as container runtimes do (nginx is
	// docker.io/library/nginx). Empty, or "*" among them: any image.
	Allowed []string
	// RequireDigest: every image is pinned by digest (name@sha256:...).
	RequireDigest bool
}

// ParseImagePolicy reads --allowed-images (comma-separated, blanks ignored)
// and --require-image-digest, refusing malformed entries.
func ParseImagePolicy(list string, requireDigest bool) (ImagePolicy, error) {
	p := ImagePolicy{RequireDigest: requireDigest}
	for _, e := range strings.Split(list, ",") {
		if e = strings.TrimSpace(e); e != "" {
			p.Allowed = append(p.Allowed, e)
		}
	}
	return p, p.Validate()
}

// Validate refuses malformed entries of Allowed, naming the first.
func (p ImagePolicy) Validate() error {
	for _, e := range p.Allowed {
		if _, err := normalizeAllowed(e); err != nil {
			return fmt.Errorf("allowed image %q: %w", e, err)
		}
	}
	return nil
}

// AllowsAny says whether every image is allowed (digests aside).
func (p ImagePolicy) AllowsAny() bool {
	return len(p.Allowed) == 0 || slices.Contains(p.Allowed, "*")
}

// Check refuses a render with a container (init, regular or ephemeral) of
// a pod template whose image the policy does not allow:
// Stalled/ImageNotAllowed naming the object, the container, the image and
// the allowed list. It runs in the reconciler, after the render, so Render
// stays a function of the package and the SimpleWebApp alone.
func (p ImagePolicy) Check(r *Rendered) error {
	if p.AllowsAny() && !p.RequireDigest {
		return nil
	}
	for _, o := range r.Objects {
		full := r.WithHandoff(o)
		for _, list := range []string{"initContainers", "containers", "ephemeralContainers"} {
			cs, _, _ := unstructured.NestedSlice(full.Object, "spec", "template", "spec", list)
			for _, c := range cs {
				m, _ := c.(map[string]any)
				name, _ := m["name"].(string)
				image, _ := m["image"].(string)
				if why := p.refuses(image); why != "" {
					return step.Stalled(webappv1.ReasonImageNotAllowed, "%s %s: container %q: image %q %s", o.GetKind(), o.GetName(), name, image, why)
				}
			}
		}
	}
	return nil
}

// refuses says why image is not allowed, or "".
func (p ImagePolicy) refuses(image string) string {
	ref, err := parseImage(image)
	if err != nil {
		return "is not a valid image reference: " + err.Error()
	}
	if p.RequireDigest && ref.digest == "" {
		return "has no digest (name@sha256:...), and --require-image-digest requires one"
	}
	if p.AllowsAny() {
		return ""
	}
	for _, e := range p.Allowed {
		a, err := normalizeAllowed(e)
		if err != nil {
			continue // Validate refuses it at start
		}
		if a == ref.domain || ref.repository == a || strings.HasPrefix(ref.repository, a+"/") {
			return ""
		}
	}
	return fmt.Sprintf("(%s) is not allowed: --allowed-images allows %s", ref.repository, strings.Join(p.Allowed, ", "))
}

// The grammar of image references (github.com/distribution/reference).
var (
	domainComponent = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	domainRE        = regexp.MustCompile(`^(?:` + domainComponent + `(?:\.` + domainComponent + `)*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?$`)
	pathComponentRE = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|[-]+)[a-z0-9]+)*$`)
	tagRE           = regexp.MustCompile(`^[\w][\w.-]{0,127}$`)
	digestRE        = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}$`)
)

// imageRef is an image reference, normalised.
type imageRef struct {
	domain     string // lower case; docker.io for Docker Hub
	repository string // domain/path, e.g. docker.io/library/nginx
	tag        string
	digest     string
}

// parseImage reads an image reference and normalises its name the way
// container runtimes do: no registry host means Docker Hub, a one-segment
// Docker Hub name is an official image under library/.
func parseImage(s string) (imageRef, error) {
	var ref imageRef
	name := s
	if n, d, ok := strings.Cut(s, "@"); ok {
		if !digestRE.MatchString(d) {
			return ref, fmt.Errorf("malformed digest %q", d)
		}
		name, ref.digest = n, d
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		if !tagRE.MatchString(name[i+1:]) {
			return ref, fmt.Errorf("malformed tag %q", name[i+1:])
		}
		name, ref.tag = name[:i], name[i+1:]
	}
	domain, path, err := splitName(name)
	if err != nil {
		return ref, err
	}
	ref.domain, ref.repository = domain, domain+"/"+path
	return ref, nil
}

// splitName splits a repository name into its registry host and path,
// normalised, and checks both.
func splitName(name string) (domain, path string, err error) {
	if name == "" {
		return "", "", errors.New("empty name")
	}
	first, rest, found := strings.Cut(name, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost" || strings.ToLower(first) != first) {
		domain, path = strings.ToLower(first), rest
	} else {
		domain, path = "docker.io", name
	}
	if domain == "index.docker.io" {
		domain = "docker.io"
	}
	if domain == "docker.io" && !strings.Contains(path, "/") {
		path = "library/" + path
	}
	if !domainRE.MatchString(domain) {
		return "", "", fmt.Errorf("malformed registry host %q", domain)
	}
	for _, c := range strings.Split(path, "/") {
		if !pathComponentRE.MatchString(c) {
			return "", "", fmt.Errorf("malformed path segment %q (lower case letters, digits and separators)", c)
		}
	}
	if len(domain)+1+len(path) > 255 {
		return "", "", errors.New("name longer than 255 characters")
	}
	return domain, path, nil
}

// normalizeAllowed reads an entry of Allowed: "*", a registry host (no
// slash, with a dot or a port, or localhost), or a repository prefix,
// normalised like an image name. It has no tag, digest or scheme.
func normalizeAllowed(e string) (string, error) {
	switch {
	case e == "*":
		return e, nil
	case strings.Contains(e, "://"):
		return "", errors.New("no scheme: write the registry host, e.g. registry.example.com")
	case strings.Contains(e, "*"):
		return "", errors.New(`wildcards are not supported: a registry host or repository prefix allows everything below it, "*" alone allows any image`)
	case strings.Contains(e, "@"):
		return "", errors.New("no digest: entries are registries or repositories")
	case strings.TrimSpace(e) != e || e == "":
		return "", errors.New("empty or padded with blanks")
	}
	if !strings.Contains(e, "/") && (strings.ContainsAny(e, ".:") || e == "localhost") {
		if _, port, ok := strings.Cut(e, ":"); ok && strings.Trim(port, "0123456789") != "" {
			return "", errors.New("no tag: entries are registries or repositories")
		}
		if !domainRE.MatchString(e) {
			return "", fmt.Errorf("malformed registry host %q", e)
		}
		e = strings.ToLower(e)
		if e == "index.docker.io" {
			e = "docker.io"
		}
		return e, nil
	}
	if i := strings.LastIndex(e, ":"); i > strings.Index(e, "/") && strings.Contains(e, "/") {
		return "", errors.New("no tag: entries are registries or repositories")
	}
	domain, path, err := splitName(e)
	if err != nil {
		return "", err
	}
	return domain + "/" + path, nil
}
