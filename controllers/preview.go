package controllers

import webappv1 "example.com/simplewebapp-operator/api/v1"

// HeldBack reports whether the reconciler keeps swa's last healthy version
// instead of rel: rel was rolled back for this generation and channel
// content. Exported for `kubectl swa diff` and `versions`, which must pick
// the version the reconciler would.
func HeldBack(swa *webappv1.SimpleWebApp, rel Release) bool { return heldBack(swa, rel) }
