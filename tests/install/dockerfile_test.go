package install_test

import (
	"bufio"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The binaries the image holds (hack/build.sh builds both).
var imageBinaries = []string{".", "./cmd/kubectl-swa"}

// TestDockerfileCopiesWhatTheBuildNeeds derives what the image build reads
// from `go list -deps` of both binaries (their Go and embedded files in this
// module, for linux) plus go.mod, go.sum, VERSION and hack/build.sh, and
// checks that the build stage's COPY lines, through .dockerignore, put each
// of them where the build looks. Every COPY line must be needed: removing
// any one of them makes the check fail. Then the build stage is played out:
// what the COPY lines copy, in an empty directory without .git, builds with
// hack/build.sh.
func TestDockerfileCopiesWhatTheBuildNeeds(t *testing.T) {
	needed := buildInputs(t)
	ignore := dockerignore(t)
	context := contextFiles(t, ignore)
	copies := buildStageCopies(t)

	if missing := notCopied(needed, context, copies); len(missing) > 0 {
		t.Fatalf("the Dockerfile's build stage leaves out what the build reads:\n  %s", strings.Join(missing, "\n  "))
	}
	for i, c := range copies {
		without := slices.Delete(slices.Clone(copies), i, i+1)
		if len(notCopied(needed, context, without)) == 0 {
			t.Errorf("Dockerfile line %d (%s) copies nothing the build needs: drop it", c.line, c.text)
		}
	}
	for _, f := range needed {
		if ignored(ignore, f) {
			t.Errorf(".dockerignore excludes %s, which the build reads", f)
		}
	}

	// Played out: the files as the COPY lines place them, then the RUN.
	src := filepath.Join(t.TempDir(), "src")
	for _, f := range context {
		for _, c := range copies {
			dst, ok := c.place(f)
			if !ok {
				continue
			}
			b, err := os.ReadFile(filepath.Join(repoRoot, f))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(src, dst)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, dst), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := exec.CommandContext(t.Context(), "bash", "hack/build.sh", filepath.Join(t.TempDir(), "out"))
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "REVISION=dockerfile-test", "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/build.sh in a directory holding only what the Dockerfile copies: %v\n%s", err, out)
	}
}

// buildInputs lists, relative to the repository, every file the release
// build reads.
func buildInputs(t *testing.T) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f",
		`{{if and .Module .Module.Main}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{end}}`}, imageBinaries...)...)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "GOOS=linux", "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	files := []string{"go.mod", "go.sum", "VERSION", "hack/build.sh"}
	for _, line := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(repoRoot, line)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	slices.Sort(files)
	files = slices.Compact(files)
	if !slices.Contains(files, "main.go") || !slices.ContainsFunc(files, func(f string) bool { return strings.HasPrefix(f, "cmd/kubectl-swa/") }) {
		t.Fatalf("go list found neither binary's files: %v", files)
	}
	return files
}

// copyLine is one COPY of the build context in the build stage.
type copyLine struct {
	line      int
	text      string
	sources   []string // relative to the context, "/" suffix kept
	dest      string   // relative to WORKDIR
	manyFiles bool
}

// place says where a context file lands in the build stage's WORKDIR, if
// this line copies it (Docker's rules: a directory's contents go into dest;
// a file into dest when dest ends in "/" or there are several sources).
func (c copyLine) place(file string) (string, bool) {
	for _, s := range c.sources {
		s = strings.TrimPrefix(s, "./")
		if dir, ok := strings.CutSuffix(s, "/"); ok || isDir(s) {
			if rest, ok := strings.CutPrefix(file, dir+"/"); ok {
				return path.Join(c.dest, rest), true
			}
			continue
		}
		if file == s {
			if strings.HasSuffix(c.dest, "/") || c.manyFiles || c.dest == "." {
				return path.Join(c.dest, path.Base(s)), true
			}
			return path.Clean(c.dest), true
		}
	}
	return "", false
}

func isDir(rel string) bool {
	fi, err := os.Stat(filepath.Join(repoRoot, rel))
	return err == nil && fi.IsDir()
}

// buildStageCopies reads the COPY lines of the Dockerfile's first stage
// (those not from another stage). The WORKDIR is where the build runs.
func buildStageCopies(t *testing.T) []copyLine {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []copyLine
	stages := 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			stages++
		case "COPY":
			if stages != 1 || len(fields) < 3 || strings.HasPrefix(fields[1], "--from") {
				continue
			}
			args := slices.DeleteFunc(fields[1:], func(a string) bool { return strings.HasPrefix(a, "--") })
			out = append(out, copyLine{line: n, text: sc.Text(), sources: args[:len(args)-1],
				dest: strings.TrimPrefix(args[len(args)-1], "./"), manyFiles: len(args) > 2})
		}
	}
	if len(out) == 0 {
		t.Fatal("Dockerfile: no COPY in the build stage")
	}
	for i := range out {
		if out[i].dest == "" {
			out[i].dest = "."
		}
	}
	return out
}

// notCopied lists the needed files that no COPY line places at their own
// path under WORKDIR.
func notCopied(needed, context []string, copies []copyLine) []string {
	placed := map[string]bool{}
	for _, f := range context {
		for _, c := range copies {
			if dst, ok := c.place(f); ok {
				placed[dst] = true
			}
		}
	}
	var missing []string
	for _, f := range needed {
		if !placed[f] {
			missing = append(missing, f)
		}
	}
	return missing
}

// dockerignore reads .dockerignore's patterns.
func dockerignore(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") || strings.Contains(l, "**") {
			t.Fatalf(".dockerignore: %q: keep to plain patterns, which this test reads as Docker does", l)
		}
		patterns = append(patterns, strings.Trim(l, "/"))
	}
	return patterns
}

// ignored: a pattern matches the path or one of its parent directories.
func ignored(patterns []string, file string) bool {
	for p := file; p != "."; p = path.Dir(p) {
		for _, pat := range patterns {
			if ok, _ := path.Match(pat, p); ok {
				return true
			}
		}
	}
	return false
}

// contextFiles is the build context: the repository's files that
// .dockerignore keeps.
func contextFiles(t *testing.T, ignore []string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard")
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if _, err := os.Stat(filepath.Join(repoRoot, f)); err == nil && !ignored(ignore, f) {
			files = append(files, f)
		}
	}
	return files
}
