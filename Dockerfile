# Multi-stage, multi-arch: hack/build.sh (the build `make build` and CI run)
# cross-compiles static binaries on the build machine's platform for
# TARGETOS/TARGETARCH, onto a distroless non-root base. Base images are pinned
# by digest (multi-arch indexes); bump them deliberately.
#   make docker-build IMG=...                       this machine's platform
#   make docker-buildx IMG=... PLATFORMS=linux/amd64,linux/arm64
FROM --platform=$BUILDPLATFORM golang:1.26@sha256:595c7847cff97c9a9e76f015083c481d26078f961c9c8dca3923132f51fe12f1 AS build
ARG TARGETOS TARGETARCH
# No .git in the build context: `make docker-build` passes the revision.
ARG REVISION=unknown
WORKDIR /src
# Exactly what the two binaries need (tests/install checks it against go list).
COPY go.mod go.sum ./
RUN go mod download
COPY VERSION main.go config.go manager.go nofailpoints.go ./
COPY hack/build.sh hack/
COPY api/ api/
COPY channels/ channels/
COPY controllers/ controllers/
COPY cmd/ cmd/
COPY internal/ internal/
RUN GOOS=$TARGETOS GOARCH=$TARGETARCH REVISION=$REVISION bash hack/build.sh /out

FROM gcr.io/distroless/static:nonroot@sha256:f7f8f729987ad0fdf6b05eeeae94b26e6a0f613bdf46feea7fc40f7bd72953e6
COPY --from=build /out/simplewebapp-operator /simplewebapp-operator
# The kubectl swa plugin, for `docker cp` or a debug container; not on a PATH.
COPY --from=build /out/kubectl-swa /kubectl-swa
USER 65532:65532
ENTRYPOINT ["/simplewebapp-operator"]
