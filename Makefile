# The two commands a new user needs: `make demo` and `make test`. See README.md.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo
# `make test` runs its own control plane, separate from a developer's `make cluster-up`.
TEST_STATE := $(CURDIR)/.e2e-test
DEV_STATE := $(CURDIR)/.e2e
# Integration tests mostly wait on the API server, so run more of them than there are cores.
TEST_THREADS ?= 8

.PHONY: help
help:
	@echo "make demo          run the controller on a local control plane (see README)"
	@echo "make test          build what is missing, start a control plane, run every test, stop it"
	@echo "make conformance   compare the kustomize engine with the real kustomize"
	@echo "make bench         benchmarks (not tests)"
	@echo "make cluster-up | cluster-down | cluster-env   a control plane for development"
	@echo "make crds          regenerate crds/ from src/api"

.PHONY: tools
tools:
	@command -v go >/dev/null || { echo "Go is required (see README: Requirements)"; exit 1; }
	@command -v $(CARGO) >/dev/null || { echo "Rust (cargo) is required (see README: Requirements)"; exit 1; }
	@for t in openssl curl python3 flock setsid; do command -v $$t >/dev/null || { echo "$$t is required"; exit 1; }; done

.PHONY: test
test: tools
	@e2e/controlplane/build.sh >/dev/null
	@$(CARGO) build --locked --all-targets
	@E2E_STATE=$(TEST_STATE) e2e/cluster.sh up
	@status=0; \
	export KUBECONFIG=$(TEST_STATE)/admin.kubeconfig E2E_BIN=$$(cat $(TEST_STATE)/bin); \
	$(CARGO) test --locked --lib --bins || status=$$?; \
	$(CARGO) test --locked --test conformance || status=$$?; \
	$(CARGO) test --locked --test integration -- --test-threads=$(TEST_THREADS) || status=$$?; \
	E2E_STATE=$(TEST_STATE) e2e/cluster.sh down; \
	exit $$status

# Builds every case in tests/kustomize/ with our engine and with the kustomize oracle.
.PHONY: conformance
conformance: tools
	@bin=$$(e2e/controlplane/build.sh); \
	E2E_BIN=$$bin $(CARGO) test --locked --test conformance

# Not a test: our engine vs Go kustomize on a generated tree of >= 1000 objects.
.PHONY: bench-build
bench-build: tools
	@benches/build.sh

.PHONY: cluster-up cluster-down cluster-env
cluster-up: tools
	@E2E_STATE=$(DEV_STATE) e2e/cluster.sh up
cluster-down:
	@E2E_STATE=$(DEV_STATE) e2e/cluster.sh down
cluster-env:
	@E2E_STATE=$(DEV_STATE) e2e/cluster.sh env

.PHONY: crds
crds:
	@$(CARGO) run --quiet -- crds > crds/kustomize.toolkit.fluxcd.io_kustomizations.yaml

.PHONY: demo demo-down
demo: cluster-up
	@export KUBECONFIG=$(DEV_STATE)/admin.kubeconfig; bin=$$(cat $(DEV_STATE)/bin); \
	$(CARGO) run --quiet -- crds | "$$bin/kubectl" apply --server-side -f - ; \
	"$$bin/kubectl" wait --for=condition=Established crd/kustomizations.kustomize.toolkit.fluxcd.io --timeout=60s; \
	echo; echo "The control plane is up with the Kustomization CRD installed."; \
	echo "(The controller itself is not wired yet: this demo stops here for now.)"; \
	echo "Try:  eval \$$(make -s cluster-env) && kubectl get crd,ks -A"; \
	echo "Stop: make demo-down"
demo-down: cluster-down
