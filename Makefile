# simplewebapp-operator. Two commands on a fresh machine with only Go:
#   make run    build, start a local cluster if KUBECONFIG reaches none, run the operator with the sample
#   make test   build the pinned local control plane (cached) and run every test
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

BIN            ?= bin/simplewebapp-operator
TEST_TIMEOUT   ?= 45m
# The control plane binaries (etcd, kube-apiserver, ..., kubectl, kwok), built
# from pinned module sources into a cache outside the clone.
TOOLS_BIN       = $(shell bash tests/tools/build.sh --print)
KUBECTL         = $(TOOLS_BIN)/kubectl
CONTROLLER_GEN  = go tool controller-gen

.PHONY: help
help: ## Show the targets.
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk -F':.*?## ' '{printf "  %-16s %s\n", $$1, $$2}'

##@ Development

.PHONY: manifests
manifests: ## Generate the CRD and the RBAC role from the markers in api/ and controllers/ (and copy them into the Helm chart).
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

.PHONY: build
build: ## Build the operator binary (the same go build the Dockerfile runs) and the kubectl swa plugin.
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o $(BIN) .
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o bin/kubectl-swa ./cmd/kubectl-swa

.PHONY: tools
tools: ## Build (or reuse from the cache) the local control plane binaries.
	bash tests/tools/build.sh >/dev/null

.PHONY: test
test: tools ## Run every test: unit, golden, integration (envtest) and end to end (full local cluster).
	SWA_BIN_DIR=$(TOOLS_BIN) KUBEBUILDER_ASSETS=$${KUBEBUILDER_ASSETS:-$(TOOLS_BIN)} go test -count=1 -timeout $(TEST_TIMEOUT) ./...
	# tests/promql is a module of its own (Prometheus' PromQL parser stays out of go.mod): ./... does not reach it.
	cd tests/promql && go test -count=1 ./...

.PHONY: test-webserver
test-webserver: ## Serve each package's rendered nginx config with a real nginx (installs Debian's nginx-light if missing; CI runs it).
	@command -v nginx >/dev/null || test -x /usr/sbin/nginx || { \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			echo "installing nginx-light (Debian)"; \
			(apt-get install -y -qq --no-install-recommends nginx-light >/dev/null 2>&1 || \
			 (apt-get update -qq && apt-get install -y -qq --no-install-recommends nginx-light >/dev/null)) && \
			bash tests/webserver/stop-nginx-service.sh; \
		else echo "test-webserver needs nginx (e.g. apt-get install nginx-light)"; exit 1; fi; }
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
cluster-up: tools ## Start the local full control plane (etcd, apiserver, controller-manager, scheduler, kwok nodes).
	SWA_BIN_DIR=$(TOOLS_BIN) go run ./tests/cluster/cmd/localcluster up

.PHONY: cluster-down
cluster-down: ## Stop the local control plane; nothing of it stays running.
	SWA_BIN_DIR=$(TOOLS_BIN) go run ./tests/cluster/cmd/localcluster down

##@ Run

.PHONY: run
run: build tools ## Run the operator against KUBECONFIG, or a local cluster it starts, with the sample applied.
	SWA_BIN_DIR=$(TOOLS_BIN) BIN=$(BIN) bash tests/tools/run.sh

.PHONY: install
install: tools ## Install the CRD into the cluster of KUBECONFIG.
	$(KUBECTL) apply --server-side -k config/crd

.PHONY: uninstall
uninstall: tools ## Remove the CRD (and every SimpleWebApp) from the cluster of KUBECONFIG.
	$(KUBECTL) delete -k config/crd --ignore-not-found

##@ Deploy
# Installs the operator itself into the cluster of KUBECONFIG, as kubebuilder
# projects do: config/default (CRD, RBAC, namespace simplewebapp-system,
# Deployment, metrics Service) with the image IMG. There is no registry: build
# the image with the Dockerfile and push it to yours (or load it into the
# nodes), then `make deploy IMG=<registry>/simplewebapp-operator:<tag>`.
# The Helm chart in config/helm/simplewebapp-operator installs the same objects.

IMG            ?= simplewebapp-operator:latest
HELM            = $(TOOLS_BIN)/helm
HELM_CHART      = config/helm/simplewebapp-operator
HELM_RELEASE   ?= simplewebapp
HELM_NAMESPACE ?= simplewebapp-system
# config/default with the image replaced (kustomize in-process; no kustomize
# CLI, no edit of config/).
RENDER          = go run ./tests/install/cmd/render --image $(IMG) config/default

.PHONY: deploy
deploy: tools ## Install CRD, RBAC and the operator (config/default, image IMG) into the cluster of KUBECONFIG.
	$(RENDER) | $(KUBECTL) apply --server-side --field-manager=simplewebapp-deploy -f -

.PHONY: undeploy
undeploy: tools ## Remove what deploy installed, the CRD (and so every SimpleWebApp) included.
	$(RENDER) | $(KUBECTL) delete --ignore-not-found -f -

.PHONY: helm-template
helm-template: tools ## Render the Helm chart (release HELM_RELEASE, namespace HELM_NAMESPACE, image IMG, CRD included).
	@image='$(IMG)'; name=$${image%%@*}; digest=; [[ $$image == *@* ]] && digest=$${image#*@}; \
	tag=; [[ $${name##*/} == *:* ]] && { tag=$${name##*:}; name=$${name%:*}; }; \
	$(HELM) template $(HELM_RELEASE) $(HELM_CHART) --namespace $(HELM_NAMESPACE) --include-crds \
		--set-string image.repository=$$name --set-string image.tag=$${tag:-latest} --set-string image.digest=$$digest

.PHONY: helm-sync
helm-sync: ## Copy the generated CRD and ClusterRole (make manifests) into the Helm chart; tests/install checks they match.
	cp config/crd/bases/example.com_simplewebapps.yaml $(HELM_CHART)/crds/
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
