package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	appsv1 "k8s.io/api/apps/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// runtimeEnvOfDeployment fills the operator's GOGC and GOMEMLIMIT (unless
// set by flags) from the manager's container in config/manager/manager.yaml,
// so that the bench measures the operator with the Go runtime settings it
// ships with.
func runtimeEnvOfDeployment(root string, o *opts) error {
	b, err := os.ReadFile(filepath.Join(root, "config", "manager", "manager.yaml"))
	if err != nil {
		return err
	}
	var env map[string]string
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var d appsv1.Deployment
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("config/manager/manager.yaml: %w", err)
		}
		if d.Kind != "Deployment" {
			continue
		}
		for _, c := range d.Spec.Template.Spec.Containers {
			if c.Name != "manager" {
				continue
			}
			env = map[string]string{}
			for _, e := range c.Env {
				env[e.Name] = e.Value
			}
		}
	}
	if env == nil {
		return fmt.Errorf("config/manager/manager.yaml: no Deployment with a container named manager")
	}
	if o.gogc == "" {
		o.gogc = env["GOGC"]
	}
	if o.gomemlimit == "" {
		o.gomemlimit = env["GOMEMLIMIT"]
	}
	return nil
}
