//go:build webserver

package webserver

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"example.com/simplewebapp-operator/internal/testkit"
)

const (
	webImage   = "docker.io/nginxinc/nginx-unprivileged:1.27.4-alpine"
	standinKey = "com.example.simplewebapp.stand-in"
)

// TestWebStandin: `go run ./hack/image -web-standin` builds the stand-in of
// the packages' web server image from Debian's nginx, named as containerd
// needs to find it, reproducibly; and the image serves each package's
// rendered config as the kubelet would run it: unpacked into an OCI bundle
// and run by runc as uid 101 with a read-only root, no capabilities, the
// ConfigMaps bound where the Deployment mounts them, a tmpfs at /tmp, the
// pod's limits, in a network namespace of its own.
func TestWebStandin(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("runs containers with runc: run it as root (CI does)")
	}
	runc := findRunc(t)
	t.Logf("runc: %s", runc)
	dir := t.TempDir()
	build := func(out string) string {
		cmd := exec.CommandContext(t.Context(), "go", "run", "./hack/image", "-web-standin", "-o", out)
		cmd.Dir = filepath.Join("..", "..")
		cmd.Stderr = os.Stderr
		digest, err := cmd.Output()
		if err != nil {
			t.Fatalf("hack/image -web-standin: %v", err)
		}
		return strings.TrimSpace(string(digest))
	}
	a, b := filepath.Join(dir, "a.oci.tar"), filepath.Join(dir, "b.oci.tar")
	digest := build(a)
	if other := build(b); other != digest {
		t.Errorf("two builds: %s and %s", digest, other)
	}
	archA, _ := os.ReadFile(a)
	archB, _ := os.ReadFile(b)
	if !bytes.Equal(archA, archB) {
		t.Errorf("two builds wrote different archives")
	}

	cfg, layer := readStandin(t, archA, digest)
	if cfg.Config.User != "101" || cfg.Config.StopSignal != "SIGQUIT" || cfg.Config.Labels[standinKey] == "" {
		t.Errorf("config: user %q, stop signal %q, labels %v", cfg.Config.User, cfg.Config.StopSignal, cfg.Config.Labels)
	}
	if _, ok := cfg.Config.ExposedPorts["8080/tcp"]; !ok {
		t.Errorf("config exposes %v, want 8080/tcp", cfg.Config.ExposedPorts)
	}

	for _, version := range testkit.Versions(t) {
		t.Run(version, func(t *testing.T) {
			conf, message := renderWeb(t, version, hostile)
			runStandin(t, runc, cfg, layer, conf, message)
		})
	}
}

// findRunc: SWA_RUNC, else the runc of the real node (hack/tools/build-node.sh),
// else one on PATH (Debian's runc, which `make test-webserver` installs).
func findRunc(t *testing.T) string {
	if p := os.Getenv("SWA_RUNC"); p != "" {
		return p
	}
	if out, err := exec.Command("bash", "../../hack/tools/build-node.sh", "--print").Output(); err == nil {
		if p := filepath.Join(strings.TrimSpace(string(out)), "runc"); isExec(p) {
			return p
		}
	}
	p, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal("no runc: run `make test-webserver` (installs Debian's runc), or set SWA_RUNC")
	}
	return p
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// readStandin checks the archive's index (one manifest, the digest
// printed, named for containerd) and returns the image's config and its
// layer, uncompressed.
func readStandin(t *testing.T, archive []byte, digest string) (*v1.ConfigFile, []byte) {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if files[h.Name], err = io.ReadAll(tr); err != nil {
			t.Fatal(err)
		}
	}
	blob := func(d v1.Hash) []byte { return files[path.Join("blobs", d.Algorithm, d.Hex)] }
	var idx v1.IndexManifest
	if err := json.Unmarshal(files["index.json"], &idx); err != nil || len(idx.Manifests) != 1 {
		t.Fatalf("index.json: %v, %d manifests", err, len(idx.Manifests))
	}
	desc := idx.Manifests[0]
	if desc.Digest.String() != digest {
		t.Errorf("index names %s, hack/image printed %s", desc.Digest, digest)
	}
	// `ctr images import` names the image by io.containerd.image.name, as
	// is: the normalized name the kubelet asks for.
	for _, k := range []string{"io.containerd.image.name", "org.opencontainers.image.ref.name"} {
		if got := desc.Annotations[k]; got != webImage {
			t.Errorf("%s %q, want %q", k, got, webImage)
		}
	}
	if !strings.Contains(desc.Annotations[standinKey], "Debian") {
		t.Errorf("annotation %s %q: should say it is a stand-in built from Debian's nginx", standinKey, desc.Annotations[standinKey])
	}
	if desc.Platform == nil || desc.Platform.OS != "linux" || desc.Platform.Architecture != runtime.GOARCH {
		t.Errorf("platform %v, want linux/%s", desc.Platform, runtime.GOARCH)
	}
	var m v1.Manifest
	if err := json.Unmarshal(blob(desc.Digest), &m); err != nil || len(m.Layers) != 1 {
		t.Fatalf("manifest: %v, %d layers", err, len(m.Layers))
	}
	var cf v1.ConfigFile
	if err := json.Unmarshal(blob(m.Config.Digest), &cf); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(m.Layers[0].Digest)))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return &cf, layer
}

// unpack writes the layer into dir as containerd's snapshotter would:
// modes, owners and symbolic links as in the tar.
func unpack(t *testing.T, layer []byte, dir string) {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if !filepath.IsLocal(h.Name) {
			t.Fatalf("layer entry %q outside the root", h.Name)
		}
		p := filepath.Join(dir, h.Name) //nolint:gosec // G305: h.Name is local (filepath.IsLocal above)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.Mkdir(p, 0o755)
		case tar.TypeReg:
			var data []byte
			if data, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, data, 0o600)
			}
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		default:
			t.Fatalf("layer entry %s of type %c", h.Name, h.Typeflag)
		}
		if err == nil {
			err = os.Lchown(p, h.Uid, h.Gid)
		}
		if err == nil && h.Typeflag != tar.TypeSymlink {
			err = os.Chmod(p, os.FileMode(h.Mode&0o777)|modeBits(h.Mode))
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func modeBits(m int64) os.FileMode {
	var fm os.FileMode
	if m&0o1000 != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// runStandin runs the image with the server block and the message mounted
// as the package's Deployment mounts them, and checks what it serves.
func runStandin(t *testing.T, runc string, cf *v1.ConfigFile, layer []byte, conf, message string) {
	dir, err := os.MkdirTemp("", "swa-standin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	unpack(t, layer, rootfs)
	// The ConfigMap volumes: one file per key, readable by uid 101.
	confDir, content := filepath.Join(dir, "web-nginx"), filepath.Join(dir, "web-content")
	for d, files := range map[string]map[string]string{confDir: {"default.conf": conf}, content: {"message": message}} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		for k, v := range files {
			if err := os.WriteFile(filepath.Join(d, k), []byte(v), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}

	ns := newNetns(t)
	id := fmt.Sprintf("swa-standin-%d-%d", os.Getpid(), time.Now().UnixNano())
	cgroup := "/" + id
	spec := ociSpec(cf, rootfs, ns.path, cgroup, confDir, content)
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}

	// runc's state in a directory of this test's: no other runc's
	// containers are seen or touched.
	state := filepath.Join(dir, "state")
	rc := func(args ...string) *exec.Cmd {
		return exec.Command(runc, append([]string{"--root", state}, args...)...)
	}
	// The container's stdout and stderr: pipes owned by its user, as the
	// containerd shim makes them, so that nginx (uid 101) can open
	// /dev/stdout for its access log.
	var logs syncBuffer
	var wg sync.WaitGroup
	var pipes []*os.File
	for range 2 {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Chown(101, 101); err != nil {
			t.Fatal(err)
		}
		pipes = append(pipes, w)
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = io.Copy(&logs, r); r.Close() }()
	}
	run := rc("run", "--detach", "--bundle", dir, id)
	run.Stdout, run.Stderr = pipes[0], pipes[1]
	runErr := run.Run()
	for _, w := range pipes {
		w.Close() // the container holds its copies
	}
	t.Cleanup(func() {
		if out, err := rc("delete", "--force", id).CombinedOutput(); err != nil {
			t.Errorf("runc delete -f %s: %v\n%s", id, err, out)
		}
		wg.Wait() // the pipes close when the container's processes are gone
		t.Logf("container output:\n%s", logs.String())
	})
	if runErr != nil {
		t.Fatalf("runc run: %v\n%s", runErr, logs.String())
	}

	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: ns.dial, DisableKeepAlives: true}}
	get := func(ctx context.Context, p string) (*http.Response, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:8080"+p, nil)
		if err != nil {
			return nil, "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp, string(body), err
	}
	start := time.Now()
	testkit.WaitFor(t, 20*time.Second, "the stand-in to answer /healthz", func(ctx context.Context) (bool, string) {
		resp, _, err := get(ctx, "/healthz")
		if err != nil {
			return false, err.Error()
		}
		return resp.StatusCode == http.StatusOK, resp.Status
	}, testkit.Diag(func() string { return "--- container output ---\n" + logs.String() }))
	t.Logf("serving %s after runc run", time.Since(start).Round(time.Millisecond))

	resp, body, err := get(t.Context(), "/")
	if err != nil {
		t.Fatal(err)
	}
	if body != message {
		t.Errorf("GET /: %s %q, want the message", resp.Status, body)
	}
	if got := resp.Header.Get("Content-Type"); got != "text/plain; charset=utf-8" {
		t.Errorf("GET /: Content-Type %q", got)
	}
	if resp, body, err := get(t.Context(), "/healthz"); err != nil || resp.StatusCode != http.StatusOK || body != "ok\n" {
		t.Errorf("GET /healthz: %v %q (%v)", resp, body, err)
	}

	// nginx runs as 101 (master and workers), and wrote its pid where the
	// nginx.conf says, in the container's /tmp.
	out, err := rc("state", id).Output()
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Pid    int
		Status string
	}
	if err := json.Unmarshal(out, &st); err != nil || st.Status != "running" {
		t.Fatalf("runc state: %s (%v)", out, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", st.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(status, []byte("\nUid:\t101\t101\t101\t101\n")) || !bytes.Contains(status, []byte("\nCapEff:\t0000000000000000\n")) {
		t.Errorf("nginx master's status: want uid 101, no capabilities:\n%s", status)
	}
	if pid, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/tmp/nginx.pid", st.Pid)); err != nil || strings.TrimSpace(string(pid)) != "1" {
		t.Errorf("/tmp/nginx.pid in the container: %q (%v), want 1", pid, err)
	}
	for _, f := range []string{"memory.peak", "memory.max_usage_in_bytes"} {
		for _, base := range []string{"/sys/fs/cgroup" + cgroup, "/sys/fs/cgroup/memory" + cgroup} {
			if b, err := os.ReadFile(filepath.Join(base, f)); err == nil {
				t.Logf("memory peak (%s): %s bytes", f, strings.TrimSpace(string(b)))
			}
		}
	}

	// SIGQUIT, the image's stop signal: nginx shuts down gracefully.
	if out, err := rc("kill", id, "QUIT").CombinedOutput(); err != nil {
		t.Fatalf("runc kill QUIT: %v\n%s", err, out)
	}
	testkit.WaitFor(t, 20*time.Second, "nginx to stop on SIGQUIT", func(ctx context.Context) (bool, string) {
		out, err := rc("state", id).Output()
		if err != nil {
			return false, err.Error()
		}
		return bytes.Contains(out, []byte(`"status": "stopped"`)), string(out)
	})
	if strings.Contains(logs.String(), "[emerg]") || strings.Contains(logs.String(), "[alert]") {
		t.Errorf("nginx logged errors:\n%s", logs.String())
	}
}

// ociSpec is the runtime config that containerd's CRI would give the
// package's web container (for the parts that matter here): the image's
// entrypoint, command and environment; the pod's user, no capabilities,
// no new privileges, a read-only root; the volumes; the container's limits
// (cpu 200m, memory 64Mi).
func ociSpec(cf *v1.ConfigFile, rootfs, netns, cgroup, confDir, content string) map[string]any {
	type m = map[string]any
	mount := func(dst, typ, src string, opts ...string) m {
		return m{"destination": dst, "type": typ, "source": src, "options": opts}
	}
	return m{
		"ociVersion": "1.0.2",
		"hostname":   "web",
		"root":       m{"path": rootfs, "readonly": true},
		"process": m{
			"user":            m{"uid": 101, "gid": 101},
			"args":            append(append([]string{}, cf.Config.Entrypoint...), cf.Config.Cmd...),
			"env":             cf.Config.Env,
			"cwd":             "/",
			"noNewPrivileges": true,
			"capabilities":    m{"bounding": []string{}, "effective": []string{}, "permitted": []string{}},
		},
		"mounts": []m{
			mount("/proc", "proc", "proc", "nosuid", "noexec", "nodev"),
			mount("/dev", "tmpfs", "tmpfs", "nosuid", "strictatime", "mode=755", "size=65536k"),
			mount("/dev/pts", "devpts", "devpts", "nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"),
			mount("/dev/shm", "tmpfs", "shm", "nosuid", "noexec", "nodev", "mode=1777", "size=65536k"),
			mount("/dev/mqueue", "mqueue", "mqueue", "nosuid", "noexec", "nodev"),
			mount("/sys", "sysfs", "sysfs", "nosuid", "noexec", "nodev", "ro"),
			mount("/usr/share/nginx/content", "bind", content, "rbind", "ro"),
			mount("/etc/nginx/conf.d", "bind", confDir, "rbind", "ro"),
			mount("/tmp", "tmpfs", "tmpfs", "nosuid", "nodev", "mode=1777", "size=65536k"),
		},
		"linux": m{
			"cgroupsPath": cgroup,
			"resources": m{
				"memory": m{"limit": 64 << 20},
				"cpu":    m{"quota": 20000, "period": 100000},
			},
			"namespaces": []m{
				{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
				{"type": "network", "path": netns},
			},
			"maskedPaths":   []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"},
			"readonlyPaths": []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"},
		},
	}
}

// netns is a network namespace of the test's, with loopback up, held by one
// OS thread: the container joins it by path, and the test dials into it
// from that thread (a socket stays in the namespace it was made in).
type netns struct {
	path  string
	calls chan func()
}

func newNetns(t *testing.T) *netns {
	ns := &netns{calls: make(chan func())}
	ready := make(chan error)
	var f *os.File
	go func() {
		// Never unlocked: the thread is in another namespace, and Go ends a
		// locked thread with its goroutine rather than reuse it.
		runtime.LockOSThread()
		err := unix.Unshare(unix.CLONE_NEWNET)
		if err == nil {
			err = loUp()
		}
		if err == nil {
			f, err = os.Open("/proc/thread-self/ns/net")
		}
		ready <- err
		if err != nil {
			return
		}
		for call := range ns.calls {
			call()
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("network namespace: %v", err)
	}
	ns.path = fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd())
	t.Cleanup(func() {
		close(ns.calls)
		f.Close()
	})
	return ns
}

func loUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

func (ns *netns) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	var err error
	done := make(chan struct{})
	ns.calls <- func() {
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		close(done)
	}
	<-done
	return c, err
}

// syncBuffer collects the container's output from two pipes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
