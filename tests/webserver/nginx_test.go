//go:build webserver

// Package webserver runs the web server configuration that each package
// renders under a real nginx (Debian's, on loopback): the message is served
// as inert text, whatever it contains. It needs an nginx binary, so it is
// not part of `go test ./...`: `make test-webserver` installs nginx-light
// when missing and runs it, and CI runs it after `make test`.
package webserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/channels"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/testkit"
)

const hostile = `<script>alert("xss")</script><b>bold</b> & "quotes"`

func TestMessageIsServedAsText(t *testing.T) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		if nginx, err = exec.LookPath("/usr/sbin/nginx"); err != nil {
			t.Fatal("no nginx binary: run `make test-webserver`, which installs Debian's nginx-light")
		}
	}
	for _, version := range testkit.Versions(t) {
		t.Run(version, func(t *testing.T) {
			conf, message := renderWeb(t, version, hostile)
			base := serve(t, nginx, conf, message)

			resp := get(t, base+"/")
			body, _ := io.ReadAll(resp.Body)
			if string(body) != hostile {
				t.Errorf("body %q, want the message byte for byte", body)
			}
			for header, want := range map[string]string{
				"Content-Type":            "text/plain; charset=utf-8",
				"X-Content-Type-Options":  "nosniff",
				"Content-Security-Policy": "default-src 'none'; sandbox",
			} {
				if got := resp.Header.Get(header); got != want {
					t.Errorf("%s: %q, want %q", header, got, want)
				}
			}
			if resp := get(t, base+"/healthz"); resp.StatusCode != http.StatusOK {
				t.Errorf("/healthz: %s", resp.Status)
			}
		})
	}
}

// renderWeb renders a SimpleWebApp of the package version with the message
// and returns its ConfigMaps' data: the server block (web-nginx's
// default.conf, mounted at /etc/nginx/conf.d) and the message (web-content's
// message, mounted at /usr/share/nginx/content).
func renderWeb(t *testing.T, version, msg string) (conf, message string) {
	t.Helper()
	swa := &webappv1.SimpleWebApp{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo"},
		Spec: webappv1.SimpleWebAppSpec{Message: msg, Version: version}}
	rel, err := render.Channels{FS: channels.FS}.Resolve(context.Background(), swa.Spec)
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := render.Render(rel, swa)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range rendered.Objects {
		data, _, _ := unstructuredStrings(o.Object, "data")
		if c, ok := data["default.conf"]; ok {
			conf = c
		}
		if m, ok := data["message"]; ok {
			message = m
		}
	}
	if conf == "" || message != msg {
		t.Fatalf("render lacks the nginx config or the message (%q)", message)
	}
	return conf, message
}

// serve runs nginx with the package's server block on a free loopback port
// (instead of 8080) and the message where the pod mounts it.
func serve(t *testing.T, nginx, serverConf, message string) string {
	// Not t.TempDir (0700): nginx started as root serves from worker
	// processes running as nobody, which must be able to read the message.
	dir, err := os.MkdirTemp("", "swa-nginx-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	content := filepath.Join(dir, "content")
	if err := os.MkdirAll(content, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(content, "message"), []byte(message), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0") // loopback only
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	serverConf = strings.Replace(serverConf, "listen 8080;", "listen "+addr+";", 1)
	serverConf = strings.Replace(serverConf, "/usr/share/nginx/content", content, 1)
	main := fmt.Sprintf(`daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log;
events {}
http {
  include /etc/nginx/mime.types;
  access_log off;
  client_body_temp_path %[1]s/body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  %[2]s
}
`, dir, serverConf)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(nginx, "-p", dir, "-c", confPath, "-e", filepath.Join(dir, "error.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// SIGTERM: the master stops its workers; SIGKILL would orphan them.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		// Its exit status after SIGTERM says nothing the test checks.
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	base := "http://" + addr
	testkit.WaitFor(t, 15*time.Second, "nginx to answer on "+addr, func(ctx context.Context) (bool, string) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/healthz", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return true, ""
	}, testkit.Diag(func() string {
		log, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return "--- nginx error.log ---\n" + string(log)
	}))
	return base
}

func get(t *testing.T, url string) *http.Response {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func unstructuredStrings(obj map[string]any, key string) (map[string]string, bool, error) {
	m, ok := obj[key].(map[string]any)
	if !ok {
		return nil, false, nil
	}
	out := map[string]string{}
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out, true, nil
}
