// Command localcluster runs the local control plane of internal/localcluster outside
// of tests, for manual work with kubectl:
//
//	localcluster up [--profile full|api|node] [--nodes N]  start it detached, print the kubeconfig path
//	                [--metrics]                       with metrics-server: HPAs scale on kwok's emulated CPU use
//	                [--audit-log]                     the API server logs every write to <state>/audit.log (Metadata level)
//	                [--node-image ARCHIVE]...         profile node: OCI archives to import into the real node
//	localcluster down                                 stop it (and its real node) and remove its state
//	localcluster status                               tell whether it is up (exit 3 when down)
//	localcluster kubeconfig                           print the kubeconfig path
//
// The kubeconfig is at a stable path,
// ${XDG_CACHE_HOME:-$HOME/.cache}/simplewebapp-operator/local-cluster/kubeconfig,
// next to a file "state-dir" that names the cluster's state directory (with
// its pids file and component logs).
//
// Profile node (root only) adds a real node, swa-real-node: kubelet,
// containerd, CNI and kube-proxy on this machine (docs/real-node.md). With
// --nodes 0, its default, it is the only node and the cluster's pods run
// there for real. Not root, or no node binaries (make tools as root): it
// says so and starts profile full with 3 kwok nodes.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"example.com/simplewebapp-operator/internal/localcluster"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "down":
		err = down()
	case "status":
		err = status()
	case "kubeconfig":
		fmt.Println(filepath.Join(home(), "kubeconfig"))
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "localcluster:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: localcluster up [--profile full|api|node] [--nodes N] [--metrics] [--audit-log] [--node-image ARCHIVE]... | down | status | kubeconfig")
	os.Exit(2)
}

// home is the stable directory that points at the running cluster.
func home() string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		h, _ := os.UserHomeDir()
		cache = filepath.Join(h, ".cache")
	}
	return filepath.Join(cache, "simplewebapp-operator", "local-cluster")
}

// stateDir returns the recorded state directory ("" when none).
func stateDir() (string, error) {
	b, err := os.ReadFile(filepath.Join(home(), "state-dir"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	return strings.TrimSpace(string(b)), err
}

// alive returns the recorded components that are still running.
func alive(dir string) []localcluster.NamedPID {
	pids, _ := localcluster.ReadPIDs(dir)
	var out []localcluster.NamedPID
	for _, p := range pids {
		if localcluster.Alive(p.Name, p.PID) {
			out = append(out, p)
		}
	}
	return out
}

func up(args []string) error {
	fl := flag.NewFlagSet("up", flag.ExitOnError)
	profile := fl.String("profile", localcluster.ProfileFull, "full (controllers, scheduler, kwok nodes), api (etcd + apiserver) or node (full + a real node; root)")
	nodes := fl.Int("nodes", -1, "number of kwok nodes (default 3; profile node: 0)")
	var nodeImages []string
	fl.Func("node-image", "profile node: an OCI image archive to import into the real node's containerd (repeatable)", func(s string) error {
		nodeImages = append(nodeImages, s)
		return nil
	})
	metrics := fl.Bool("metrics", false, "run metrics-server (profile full): HorizontalPodAutoscalers scale on the CPU use set by the pod annotation "+localcluster.UsageCPUAnnotation)
	audit := fl.Bool("audit-log", false, "the API server writes every write request (Metadata level) to audit.log in the state directory")
	_ = fl.Parse(args)

	old, err := stateDir()
	if err != nil {
		return err
	}
	if old != "" {
		if running := alive(old); len(running) > 0 {
			return fmt.Errorf("a local cluster is already running (state %s, pids %v); run 'localcluster down' first", old, running)
		}
		// Stale record of a cluster that is gone (e.g. after a reboot): drop it.
		if err := cleanup(old); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(home(), 0o755); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "swa-local-cluster-")
	if err != nil {
		return err
	}
	// Recorded before starting, so that "down" can clean up after an
	// interrupted "up" too.
	if err := os.WriteFile(filepath.Join(home(), "state-dir"), []byte(dir+"\n"), 0o644); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Options{
		Profile: *profile, Nodes: *nodes, Metrics: *metrics, Dir: dir, Detach: true, LogWriter: os.Stderr, AuditLog: *audit,
		NodeImages: nodeImages,
	})
	if err != nil {
		// Start stopped what it had started. Keep the logs in dir for a look,
		// unless the user interrupted.
		os.Remove(filepath.Join(home(), "state-dir"))
		if ctx.Err() != nil {
			os.RemoveAll(dir)
		}
		return err
	}
	b, err := os.ReadFile(c.Kubeconfig)
	if err != nil {
		return err
	}
	kubeconfig := filepath.Join(home(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, b, 0o600); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "local cluster (%s) up: /readyz after %s, ready after %s; logs in %s\n",
		c.Profile, c.ReadyzAfter.Round(time.Millisecond), c.ReadyAfter.Round(time.Millisecond), dir)
	if c.Node != nil {
		fmt.Fprintf(os.Stderr, "real node %s (%s): image %s; 'localcluster down' tears it down\n",
			c.Node.Name, c.Node.IP, localcluster.RealNodeTestImage)
	}
	if *audit {
		fmt.Fprintf(os.Stderr, "audit log: %s\n", c.AuditLogPath())
	}
	fmt.Println(kubeconfig) // stdout: only the path, for KUBECONFIG=$(localcluster up)
	return nil
}

func down() error {
	dir, err := stateDir()
	if err != nil {
		return err
	}
	if dir == "" {
		fmt.Println("no local cluster recorded")
		return nil
	}
	t0 := time.Now()
	if err := localcluster.StopFromDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if running := alive(dir); len(running) > 0 {
		return fmt.Errorf("still running: %v", running)
	}
	if err := cleanup(dir); err != nil {
		return err
	}
	fmt.Printf("local cluster stopped in %s\n", time.Since(t0).Round(time.Millisecond))
	return nil
}

// cleanup removes a stopped cluster's state and the stable pointers to it.
func cleanup(dir string) error {
	return errors.Join(
		os.RemoveAll(dir),
		ignoreNotExist(os.Remove(filepath.Join(home(), "kubeconfig"))),
		ignoreNotExist(os.Remove(filepath.Join(home(), "state-dir"))),
	)
}

func ignoreNotExist(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

func status() error {
	dir, err := stateDir()
	if err != nil {
		return err
	}
	running := []localcluster.NamedPID(nil)
	if dir != "" {
		running = alive(dir)
	}
	if len(running) == 0 {
		fmt.Println("down")
		os.Exit(3) // like `systemctl status`: scripts can test it
	}
	kubeconfig := filepath.Join(home(), "kubeconfig")
	health := "apiserver not ready"
	if cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig); err == nil {
		cfg.Timeout = 3 * time.Second
		if cs, err := kubernetes.NewForConfig(cfg); err == nil {
			if _, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background()); err == nil {
				health = "apiserver ready"
			}
		}
	}
	fmt.Printf("up (%s): %v\nkubeconfig: %s\nstate: %s\n", health, running, kubeconfig, dir)
	if nodeDir := localcluster.RealNodeStateDir(dir); nodeDir != "" {
		fmt.Printf("real node: %s (state %s)\n", localcluster.RealNodeName, nodeDir)
	}
	return nil
}
