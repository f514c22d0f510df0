package localcluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"example.com/simplewebapp-operator/internal/localcluster"
	"example.com/simplewebapp-operator/internal/testkit"
)

// TestFaultsAndAuditLog: on an "api" cluster with an audit log, writes are
// logged and reads are not; etcd SIGSTOPped (by its PID) stalls writes until
// SIGCONT; a restarted kube-apiserver is a new process that serves the same
// data and keeps appending to the audit log.
func TestFaultsAndAuditLog(t *testing.T) {
	c, err := localcluster.Start(t.Context(), localcluster.Options{Profile: localcluster.ProfileAPI, AuditLog: true, LogWriter: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Signal(localcluster.Etcd, syscall.SIGCONT) // never leave it stopped
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	cm := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm("before"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	audit := func() []testkit.AuditEvent {
		t.Helper()
		ev, err := testkit.ReadAudit(c.AuditLogPath())
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	created := testkit.AuditFilter{Verbs: []string{"create"}, Resource: "configmaps", Namespace: "default", Succeeded: true}
	testkit.WaitFor(t, 10*time.Second, "the create of ConfigMap before in the audit log", func(context.Context) (bool, string) {
		f := created
		f.Name = "before"
		return f.Count(audit()) == 1, testkit.FormatAudit(audit(), 5)
	})
	if n := (testkit.AuditFilter{Verbs: []string{"get", "list", "watch"}}).Count(audit()); n != 0 {
		t.Errorf("%d reads in the audit log, want none (the policy logs writes only)", n)
	}

	// etcd stopped: a write cannot complete; continued: it can.
	etcdPID := c.PIDs[localcluster.Etcd]
	if err := c.Signal(localcluster.Etcd, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "etcd in state T (stopped)", func(context.Context) (bool, string) {
		st := procState(etcdPID)
		return st == "T", st
	})
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = cs.CoreV1().ConfigMaps("default").Create(short, cm("while-stopped"), metav1.CreateOptions{})
	cancel()
	if err == nil {
		t.Fatal("a write succeeded while etcd was SIGSTOPped")
	}
	if err := c.Signal(localcluster.Etcd, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 30*time.Second, "a write after SIGCONT", func(ctx context.Context) (bool, string) {
		_, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm("after-cont"), metav1.CreateOptions{})
		return err == nil, fmt.Sprint(err)
	})

	// kube-apiserver restarted: a new process, same data, same audit log.
	oldPID := c.PIDs[localcluster.APIServer]
	down, err := c.Restart(ctx, localcluster.APIServer)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("FIGURE kube-apiserver restart: down %s (SIGTERM to /readyz)", down.Round(time.Millisecond))
	if c.PIDs[localcluster.APIServer] == oldPID || !localcluster.Alive(localcluster.APIServer, c.PIDs[localcluster.APIServer]) {
		t.Fatalf("kube-apiserver pid %d after restart (was %d), alive %v", c.PIDs[localcluster.APIServer], oldPID, localcluster.Alive(localcluster.APIServer, c.PIDs[localcluster.APIServer]))
	}
	if err := syscall.Kill(oldPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the old kube-apiserver (pid %d) after restart: kill(pid, 0) = %v, want ESRCH", oldPID, err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "before", metav1.GetOptions{}); err != nil {
		t.Errorf("ConfigMap before after the restart: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm("after-restart"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "creates before and after the restart in the audit log", func(context.Context) (bool, string) {
		got := testkit.CountBy(created.Filter(audit()), func(e *testkit.AuditEvent) string { return e.ObjectRef.Name })
		return got["before"] == 1 && got["after-cont"] == 1 && got["after-restart"] == 1, fmt.Sprint(got)
	})
	pids, err := localcluster.ReadPIDs(c.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fmt.Sprint(pids), fmt.Sprintf("%s=%d", localcluster.APIServer, c.PIDs[localcluster.APIServer])) {
		t.Errorf("pids file %v does not record the new kube-apiserver", pids)
	}
}

// procState is the state letter of /proc/pid/stat.
func procState(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return err.Error()
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || len(s) < i+3 {
		return s
	}
	return s[i+2 : i+3]
}
