package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// managerContainer is the manager's container of config/manager/manager.yaml.
func managerContainer(root string) (*corev1.Container, error) {
	b, err := os.ReadFile(filepath.Join(root, "config", "manager", "manager.yaml"))
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var d appsv1.Deployment
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("config/manager/manager.yaml: %w", err)
		}
		if d.Kind != "Deployment" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name == "manager" {
				return &c, nil
			}
		}
	}
	return nil, fmt.Errorf("config/manager/manager.yaml: no Deployment with a container named manager")
}

// runtimeEnvOfDeployment fills the operator's GOGC and GOMEMLIMIT (unless
// set by flags) from the manager's container in config/manager/manager.yaml,
// so that the bench measures the operator with the Go runtime settings it
// ships with. A GOMEMLIMIT taken from the memory limit (resourceFieldRef)
// is the limit itself, as the kubelet would set it.
func runtimeEnvOfDeployment(root string, o *opts) error {
	c, err := managerContainer(root)
	if err != nil {
		return err
	}
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
		if rf := e.ValueFrom; rf != nil && rf.ResourceFieldRef != nil && rf.ResourceFieldRef.Resource == "limits.memory" {
			if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
				env[e.Name] = fmt.Sprint(q.Value())
			}
		}
	}
	if o.gogc == "" {
		o.gogc = env["GOGC"]
	}
	if o.gomemlimit == "" {
		o.gomemlimit = env["GOMEMLIMIT"]
	}
	return nil
}

// memoryLimitOfDeployment is the manager container's memory limit, in MiB.
func memoryLimitOfDeployment(root string) (float64, error) {
	c, err := managerContainer(root)
	if err != nil {
		return 0, err
	}
	q, ok := c.Resources.Limits[corev1.ResourceMemory]
	if !ok {
		return 0, fmt.Errorf("config/manager/manager.yaml: the manager has no memory limit")
	}
	return float64(q.Value()) / (1 << 20), nil
}
