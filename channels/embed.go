// Package channels embeds the release channels and the versioned manifest
// packages they point at. Everything the operator deploys lives here.
//
// Layout (kdp's): a channel file `<channel>` lists `manifests: [{name, version}]`;
// `packages/<name>/<version>/` is a kustomize base rendered per SimpleWebApp.
package channels

import "embed"

// FS holds the embedded channels and packages.
//
//go:embed stable rapid packages
var FS embed.FS
