package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"sigs.k8s.io/kustomize/api/pkg/util"
	"sigs.k8s.io/yaml"
)

// chartArchive is the file name helm package gives the chart.
func chartArchive(name, version string) string { return name + "-" + version + ".tgz" }

// chart packages config/helm/simplewebapp-operator as `helm package
// --version V --app-version V` would, but reproducibly: helm stamps every
// entry with the current time. The layout is helm's: the files below one
// directory named after the chart, no directory entries, mode 0644, what
// .helmignore ignores left out. The chart's default image is the release
// image, so that the chart installs what install.yaml installs, and its
// README's values table is regenerated for it (hack/helmdocs).
func (r *release) chart() error {
	dir := filepath.Join(r.root, chartDir)
	files, err := chartFiles(dir)
	if err != nil {
		return err
	}
	var meta struct{ Name string }
	for i, f := range files {
		var err error
		switch f.name {
		case "Chart.yaml":
			if err = yaml.Unmarshal(f.data, &meta); err == nil {
				files[i].data, err = setChartVersion(f.data, r.version)
			}
		case "values.yaml":
			name, tag, _ := util.SplitImageName(r.image)
			files[i].data, err = setImage(f.data, name, tag, r.version)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	if meta.Name == "" {
		return fmt.Errorf("%s: no Chart.yaml with a name", dir)
	}
	if err := r.helmDocs(files); err != nil {
		return err
	}
	for i := range files {
		files[i].name = meta.Name + "/" + files[i].name
	}
	b, err := tarGz(files, r.epoch)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(r.stage, chartArchive(meta.Name, r.version)), b, 0o644)
}

// chartFiles are the regular files of the chart in dir, by slash-separated
// path relative to dir, without those .helmignore ignores and, as helm does,
// without hidden files in templates/.
func chartFiles(dir string) ([]file, error) {
	ignored, err := readHelmignore(filepath.Join(dir, ".helmignore"))
	if err != nil {
		return nil, err
	}
	var files []file
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignored(d.Name(), d.IsDir()) || strings.HasPrefix(rel, "templates/.") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			return nil
		case !d.Type().IsRegular():
			return fmt.Errorf("%s: not a regular file (helm packages no links)", p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		files = append(files, file{name: rel, mode: 0o644, data: b})
		return nil
	})
	return files, err
}

// readHelmignore reads the patterns of a .helmignore. Only what this chart
// needs is supported: comments, and globs matched against a file's or a
// directory's base name ("dir/" for directories only); anything else is an
// error rather than a silent difference from helm.
func readHelmignore(p string) (func(name string, dir bool) bool, error) {
	b, err := os.ReadFile(p)
	if os.IsNotExist(err) {
		return func(string, bool) bool { return false }, nil
	}
	if err != nil {
		return nil, err
	}
	type pattern struct {
		glob    string
		dirOnly bool
	}
	var patterns []pattern
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pat := pattern{glob: strings.TrimSuffix(line, "/"), dirOnly: strings.HasSuffix(line, "/")}
		if strings.HasPrefix(line, "!") || strings.Contains(pat.glob, "/") || strings.Contains(pat.glob, "**") {
			return nil, fmt.Errorf("%s: pattern %q: hack/release supports base-name globs only", p, line)
		}
		if _, err := path.Match(pat.glob, ""); err != nil {
			return nil, fmt.Errorf("%s: pattern %q: %w", p, line, err)
		}
		patterns = append(patterns, pat)
	}
	return func(name string, dir bool) bool {
		for _, pat := range patterns {
			if ok, _ := path.Match(pat.glob, name); ok && (dir || !pat.dirOnly) {
				return true
			}
		}
		return false
	}, sc.Err()
}

// setChartVersion sets version and appVersion in Chart.yaml, as make
// sync-version does, keeping the rest (and its comments) as it is.
func setChartVersion(chart []byte, version string) ([]byte, error) {
	out, err := replaceLine(chart, `version`, version)
	if err != nil {
		return nil, err
	}
	if out, err = replaceLine(out, `appVersion`, version); err != nil {
		return nil, err
	}
	var got struct{ Version, AppVersion string }
	if err := yaml.Unmarshal(out, &got); err != nil {
		return nil, err
	}
	if got.Version != version || got.AppVersion != version {
		return nil, fmt.Errorf("version %q, appVersion %q after setting %q", got.Version, got.AppVersion, version)
	}
	return out, nil
}

// setImage sets the defaults of image.repository and image.tag in
// values.yaml (the tag empty, meaning appVersion, when it is the version),
// keeping the rest as it is.
func setImage(values []byte, name, tag, version string) ([]byte, error) {
	if tag == version {
		tag = ""
	}
	// The image: block: from its key to the next top-level line.
	block := regexp.MustCompile(`(?m)^image:\n((?:[ #].*\n|\n)*)`).FindSubmatchIndex(values)
	if block == nil {
		return nil, fmt.Errorf("no top-level image: block")
	}
	inner := values[block[2]:block[3]]
	inner, err := replaceLine(inner, "  repository", name)
	if err != nil {
		return nil, err
	}
	if inner, err = replaceLine(inner, "  tag", tag); err != nil {
		return nil, err
	}
	out := append(append(append([]byte{}, values[:block[2]]...), inner...), values[block[3]:]...)
	var got struct {
		Image struct{ Repository, Tag string }
	}
	if err := yaml.Unmarshal(out, &got); err != nil {
		return nil, err
	}
	if got.Image.Repository != name || got.Image.Tag != tag {
		return nil, fmt.Errorf("image %q:%q after setting %q:%q", got.Image.Repository, got.Image.Tag, name, tag)
	}
	return out, nil
}

// replaceLine replaces the value of the one line "key: ..." in b with value,
// double-quoted (a JSON string is a YAML one).
func replaceLine(b []byte, key, value string) ([]byte, error) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `:.*$`)
	if n := len(re.FindAllIndex(b, -1)); n != 1 {
		return nil, fmt.Errorf("%d lines %q, want 1", n, key+":")
	}
	q, err := json.Marshal(value)
	if err != nil {
		return nil, err
	}
	return re.ReplaceAllLiteral(b, append([]byte(key+": "), q...)), nil
}

// helmDocs regenerates the values table of the chart's README.md from its
// (changed) values.yaml with hack/helmdocs, in a temporary directory.
func (r *release) helmDocs(files []file) error {
	tmp, err := os.MkdirTemp("", "swa-release-chart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	readme := -1
	for i, f := range files {
		switch f.name {
		case "README.md":
			readme = i
		case "values.yaml":
		default:
			continue
		}
		if err := os.WriteFile(filepath.Join(tmp, f.name), f.data, 0o644); err != nil {
			return err
		}
	}
	if readme < 0 {
		return nil
	}
	cmd := exec.Command("go", "run", "./hack/helmdocs", tmp)
	cmd.Dir = r.root
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("hack/helmdocs: %w", err)
	}
	files[readme].data, err = os.ReadFile(filepath.Join(tmp, "README.md"))
	return err
}
