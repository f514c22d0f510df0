# simplewebapp-operator. Two commands on a fresh machine with only Go:
#   make run    build, start a local cluster if KUBECONFIG reaches none, run the operator with the sample
#   make test   build the pinned local control plane (cached) and run every test
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN            ?= bin/simplewebapp-operator
TEST_TIMEOUT   ?= 45m
# The one version source: stamped into the binary (hack/build.sh), the image
# tag, the chart and config/manager (make sync-version), dist/install.yaml.
VERSION        := $(strip $(file < VERSION))
# The control plane binaries (etcd, kube-apiserver, ..., kubectl, kwok), built
# from pinned module sources into a cache outside the clone. Only the test and
# local cluster targets (and make run without a cluster) use them; install and
# deploy use your kubectl.
TOOLS_BIN       = $(shell bash hack/tools/build.sh --print)
KUBECTL        ?= kubectl
CONTROLLER_GEN  = go tool controller-gen

.PHONY: help
help: ## Show the targets.
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-16s %s\n", $$1, $$2}'

##@ Development

.PHONY: manifests
manifests: ## Generate the CRD and the RBAC role from the kubebuilder markers in the code (and copy them into the Helm chart).
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./..." output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	$(MAKE) --no-print-directory helm-sync

.PHONY: generate
generate: ## Generate the deepcopy methods of api/.
	$(CONTROLLER_GEN) object paths="./api/..."

.PHONY: fmt
fmt: ## gofmt the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet the code.
	go vet ./...

# golangci-lint, pinned in hack/tools/golangci-lint, built into the tools cache.
# The operator's module is linted without build tags, then the packages with
# files tagged failpoints or webserver again with both tags, so that both
# variants are checked. tests/promql and hack/tools/node/images are modules of
# their own; hack/tools/etcd (ten lines calling etcd's main) is not linted:
# type-checking it loads all of etcd.
.PHONY: lint
lint: ## Run golangci-lint (.golangci.yml) on the code, also with the build tags failpoints,webserver.
	@lint=$$(bash hack/tools/build-tool.sh golangci-lint); \
	tagged=$$(git grep -lE '^//go:build .*(failpoints|webserver)' -- '*.go' | xargs -n1 dirname | sort -u | sed 's|^|./|'); \
	echo "golangci-lint: ./..."; $$lint run ./...; \
	echo "golangci-lint -tags failpoints,webserver:" $$tagged; $$lint run --build-tags failpoints,webserver $$tagged; \
	echo "golangci-lint: tests/promql"; (cd tests/promql && $$lint run ./...); \
	echo "golangci-lint: hack/tools/node/images"; (cd hack/tools/node/images && $$lint run ./...)

.PHONY: build
build: ## Build bin/simplewebapp-operator and bin/kubectl-swa with hack/build.sh (the build the Dockerfile and CI run), VERSION stamped.
	bash hack/build.sh $(dir $(BIN))

.PHONY: sync-version
sync-version: ## Write VERSION into the chart (version, appVersion), config/manager's image tag and the operator's default version.
	sed -i -E -e 's/^version: .*/version: $(VERSION)/' -e 's/^appVersion: .*/appVersion: "$(VERSION)"/' $(HELM_CHART)/Chart.yaml
	sed -i -E 's/^(  newTag: ).*/\1$(VERSION)/' config/manager/kustomization.yaml
	sed -i -E 's/^(var Operator = ).*/\1"$(VERSION)"/' internal/version/version.go

.PHONY: tools
tools: ## Build (or reuse from the cache) the local control plane binaries, metrics-server and promtool; as root also the real node's (profile node; installs the Debian packages of hack/tools/node-deps.sh if missing).
	bash hack/tools/build.sh >/dev/null
	bash hack/tools/build-metrics-server.sh >/dev/null
	bash hack/tools/build-tool.sh promtool >/dev/null
	@if [ "$$(id -u)" = 0 ]; then \
		bash hack/tools/node-deps.sh; \
		bash hack/tools/build-node.sh >/dev/null; \
	else echo "note: not root: the real node's binaries (profile node, docs/real-node.md) are not built; its tests need root"; fi

.PHONY: test
test: tools ## Run every test: unit, golden, integration (envtest) and end to end (full local cluster).
	SWA_BIN_DIR=$(TOOLS_BIN) KUBEBUILDER_ASSETS=$${KUBEBUILDER_ASSETS:-$(TOOLS_BIN)} go test -count=1 -timeout $(TEST_TIMEOUT) ./...
	# tests/promql is a module of its own (Prometheus' PromQL parser stays out of go.mod): ./... does not reach it.
	cd tests/promql && go test -count=1 ./...

.PHONY: chaos
chaos: tools ## Fault-injection suite at full size (tests/chaos; make test runs it reduced): crashes, control-plane outages, leader split-brain, deletion races, field fight, version skew, judged from the audit log.
	SWA_CHAOS_FULL=1 SWA_BIN_DIR=$(TOOLS_BIN) go test -count=1 -timeout 90m -v ./tests/chaos/

.PHONY: test-webserver
# The stand-in web image's test runs it with runc: the real node's when built,
# else one on PATH, else Debian's is installed.
test-webserver: ## Serve each package's rendered nginx config with a real nginx, directly and in the stand-in web image under runc (installs Debian's nginx-light and runc if missing; CI runs it).
	@missing=; \
	command -v nginx >/dev/null || test -x /usr/sbin/nginx || missing+=" nginx-light"; \
	test -n "$$SWA_RUNC" || command -v runc >/dev/null || test -x "$$(bash hack/tools/build-node.sh --print)/runc" || missing+=" runc"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing$$missing (Debian)"; \
			(apt-get install -y -qq --no-install-recommends $$missing >/dev/null 2>&1 || \
			 (apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null)); \
			if [[ $$missing == *nginx-light* ]]; then bash tests/webserver/stop-nginx-service.sh; fi; \
		else echo "test-webserver needs$$missing (e.g. apt-get install$$missing)"; exit 1; fi; \
	fi
	go test -tags webserver -count=1 ./tests/webserver/

.PHONY: golden
golden: ## Rewrite the golden render files after a deliberate change to channels/.
	go test ./tests/golden/ -count=1 -update

##@ Benchmark

N          ?= 200
NAMESPACES ?= 1
BASELINE   ?=
BENCH_ARGS ?=

.PHONY: bench
bench: tools ## Measure the operator against a bare SSA client on fresh local clusters (N, NAMESPACES, BASELINE=<git rev>, BENCH_ARGS); JSON in bench-results/.
	SWA_BIN_DIR=$(TOOLS_BIN) go run ./hack/bench -n $(N) -namespaces $(NAMESPACES) -baseline '$(BASELINE)' $(BENCH_ARGS)

##@ Local cluster

.PHONY: cluster-up
# CLUSTER_UP_FLAGS: more flags of `localcluster up` (go run ./hack/localcluster up -h), e.g.
#   --metrics                 metrics-server, for HPAs
#   --nodes N                 N kwok nodes (default 3)
#   --profile node            as root: a real node (kubelet, containerd, CNI, kube-proxy) and no kwok nodes,
#                             so pods really run (docs/real-node.md); add --nodes N for kwok nodes too
#   --node-image ARCHIVE      profile node: an OCI image archive to import into the real node (repeatable)
# AUDIT=1 adds --audit-log.
CLUSTER_UP_FLAGS ?=
cluster-up: tools ## Start the local full control plane (etcd, apiserver, controller-manager, scheduler, kwok nodes); CLUSTER_UP_FLAGS=--metrics adds metrics-server, AUDIT=1 an audit log of every write.
	SWA_BIN_DIR=$(TOOLS_BIN) go run ./hack/localcluster up $(CLUSTER_UP_FLAGS) $(if $(filter 1,$(AUDIT)),--audit-log)

.PHONY: cluster-down
cluster-down: ## Stop the local control plane; nothing of it stays running.
	SWA_BIN_DIR=$(TOOLS_BIN) go run ./hack/localcluster down

##@ Run

# run builds only the operator: hack/run.sh builds the local control plane
# (make tools) only when KUBECONFIG reaches no cluster.
.PHONY: run
run: build ## Run the operator with the sample applied: on KUBECONFIG's cluster (no control plane built), else on a local cluster it builds and starts.
	SWA_BIN_DIR=$(TOOLS_BIN) BIN=$(BIN) bash hack/run.sh

.PHONY: install
install: ## Install the CRD into the cluster of KUBECONFIG (with KUBECTL, default: the kubectl on PATH).
	$(KUBECTL) apply --server-side -k config/crd

.PHONY: uninstall
uninstall: ## Remove the CRD (and every SimpleWebApp) from the cluster of KUBECONFIG.
	$(KUBECTL) delete -k config/crd --ignore-not-found

##@ Deploy
# Installs the operator itself into the cluster of KUBECONFIG, as kubebuilder
# projects do: config/default (CRD, RBAC, namespace simplewebapp-system,
# Deployment, metrics Service) with the image IMG, using KUBECTL (yours; the
# local control plane is never built for these). There is no public registry:
# `make docker-build docker-push IMG=<registry>/simplewebapp-operator:<tag>`
# (or load the image into the nodes), then `make deploy IMG=...`.
# `make build-installer` writes the same objects to dist/install.yaml, for
# `kubectl apply --server-side -f` without a checkout.
# The Helm chart in config/helm/simplewebapp-operator installs the same objects.

IMG            ?= simplewebapp-operator:$(VERSION)
CONTAINER_TOOL ?= docker
PLATFORMS      ?= linux/amd64,linux/arm64
# The image has no .git: the revision goes in as a build argument.
REVISION       ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
INSTALLER      ?= dist/install.yaml
HELM            = $(TOOLS_BIN)/helm
HELM_CHART      = config/helm/simplewebapp-operator
HELM_RELEASE   ?= simplewebapp
HELM_NAMESPACE ?= simplewebapp-system
# config/default with the image replaced (kustomize in-process; no kustomize
# CLI, no edit of config/).
RENDER          = go run ./hack/render --image $(IMG) config/default

.PHONY: docker-build
docker-build: ## Build the image IMG for this machine's platform (the Dockerfile runs hack/build.sh).
	$(CONTAINER_TOOL) build --build-arg REVISION=$(REVISION) -t $(IMG) .

# make image: the same image without a container engine (hack/image), an OCI
# archive for `ctr images import` or `skopeo copy`, for linux/ARCH.
ARCH           ?= $(shell go env GOHOSTARCH)
IMAGE_ARCHIVE  ?= dist/simplewebapp-operator-image-$(ARCH).oci.tar

.PHONY: image
image: ## Build IMG for linux/ARCH (default this machine's) without a container engine: an OCI archive, IMAGE_ARCHIVE (dist/simplewebapp-operator-image-<arch>.oci.tar), reproducible; prints its digest.
	go run ./hack/image -arch $(ARCH) -image $(IMG) -o $(IMAGE_ARCHIVE)

# make web-image: the local stand-in of the packages' default web image
# (docker.io/nginxinc/nginx-unprivileged:1.27.4-alpine, by that name), built
# from this machine's Debian nginx, for nodes that reach no registry: `ctr -n
# k8s.io images import` it. Not part of make image, which needs no nginx.
WEB_IMAGE_ARCHIVE ?= dist/web-standin-$(shell go env GOHOSTARCH).oci.tar

.PHONY: web-image
web-image: ## Build the stand-in of the packages' web image from Debian's nginx (apt-get install nginx-light) for this machine's arch: an OCI archive, WEB_IMAGE_ARCHIVE (dist/web-standin-<arch>.oci.tar), reproducible; prints its digest.
	go run ./hack/image -web-standin -o $(WEB_IMAGE_ARCHIVE)

.PHONY: docker-push
docker-push: ## Push the image IMG.
	$(CONTAINER_TOOL) push $(IMG)

.PHONY: docker-buildx
docker-buildx: ## Build and push IMG for every platform of PLATFORMS (default linux/amd64,linux/arm64), cross-compiled.
	$(CONTAINER_TOOL) buildx create --name simplewebapp-builder >/dev/null 2>&1 || true
	trap '$(CONTAINER_TOOL) buildx rm simplewebapp-builder >/dev/null 2>&1 || true' EXIT; \
	$(CONTAINER_TOOL) buildx build --builder simplewebapp-builder --platform=$(PLATFORMS) \
		--build-arg REVISION=$(REVISION) --tag $(IMG) --push .

.PHONY: build-installer
build-installer: ## Write INSTALLER (dist/install.yaml): CRD, RBAC, namespace, Deployment (image IMG, pinned when IMG has @sha256:...), metrics Service.
	mkdir -p $(dir $(INSTALLER))
	$(RENDER) > $(INSTALLER).tmp
	mv $(INSTALLER).tmp $(INSTALLER)

.PHONY: deploy
deploy: ## Install CRD, RBAC and the operator (config/default, image IMG) into the cluster of KUBECONFIG with KUBECTL.
	$(RENDER) | $(KUBECTL) apply --server-side --field-manager=simplewebapp-deploy -f -

.PHONY: undeploy
undeploy: ## Remove what deploy installed, the CRD (and so every SimpleWebApp) included.
	$(RENDER) | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: helm-template
helm-template: tools ## Render the Helm chart (release HELM_RELEASE, namespace HELM_NAMESPACE, image IMG, CRD included).
	@image='$(IMG)'; name=$${image%%@*}; digest=; [[ $$image == *@* ]] && digest=$${image#*@}; \
	tag=; [[ $${name##*/} == *:* ]] && { tag=$${name##*:}; name=$${name%:*}; }; \
	$(HELM) template $(HELM_RELEASE) $(HELM_CHART) --namespace $(HELM_NAMESPACE) --include-crds \
		--set-string image.repository=$$name --set-string image.tag=$$tag --set-string image.digest=$$digest

.PHONY: helm-sync
helm-sync: ## Copy the generated CRD and ClusterRole (make manifests) into the Helm chart and the CRD into kubectl swa; tests check they match.
	cp config/crd/bases/example.com_simplewebapps.yaml $(HELM_CHART)/crds/
	# kubectl swa validates offline against this embedded copy (go:embed cannot reach config/).
	cp config/crd/bases/example.com_simplewebapps.yaml cmd/kubectl-swa/crd/
	cp config/rbac/role.yaml $(HELM_CHART)/files/manager-role.yaml

##@ Helm chart and namespace mode

# make helm-sync (run by make manifests) also derives the RBAC of namespace
# mode (config/namespaced) from config/rbac/role.yaml, and copies it and the
# monitoring sources (config/prometheus) into the chart.
helm-sync: helm-sync-more

.PHONY: helm-sync-more
helm-sync-more:
	go run ./hack/rbacsplit config/rbac/role.yaml config/namespaced
	cp config/namespaced/namespace-rbac/role.yaml $(HELM_CHART)/files/manager-namespaced-role.yaml
	cp config/namespaced/cluster-rbac/cluster_role.yaml $(HELM_CHART)/files/manager-cluster-role.yaml
	cp config/prometheus/prometheusrule.yaml config/prometheus/dashboard.json $(HELM_CHART)/files/

.PHONY: helm-docs
helm-docs: ## Regenerate the chart's README.md values table from the comments in values.yaml (tests/helm checks it is current).
	go run ./hack/helmdocs $(HELM_CHART)

.PHONY: helm-lint
helm-lint: tools ## helm lint --strict the chart.
	$(HELM) lint --strict $(HELM_CHART)

##@ Release

# make release VERSION=x.y.z: every file a release publishes, in RELEASE_DIR,
# reproducibly (hack/release; docs/install.md#release-artifacts). The image is
# IMG when given, else docker.io/library/simplewebapp-operator:$(VERSION);
# RELEASE_URL is where the kubectl-swa archives will be downloaded from (the
# krew manifest's uri).
RELEASE_DIR    ?= dist
RELEASE_URL    ?= https://github.com/example/simplewebapp-operator/releases/download/v$(VERSION)
RELEASE_IMG     = $(if $(filter file,$(origin IMG)),docker.io/library/simplewebapp-operator:$(VERSION),$(IMG))

.PHONY: release
release: ## Write the release for VERSION into RELEASE_DIR (dist/): install YAMLs, Helm chart .tgz, image OCI archives (linux/amd64, arm64), kubectl-swa archives (linux, darwin, windows), krew manifest, CycloneDX SBOM, SHA256SUMS.
	go run ./hack/release -version '$(VERSION)' -image '$(RELEASE_IMG)' -url '$(RELEASE_URL)' -o '$(RELEASE_DIR)'
