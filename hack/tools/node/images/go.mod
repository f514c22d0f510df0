// Module of the node's images: a pause (sandbox) binary, a test server and
// mkimage, which packs a static binary into an OCI image archive for
// `ctr images import`. Standard library only.
module simplewebapp-operator/hack/tools/node/images

go 1.26.0
