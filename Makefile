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
manifests: ## Generate the CRD and the RBAC role from the markers in api/ and controllers/.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./..." output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac

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
build: ## Build the operator binary (the same go build the Dockerfile runs).
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o $(BIN) .

.PHONY: tools
tools: ## Build (or reuse from the cache) the local control plane binaries.
	bash tests/tools/build.sh >/dev/null

.PHONY: test
test: tools ## Run every test: unit, golden, integration (envtest) and end to end (full local cluster).
	SWA_BIN_DIR=$(TOOLS_BIN) KUBEBUILDER_ASSETS=$${KUBEBUILDER_ASSETS:-$(TOOLS_BIN)} go test -count=1 -timeout $(TEST_TIMEOUT) ./...

.PHONY: golden
golden: ## Rewrite the golden render files after a deliberate change to channels/.
	go test ./tests/golden/ -count=1 -update

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
