package controllers

import (
	"context"
	"fmt"
	"slices"
	"strings"

	webappv1 "example.com/simplewebapp-operator/api/v1"
	"example.com/simplewebapp-operator/internal/render"
	"example.com/simplewebapp-operator/internal/step"
)

// What happens to patches that the running objects carry but the rules now
// refuse (an operator upgrade brought stricter rules, a package narrowed its
// patch policy): --refused-patches.
const (
	// RefusedPatchesRemove applies the render without the refused patches,
	// so what is refused does not keep running.
	RefusedPatchesRemove = "remove"
	// RefusedPatchesReport leaves the running objects as they are and only
	// reports, for a migration window.
	RefusedPatchesReport = "report"
)

// refusalReasons are the refusals of what spec.patches asks for.
var refusalReasons = []string{webappv1.ReasonPatchNotAllowed, webappv1.ReasonPolicyViolation}

// refusedPatches is what a pass did about refused patches that were running.
type refusedPatches struct {
	refusal *step.Error
	// dropped are the indexes of spec.patches left out of the applied render.
	dropped []int
	action  string // RefusedPatchesRemove or RefusedPatchesReport
}

// message is the Stalled message: the refusal, and what became of it.
func (rp *refusedPatches) message() string {
	if rp.action == RefusedPatchesReport {
		return rp.refusal.Message + "; the running objects still carry what is refused (--refused-patches=report)"
	}
	idx := make([]string, len(rp.dropped))
	for i, d := range rp.dropped {
		idx[i] = fmt.Sprint(d)
	}
	return fmt.Sprintf("%s; spec.patches[%s] are left out of the applied objects (--refused-patches=remove)", rp.refusal.Message, strings.Join(idx, ","))
}

// runningRefused says whether a failed render refuses patches that the
// running objects already carry: the generation that was applied is this
// one, so its patches were applied under rules that allowed them. A new
// generation that is refused is new input: nothing of it is applied, and the
// last good objects keep running.
func runningRefused(swa *webappv1.SimpleWebApp, err error) (*step.Error, bool) {
	se := step.As(err, webappv1.ReasonRenderFailed)
	return se, se.Terminal && slices.Contains(refusalReasons, se.Reason) && len(swa.Spec.Patches) > 0 &&
		swa.Status.AppliedGeneration == swa.Generation && swa.Status.Version != ""
}

// renderWithoutRefused handles a render that failed with err. When the
// running objects carry refused patches, it returns the render without them
// (mode remove) and records what it left out; otherwise err stands.
func (r *SimpleWebAppReconciler) renderWithoutRefused(ctx context.Context, rel render.Release, swa *webappv1.SimpleWebApp, err error, o *outcome) (*render.Rendered, error) {
	se, running := runningRefused(swa, err)
	if !running {
		return nil, err
	}
	if r.RefusedPatches == RefusedPatchesReport {
		o.refused = &refusedPatches{refusal: se, action: RefusedPatchesReport}
		return nil, &step.Error{Reason: se.Reason, Message: o.refused.message(), Terminal: true}
	}
	// Each patch is judged after the ones kept before it, as kustomize
	// applies them in order.
	var kept []webappv1.Patch
	var dropped []int
	try := swa.DeepCopy()
	for i, p := range swa.Spec.Patches {
		try.Spec.Patches = append(slices.Clone(kept), p)
		if _, perr := r.Renders.Render(ctx, rel, try); perr != nil {
			if _, refused := runningRefused(swa, perr); !refused {
				return nil, perr
			}
			dropped = append(dropped, i)
			continue
		}
		kept = append(kept, p)
	}
	if len(dropped) == 0 {
		return nil, err // only the patches together are refused: nothing to single out
	}
	try.Spec.Patches = kept
	rendered, rerr := r.Renders.Render(ctx, rel, try)
	if rerr != nil {
		return nil, rerr
	}
	o.refused = &refusedPatches{refusal: se, dropped: dropped, action: RefusedPatchesRemove}
	return rendered, nil
}
