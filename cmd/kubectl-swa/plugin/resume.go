package plugin

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"example.com/simplewebapp-operator/internal/fleet"
)

const resumeExample = `  # Lift the halt of version 1.3.0 (each content of it that is halted)
  kubectl swa resume-version 1.3.0

  # Only the content the halt message names, the operator in namespace ops
  kubectl swa resume-version 1.3.0 --content 4f2a9c0d1b7e --operator-namespace ops`

func newResumeVersionCommand(o *options) *cobra.Command {
	var content, operatorNS string
	cmd := &cobra.Command{
		Use:   "resume-version VERSION",
		Short: "Lift the halt the operator put on a version for the fleet",
		Long: `Lift the halt the operator put on a version after its upgrades failed in
several namespaces, so that its roll-out goes on from the wave it stopped in.
The failures counted until now no longer count towards another halt.

The halt is in the version's roll-out state: a ConfigMap labelled
simplewebapp.example.com/rollout=true in the operator's namespace, one per
content of the version (a re-ship of a version with other manifests is rolled
out, and halted, on its own). Every halted content of VERSION is resumed, or
only the one --content names (the hash the halt message gives, or the whole
package hash). Each state is updated over the resourceVersion read: if the
operator wrote it in between, the command fails and says so, without trying
again; look at the new state (kubectl swa plan) and run it again.

Exit status: 0 resumed, 1 nothing of VERSION is halted (the halted versions
are listed), 2 an error.`,
		Example: resumeExample,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.resumeVersion(cmd.Context(), args[0], content, operatorNS)
		},
	}
	cmd.Flags().StringVar(&content, "content", "", "Resume only this content of the version (its hash, as the halt message gives it).")
	cmd.Flags().StringVar(&operatorNS, "operator-namespace", DefaultOperatorNamespace, "The operator's namespace, where its roll-out states are.")
	return cmd
}

// resumeVersion is `kubectl swa resume-version` (its help says what it
// does).
func (o *options) resumeVersion(ctx context.Context, version, content, ns string) error {
	cl, _, err := o.connect()
	if err != nil {
		return err
	}
	cms, err := rolloutStates(ctx, cl, ns)
	if err != nil {
		return fmt.Errorf("listing the roll-out states in namespace %s: %w", ns, err)
	}
	var halted, notHalted []string
	resumed := 0
	for i := range cms {
		cm := &cms[i]
		st, err := fleet.FromConfigMap(cm)
		if err != nil {
			fmt.Fprintf(o.streams.ErrOut, "warning: passing over a roll-out state: %v\n", err)
			continue
		}
		mine := cm.Annotations[fleet.VersionAnnotation] == version &&
			(content == "" || st.Key.Hash == fleet.NewKey(version, content).Hash)
		switch {
		case !mine && st.Halted != nil:
			halted = append(halted, fmt.Sprintf("%s (content %s)", st.Key.Version, st.Key.Hash))
			continue
		case !mine:
			continue
		case st.Halted == nil:
			notHalted = append(notHalted, st.Key.Hash)
			continue
		}
		was := *st.Halted
		st.Resume(metav1.Now())
		fresh, err := st.ConfigMap(ns)
		if err != nil {
			return err
		}
		// cm carries the resourceVersion it was read at: the update fails
		// rather than overwrite what the operator wrote since.
		cm.Data[fleet.StateKey] = fresh.Data[fleet.StateKey]
		if err := cl.Update(ctx, cm); err != nil {
			if apierrors.IsConflict(err) {
				return fmt.Errorf("the roll-out state of %s (ConfigMap %s/%s) changed since it was read (the operator wrote it): nothing was written to it; look at it again (kubectl swa plan) and run resume-version again",
					st.Key, ns, cm.Name)
			}
			return fmt.Errorf("updating the roll-out state of %s (ConfigMap %s/%s): %w", st.Key, ns, cm.Name, err)
		}
		resumed++
		fmt.Fprintf(o.streams.Out, "resumed %s (content %s), halted since %s: %s\n",
			st.Key.Version, st.Key.Hash, was.At.UTC().Format("2006-01-02T15:04:05Z"), was.Reason)
	}
	if resumed > 0 {
		return nil
	}
	what := fmt.Sprintf("version %s", version)
	if content != "" {
		what += fmt.Sprintf(" (content %s)", fleet.NewKey(version, content).Hash)
	}
	msg := fmt.Sprintf("%s has no roll-out state in namespace %s", what, ns)
	if len(notHalted) > 0 {
		msg = fmt.Sprintf("%s is not halted (content %s)", what, strings.Join(notHalted, ", "))
	}
	slices.Sort(halted)
	if len(halted) == 0 {
		msg += "; no version is halted"
	} else {
		msg += "; halted: " + strings.Join(halted, ", ")
	}
	fmt.Fprintf(o.streams.ErrOut, "error: %s\n", msg)
	// 1, not 2: nothing went wrong, there is only nothing to resume.
	return exitCode(1)
}
