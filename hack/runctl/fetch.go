package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// fetch runs a pod on node that GETs the Service svc in default once (the
// image's -get mode), waits for it to finish, prints what it fetched, and
// deletes the pod: the page as a client in the cluster sees it.
func fetch(ctx context.Context, svc, image, node string, timeout time.Duration) error {
	if svc == "" || image == "" {
		return errors.New("-service and -image are required")
	}
	cfg, _, err := load()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	s, err := cs.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, svc, metav1.GetOptions{})
	if err != nil {
		return err
	}
	url := "http://" + net.JoinHostPort(s.Spec.ClusterIP, strconv.Itoa(int(s.Spec.Ports[0].Port))) + "/"
	pod, err := cs.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, fetchPod(image, node, url), metav1.CreateOptions{FieldManager: runManager})
	if err != nil {
		return err
	}
	defer func() {
		if err := cs.CoreV1().Pods(pod.Namespace).Delete(context.WithoutCancel(ctx), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			fmt.Fprintf(os.Stderr, "runctl fetch: pod %s/%s left behind: %v\n", pod.Namespace, pod.Name, err)
		}
	}()
	var phase corev1.PodPhase
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil // transient: the deadline says
		}
		phase = p.Status.Phase
		return phase == corev1.PodSucceeded || phase == corev1.PodFailed, nil
	})
	if err != nil {
		return fmt.Errorf("pod %s fetching %s: phase %q after %s: %w", pod.Name, url, phase, timeout, err)
	}
	out, err := cs.CoreV1().Pods(pod.Namespace).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("the log of pod %s: %w", pod.Name, err)
	}
	if phase == corev1.PodFailed {
		return fmt.Errorf("pod %s could not fetch %s: %s", pod.Name, url, strings.TrimSpace(string(out)))
	}
	fmt.Printf("GET %s (Service %s, from pod %s on node %s):\n%s", url, svc, pod.Name, node, out)
	return nil
}

// fetchPod is a one-shot pod that meets the restricted Pod Security Standard.
func fetchPod(image, node, url string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "fetch-", Namespace: metav1.NamespaceDefault,
			Labels: map[string]string{"app.kubernetes.io/managed-by": runManager}},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			EnableServiceLinks:           ptr.To(false),
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name: "fetch", Image: image, ImagePullPolicy: corev1.PullNever, Args: []string{"-get", url},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
		},
	}
}
