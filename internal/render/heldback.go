package render

import webappv1 "example.com/simplewebapp-operator/api/v1"

// HeldBack reports whether the desired release is the one that was rolled
// back, for the same spec and the same channel content: then the reconciler
// keeps the last healthy version instead of retrying it in a loop, and
// `kubectl swa diff` and `versions` pick the version it would.
func HeldBack(swa *webappv1.SimpleWebApp, desired Release) bool {
	fu := swa.Status.FailedUpgrade
	return fu != nil && swa.Status.LastHealthyVersion != "" && fu.Version == desired.Version &&
		fu.Generation == swa.Generation && fu.ChannelRevision == desired.ChannelRevision
}
