package main

// -web-standin: a local stand-in of the web server image that the packages
// run by default (channels/packages/simplewebapp/*/instance.yaml), for
// clusters that reach no registry: nginx and its libraries from this
// machine's Debian packages, configured like nginx-unprivileged (port 8080,
// uid 101, everything it writes under /tmp), and named like the upstream
// image so that a node that imported it runs the packages unchanged.

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"example.com/simplewebapp-operator/hack/internal/reproducible"
)

const (
	// The packages' default spec.image, which the stand-in takes the name of.
	webImage         = "docker.io/nginxinc/nginx-unprivileged:1.27.4-alpine"
	webArchivePrefix = "web-standin-"
	// nginx-unprivileged's user and group; the packages' pods run as 101.
	webUID = 101
	// The label (config) and annotation (index) that tell the stand-in from
	// the upstream image it is named after.
	standinKey = "com.example.simplewebapp.stand-in"
	nginxBin   = "/usr/sbin/nginx"
	mimeTypes  = "/etc/nginx/mime.types"
)

// multiarch is Debian's library directory triplet of each GOARCH.
var multiarch = map[string]string{
	"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "ppc64le": "powerpc64le-linux-gnu",
	"riscv64": "riscv64-linux-gnu", "s390x": "s390x-linux-gnu",
}

// nginx-unprivileged's nginx.conf, with its log files as the streams they
// are links to there. No dynamic modules: the packages' server blocks use
// only compiled-in ones, and Debian's modules-enabled is left out. Every
// temporary path is under /tmp (an emptyDir in the pods), as is the pid.
const webNginxConf = `worker_processes  auto;

error_log  stderr notice;
pid        /tmp/nginx.pid;

events {
    worker_connections  1024;
}

http {
    client_body_temp_path /tmp/client_temp;
    proxy_temp_path       /tmp/proxy_temp_path;
    fastcgi_temp_path     /tmp/fastcgi_temp;
    uwsgi_temp_path       /tmp/uwsgi_temp;
    scgi_temp_path        /tmp/scgi_temp;

    include       /etc/nginx/mime.types;
    default_type  application/octet-stream;

    log_format  main  '$remote_addr - $remote_user [$time_local] "$request" '
                      '$status $body_bytes_sent "$http_referer" '
                      '"$http_user_agent" "$http_x_forwarded_for"';

    access_log  /dev/stdout  main;

    sendfile        on;
    keepalive_timeout  65;

    include /etc/nginx/conf.d/*.conf;
}
`

// The image's own server, as upstream's: the packages mount their ConfigMap
// over /etc/nginx/conf.d and so replace it.
const webDefaultConf = `server {
    listen       8080;
    server_name  localhost;

    location / {
        root   /usr/share/nginx/html;
        index  index.html;
    }
}
`

const webIndexHTML = `<!DOCTYPE html>
<html>
<head><title>nginx (local stand-in)</title></head>
<body>
<p>nginx: a local stand-in for ` + webImage + `, built from Debian's nginx by hack/image -web-standin.</p>
</body>
</html>
`

// nobody and nogroup: what a master started as root looks up for its
// workers (Debian's compiled-in user and group).
const (
	webPasswd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nginx:x:101:101:nginx:/nonexistent:/sbin/nologin\n"
	webGroup = "root:x:0:\nnogroup:x:65534:\nnginx:x:101:\n"
)

func runWebStandin(arch, image, out string) error {
	if _, ok := arches[arch]; !ok {
		return fmt.Errorf("-arch %q: one of %s", arch, strings.Join(sortedArches(), ", "))
	}
	root, err := reproducible.RepoRoot()
	if err != nil {
		return err
	}
	if image == "" {
		image = webImage
	}
	ref, err := name.NewTag(image)
	if err != nil {
		return fmt.Errorf("-image %q: a name[:tag]: %w", image, err)
	}
	if out == "" {
		out = filepath.Join(root, "dist", webArchivePrefix+arch+".oci.tar")
	}
	epoch, err := sourceDateEpoch(root)
	if err != nil {
		return err
	}
	host, debVersion, err := hostNginx(arch)
	if err != nil {
		return err
	}
	img, err := buildWeb(webLayout(host, arch), arch, debVersion, epoch)
	if err != nil {
		return err
	}
	digest, err := writeArchive(out, img, ref, image, epoch, map[string]string{standinKey: standinText(debVersion)})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "image: %s: %s (local stand-in, Debian nginx %s, linux/%s, time %s)\n", out, image, debVersion, arch, epoch.UTC().Format(time.RFC3339))
	fmt.Println(digest)
	return nil
}

func standinText(debVersion string) string {
	return "local stand-in for " + webImage + ", built from Debian's nginx " + debVersion + " by hack/image -web-standin; not the upstream image"
}

// hostNginx reads this machine's nginx, every shared object it loads, and
// mime.types, as layer entries at the paths they have here.
func hostNginx(arch string) ([]entry, string, error) {
	for _, f := range []string{nginxBin, mimeTypes} {
		if _, err := os.Stat(f); err != nil {
			return nil, "", fmt.Errorf("%w: the stand-in is built from Debian's nginx; as root: apt-get install --no-install-recommends nginx-light", err)
		}
	}
	objs, err := sharedObjects(nginxBin, arch)
	if err != nil {
		return nil, "", err
	}
	var es []entry
	for _, p := range append([]string{nginxBin, mimeTypes}, objs...) {
		data, err := os.ReadFile(p) // through symbolic links: the image holds the files
		if err != nil {
			return nil, "", err
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil, "", err
		}
		es = append(es, entry{name: strings.TrimPrefix(p, "/"), mode: int64(fi.Mode().Perm()), data: data})
	}
	return es, debianVersion(), nil
}

// debianVersion is the nginx package's version, for the labels.
func debianVersion() string {
	if out, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "nginx").Output(); err == nil && len(out) > 0 {
		return string(out)
	}
	out, _ := exec.Command(nginxBin, "-v").CombinedOutput()
	if m := regexp.MustCompile(`nginx/(\S+)`).FindSubmatch(out); m != nil {
		return string(m[1])
	}
	return "unknown"
}

// sharedObjects is what the dynamic loader maps for bin: its PT_INTERP,
// then its DT_NEEDED libraries and theirs, each where the loader finds it
// without ld.so.cache (the image has none): Debian's multiarch directories,
// then /lib and /usr/lib. Read from the ELF files, not from ldd, which runs
// the binary's loader.
func sharedObjects(bin, arch string) ([]string, error) {
	want := arches[arch]
	open := func(p string) (*elf.File, error) {
		f, err := elf.Open(p)
		if err != nil {
			return nil, err
		}
		if f.Machine != want.machine || f.Data != want.data {
			f.Close()
			return nil, fmt.Errorf("%s is for %s, not %s: the stand-in is built from this machine's nginx, so -arch must be this machine's", p, f.Machine, arch)
		}
		return f, nil
	}
	f, err := open(bin)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var interp string
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return nil, fmt.Errorf("%s: PT_INTERP: %w", bin, err)
			}
			interp = string(bytes.TrimRight(b, "\x00"))
		}
	}
	if interp == "" {
		return nil, fmt.Errorf("%s: no PT_INTERP: not a dynamically linked binary", bin)
	}
	dirs := []string{"/lib/" + multiarch[arch], "/usr/lib/" + multiarch[arch], "/lib", "/usr/lib"}
	out := []string{interp}
	seen := map[string]bool{}
	queue, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", bin, err)
	}
	for len(queue) > 0 {
		lib := queue[0]
		queue = queue[1:]
		// libc needs the loader by its soname, which the loader already
		// running answers to: no second copy.
		if seen[lib] || lib == path.Base(interp) {
			continue
		}
		seen[lib] = true
		var found string
		var needs []string
		for _, d := range dirs {
			p := filepath.Join(d, lib)
			lf, err := open(p)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return nil, err
			}
			needs, err = lf.ImportedLibraries()
			lf.Close()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			found = p
			break
		}
		if found == "" {
			return nil, fmt.Errorf("%s needs %s, found in none of %s", bin, lib, strings.Join(dirs, ", "))
		}
		out = append(out, found)
		queue = append(queue, needs...)
	}
	slices.Sort(out)
	return out, nil
}

// webLayout is the stand-in's file system in tar order: host's files, the
// configuration, the users, and the directories above them all.
func webLayout(host []entry, arch string) []entry {
	es := append(slices.Clone(host),
		entry{name: "etc/group", mode: 0o644, data: []byte(webGroup)},
		entry{name: "etc/passwd", mode: 0o644, data: []byte(webPasswd)},
		entry{name: "etc/nginx/nginx.conf", mode: 0o644, data: []byte(webNginxConf)},
		entry{name: "etc/nginx/conf.d/default.conf", mode: 0o644, data: []byte(webDefaultConf)},
		entry{name: "usr/share/nginx/html/index.html", mode: 0o644, data: []byte(webIndexHTML)},
		// The pods mount an emptyDir here; without one (docker run) it is the
		// image's, sticky and world-writable as in any base image.
		entry{name: "tmp/", mode: 0o1777},
		// Debian's compiled-in log and temporary paths, should a replaced
		// nginx.conf fall back to them: the logs go to the container's
		// streams (as upstream's links do), the temporary files to /tmp, so
		// that nothing is written to the read-only root.
		entry{name: "var/log/nginx/access.log", mode: 0o777, link: "/dev/stdout"},
		entry{name: "var/log/nginx/error.log", mode: 0o777, link: "/dev/stderr"},
		entry{name: "var/lib/nginx", mode: 0o777, link: "/tmp"},
	)
	dirs := map[string]bool{}
	for _, e := range es {
		for d := path.Dir(strings.TrimSuffix(e.name, "/")); d != "."; d = path.Dir(d) {
			dirs[d+"/"] = true
		}
	}
	for d := range dirs {
		if !slices.ContainsFunc(es, func(e entry) bool { return e.name == d }) {
			es = append(es, entry{name: d, mode: 0o755})
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	return es
}

// buildWeb assembles the stand-in: one layer, and the config of
// nginx-unprivileged but for the entrypoint (no shell, so no
// docker-entrypoint.sh: nginx itself, the error log on stderr from the
// start rather than at a compiled-in path).
func buildWeb(es []entry, arch, debVersion string, epoch time.Time) (v1.Image, error) {
	return oneLayerImage(es, arch, epoch,
		"hack/image -web-standin: Debian nginx "+debVersion+" ("+nginxBin+", its shared libraries, "+mimeTypes+"), nginx.conf after nginx-unprivileged's, /etc/passwd, /etc/group, /tmp",
		v1.Config{
			User:         fmt.Sprint(webUID),
			Entrypoint:   []string{nginxBin, "-e", "stderr"},
			Cmd:          []string{"-g", "daemon off;"},
			Env:          []string{envPATH},
			ExposedPorts: map[string]struct{}{"8080/tcp": {}},
			StopSignal:   "SIGQUIT",
			Labels: map[string]string{
				standinKey:                             standinText(debVersion),
				"org.opencontainers.image.title":       "nginx-unprivileged (local stand-in)",
				"org.opencontainers.image.description": standinText(debVersion),
				"org.opencontainers.image.version":     debVersion,
			},
		})
}
