// Command simplewebapp-operator runs the SimpleWebApp controller.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"

	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"example.com/simplewebapp-operator/internal/metrics"
	"example.com/simplewebapp-operator/internal/version"
)

// revision is the source revision of this build, set by hack/build.sh
// (-ldflags -X main.revision=...); the version is version.Operator.
var revision = ""

func main() {
	cfg, err := parseFlags(os.Args[1:], runningInCluster())
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		os.Exit(2) // the flag set printed the error and the usage
	}
	rev := buildRevision()
	if cfg.ShowVersion {
		fmt.Printf("simplewebapp-operator %s (revision %s, %s)\n", version.Operator, rev, goVersion())
		return
	}
	logger := zap.New(zap.UseFlagOptions(&cfg.Zap))
	ctrl.SetLogger(logger)
	klog.SetLogger(logger) // kdp's applylib logs through klog: same structured output
	setupLog := ctrl.Log.WithName("setup")
	setupLog.Info("simplewebapp-operator", "version", version.Operator, "revision", rev, "goVersion", goVersion())
	metrics.RegisterBuildInfo(rev, goVersion())
	if err := cfg.validate(); err != nil {
		setupLog.Error(err, "invalid flags")
		os.Exit(1)
	}
	setupLog.Info("leader election", "enabled", cfg.LeaderElect, "inCluster", runningInCluster(),
		"leaseDuration", cfg.LeaseDuration.String(), "renewDeadline", cfg.RenewDeadline.String(), "retryPeriod", cfg.RetryPeriod.String())
	setupLog.Info("watching", "namespaces", cfg.namespaces, "clusterWide", len(cfg.namespaces) == 0)
	setupLog.Info("images", "allowed", cfg.images.Allowed, "anyImage", cfg.images.AllowsAny(), "requireDigest", cfg.images.RequireDigest)
	if err := run(ctrl.SetupSignalHandler(), cfg, setupLog); err != nil {
		os.Exit(1) // run logged it
	}
}

// buildRevision is the revision stamped by hack/build.sh, else the one the Go
// toolchain recorded (a plain `go build` in a git checkout), else "unknown".
func buildRevision() string {
	if revision != "" {
		return revision
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return s.Value[:12]
			}
		}
	}
	return "unknown"
}

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.GoVersion
	}
	return "unknown"
}
