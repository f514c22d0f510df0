package main

import (
	"archive/tar"
	"io"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
)

// The stand-in's layout and config, from made-up host files (so without
// Debian's nginx; tests/webserver builds and runs the real one): every
// directory above a file is there, in tar order; two builds are one
// image; the config is nginx-unprivileged's shape.
func TestWebStandinImage(t *testing.T) {
	host := []entry{
		{name: "usr/sbin/nginx", mode: 0o755, data: []byte("nginx")},
		{name: "lib64/ld-linux-x86-64.so.2", mode: 0o755, data: []byte("ld")},
		{name: "lib/x86_64-linux-gnu/libc.so.6", mode: 0o755, data: []byte("libc")},
		{name: "etc/nginx/mime.types", mode: 0o644, data: []byte("types {}")},
	}
	es := webLayout(host, "amd64")
	var names []string
	for _, e := range es {
		names = append(names, e.name)
	}
	if !slices.IsSorted(names) {
		t.Errorf("entries not in order: %v", names)
	}
	for _, e := range es {
		if d := path.Dir(strings.TrimSuffix(e.name, "/")); d != "." && !slices.Contains(names, d+"/") {
			t.Errorf("%s without its directory %s/", e.name, d)
		}
	}
	for _, want := range []string{"etc/nginx/nginx.conf", "etc/nginx/conf.d/default.conf", "etc/passwd", "etc/group", "tmp/", "usr/share/nginx/html/index.html", "var/log/nginx/error.log"} {
		if !slices.Contains(names, want) {
			t.Errorf("the layout lacks %s", want)
		}
	}

	epoch := time.Unix(1700000000, 0).UTC()
	a, err := buildWeb(es, "amd64", "1.22.1-9", epoch)
	if err != nil {
		t.Fatal(err)
	}
	b, err := buildWeb(webLayout(host, "amd64"), "amd64", "1.22.1-9", epoch)
	if err != nil {
		t.Fatal(err)
	}
	da, _ := a.Digest()
	db, _ := b.Digest()
	if da != db {
		t.Errorf("two builds: %s and %s", da, db)
	}
	cf, err := a.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if c.User != "101" || c.StopSignal != "SIGQUIT" || !slices.Equal(c.Entrypoint, []string{"/usr/sbin/nginx", "-e", "stderr"}) || !slices.Equal(c.Cmd, []string{"-g", "daemon off;"}) {
		t.Errorf("config: user %q, stop signal %q, entrypoint %q, cmd %q", c.User, c.StopSignal, c.Entrypoint, c.Cmd)
	}
	if _, ok := c.ExposedPorts["8080/tcp"]; !ok || !strings.Contains(c.Labels[standinKey], "Debian") {
		t.Errorf("config: ports %v, labels %v", c.ExposedPorts, c.Labels)
	}

	// Every file has the build's time; the ones nginx writes go to /tmp.
	layers, _ := a.Layers()
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: time %s owner %d:%d", h.Name, h.ModTime, h.Uid, h.Gid)
		}
		if h.Name == "etc/nginx/nginx.conf" {
			conf, _ := io.ReadAll(tr)
			for _, line := range strings.Split(string(conf), "\n") {
				f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(line), ";"))
				if len(f) >= 2 && (f[0] == "pid" || strings.HasSuffix(f[0], "_temp_path")) && !strings.HasPrefix(f[1], "/tmp/") {
					t.Errorf("nginx.conf: %q writes outside /tmp", line)
				}
			}
		}
	}

	// The archive names it as the kubelet asks for it.
	ref, _ := name.NewTag(webImage)
	archive, err := ociArchive(a, ref, webImage, epoch, map[string]string{standinKey: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(archive), `"io.containerd.image.name":"`+webImage+`"`) {
		t.Errorf("index.json lacks io.containerd.image.name %s", webImage)
	}
}

// sharedObjects finds the loader and libc of a dynamically linked Debian
// binary at the paths the loader looks in.
func TestSharedObjects(t *testing.T) {
	if _, ok := multiarch[runtime.GOARCH]; !ok {
		t.Fatalf("no multiarch triplet for %s", runtime.GOARCH)
	}
	sh, err := os.Readlink("/bin/sh") // dash on Debian; any dynamically linked binary does
	if err != nil {
		sh = "sh"
	}
	bin := "/bin/" + path.Base(sh)
	objs, err := sharedObjects(bin, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	libc := "/lib/" + multiarch[runtime.GOARCH] + "/libc.so.6"
	if !slices.Contains(objs, libc) {
		t.Errorf("%s: %v, want %s among them", bin, objs, libc)
	}
	var loaders int
	for _, o := range objs {
		if strings.HasPrefix(path.Base(o), "ld-linux") || strings.HasPrefix(path.Base(o), "ld64") {
			loaders++
		}
	}
	if loaders != 1 {
		t.Errorf("%s: %v, want the loader once", bin, objs)
	}

	other := "arm64"
	if runtime.GOARCH == other {
		other = "amd64"
	}
	if _, err := sharedObjects(bin, other); err == nil || !strings.Contains(err.Error(), "this machine's") {
		t.Errorf("sharedObjects for %s on %s: %v", other, runtime.GOARCH, err)
	}
}
