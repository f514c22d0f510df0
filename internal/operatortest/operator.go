package operatortest

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"time"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/testkit"
)

// Config configures Start.
type Config struct {
	Name       string // names the operator in messages
	Bin        string // the operator binary (Env.OperatorBin)
	Kubeconfig string // --kubeconfig: the operator's identity
	// ProbeAddr is the --health-probe-bind-address (/healthz, /readyz);
	// empty: a free loopback port.
	ProbeAddr string
	Args      []string // more flags
	LogPath   string   // stdout and stderr go here
	// OutOfCluster removes KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT
	// from the operator's environment, so that it does not take itself for
	// a pod when the tests run in one.
	OutOfCluster bool
	// Env are more environment variables (KEY=value) for the operator, for
	// example a test-only failpoint (SWA_TEST_EXIT_AFTER_WRITES).
	Env []string
}

// Operator is a running (or exited) operator process.
type Operator struct {
	name      string
	logPath   string
	probeAddr string
	cmd       *exec.Cmd
	exited    chan struct{} // closed when the process has exited
	waitErr   error         // valid once exited is closed
}

// Start starts the operator binary with cfg's kubeconfig, probe address and
// flags, logging to cfg.LogPath. A test binary that dies takes the operator
// with it (Pdeathsig).
func Start(cfg Config) (*Operator, error) {
	if cfg.ProbeAddr == "" {
		ports, err := localcluster.FreePorts(1)
		if err != nil {
			return nil, err
		}
		cfg.ProbeAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	}
	logf, err := os.Create(cfg.LogPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(cfg.Bin, append([]string{
		"--kubeconfig=" + cfg.Kubeconfig,
		"--health-probe-bind-address=" + cfg.ProbeAddr,
	}, cfg.Args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if cfg.OutOfCluster {
		cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, "KUBERNETES_SERVICE_HOST=") || strings.HasPrefix(kv, "KUBERNETES_SERVICE_PORT=")
		})
	}
	if len(cfg.Env) > 0 {
		if cmd.Env == nil {
			cmd.Env = os.Environ()
		}
		cmd.Env = append(cmd.Env, cfg.Env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting operator %s: %w", cfg.Name, err)
	}
	op := &Operator{name: cfg.Name, logPath: cfg.LogPath, probeAddr: cfg.ProbeAddr, cmd: cmd, exited: make(chan struct{})}
	go func() {
		op.waitErr = cmd.Wait()
		close(op.exited)
	}()
	return op, nil
}

// Name is Config.Name.
func (op *Operator) Name() string { return op.name }

// LogPath is the operator's log file.
func (op *Operator) LogPath() string { return op.logPath }

// Pid is the operator's process id.
func (op *Operator) Pid() int { return op.cmd.Process.Pid }

// Args are the flags the operator was started with.
func (op *Operator) Args() []string { return op.cmd.Args[1:] }

// Exited reports whether the process has exited and, once it has, how: nil
// for exit status 0.
func (op *Operator) Exited() (bool, error) {
	select {
	case <-op.exited:
		return true, op.waitErr
	default:
		return false, nil
	}
}

// WaitReady waits, for at most timeout, until the operator's /readyz answers
// 200 (served with or without leadership). It fails at once if the operator
// exits.
func (op *Operator) WaitReady(ctx context.Context, timeout time.Duration) error {
	url := "http://" + op.probeAddr + "/readyz"
	hc := &http.Client{Timeout: 2 * time.Second}
	_, seen, err := testkit.Poll(ctx, 100*time.Millisecond, timeout, func(context.Context) (bool, string, error) {
		if exited, err := op.Exited(); exited {
			return false, "", fmt.Errorf("operator %s exited: %v", op.name, err)
		}
		resp, err := hc.Get(url)
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for operator %s's %s: %w (last seen: %s)", op.name, url, err, seen)
	}
	return nil
}

// Stop sends SIGTERM, as the kubelet does on a rollout, and waits at most
// timeout for a clean exit.
func (op *Operator) Stop(timeout time.Duration) error {
	if err := op.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("SIGTERM to operator %s: %w", op.name, err)
	}
	select {
	case <-op.exited:
	case <-time.After(timeout):
		return fmt.Errorf("operator %s did not exit within %s of SIGTERM", op.name, timeout)
	}
	if op.waitErr != nil {
		return fmt.Errorf("operator %s exited after SIGTERM with %v", op.name, op.waitErr)
	}
	return nil
}

// Kill SIGKILLs the operator unless it has exited (no chance to clean up,
// e.g. to release its Lease) and reaps it. A process that outlives SIGKILL is
// reported on stderr.
func (op *Operator) Kill() {
	if exited, _ := op.Exited(); !exited {
		_ = op.cmd.Process.Kill()
	}
	select {
	case <-op.exited:
	case <-time.After(10 * time.Second):
		fmt.Fprintf(os.Stderr, "operator %s (pid %d) did not exit after SIGKILL\n", op.name, op.cmd.Process.Pid)
	}
}

// maxLogLine is how much of one log line LogTail and LogLinesWith show.
const maxLogLine = 800

// LogTail is the last n lines of the operator's log, long lines cut.
func (op *Operator) LogTail(n int) string {
	return op.logLines(n, func(string) bool { return true })
}

// LogTailOfWork is LogTail without what an idle operator logs every few
// seconds (lease renewals, an empty work queue), which would otherwise fill
// the tail of a test that fails by waiting.
func (op *Operator) LogTailOfWork(n int) string {
	return op.logLines(n, func(l string) bool {
		return !strings.Contains(l, "Successfully renewed lease") && !strings.Contains(l, `"items":[]`)
	})
}

// LogLinesWith is the last n lines of the operator's log containing s, long
// lines cut.
func (op *Operator) LogLinesWith(s string, n int) string {
	return op.logLines(n, func(l string) bool { return strings.Contains(l, s) })
}

func (op *Operator) logLines(n int, keep func(string) bool) string {
	b, err := os.ReadFile(op.logPath)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(b), "\n"), "\n") {
		if keep(l) {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		if len(l) > maxLogLine { // a JSON line with a stack trace
			lines[i] = fmt.Sprintf("%s ...[%d more bytes, see the log file]", l[:maxLogLine], len(l)-maxLogLine)
		}
	}
	return strings.Join(lines, "\n")
}
