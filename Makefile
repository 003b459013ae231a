# The two commands a new user needs: `make demo` and `make test`. See README.md.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo
# `make test` runs its own control plane, separate from a developer's `make cluster-up`.
TEST_STATE := $(CURDIR)/.e2e-test
DEV_STATE := $(CURDIR)/.e2e
# A second control plane that trusts the first one's ServiceAccount tokens (remote-cluster tests).
TEST_REMOTE_STATE := $(CURDIR)/.e2e-test-remote
# Integration tests mostly wait on the API server, so run more of them than there are cores.
TEST_THREADS ?= 8

.PHONY: help
help:
	@echo "make demo          run the controller on a local control plane (see README)"
	@echo "make test          build what is missing, start a control plane, run every test, stop it"
	@echo "make chaos         the fault suite: control-plane outages and the soak (slow)"
	@echo "make conformance   compare the kustomize engine with the real kustomize"
	@echo "make bench         benchmarks (not tests); make bench-images: the image reflector alone"
	@echo "make cluster-up | cluster-down | cluster-env   a control plane for development"
	@echo "make crds          regenerate crds/ from src/api and crates/image-reflector-controller/src/api"

.PHONY: tools
tools:
	@command -v go >/dev/null || { echo "Go is required (see README: Requirements)"; exit 1; }
	@command -v $(CARGO) >/dev/null || { echo "Rust (cargo) is required (see README: Requirements)"; exit 1; }
	@for t in openssl curl python3 flock setsid git gpg; do command -v $$t >/dev/null || { echo "$$t is required"; exit 1; }; done
	@# The hostile-input tests read a child's peak RSS and CPU through GNU time's wait4 counters.
	@test -x /usr/bin/time || { echo "GNU time (/usr/bin/time, Debian package time) is required"; exit 1; }
	@# The image reflector's tests and the OCIRepository tests run a real registry (CNCF
	@# distribution), the former with htpasswd auth.
	@test -x /usr/bin/docker-registry || { echo "docker-registry (Debian package docker-registry) is required"; exit 1; }
	@command -v htpasswd >/dev/null || { echo "htpasswd (Debian package apache2-utils) is required"; exit 1; }

.PHONY: test
# The image reflector's tests run beside the Kustomization integration tests (both mostly wait on
# the API server and the registry): cargo holds its lock while tests run, so the integration
# binary runs directly.
test: tools
	@e2e/controlplane/build.sh >/dev/null
	@e2e/sops/build.sh >/dev/null
	@e2e/flux/build.sh >/dev/null
	@e2e/fluxpeer/build.sh >/dev/null
	@e2e/fluxkc/build.sh >/dev/null
	@e2e/fluxirc/crds.sh >/dev/null
	@e2e/fluxirc/build.sh >/dev/null
	@$(CARGO) build --locked --workspace --all-targets
	@# The images ship static binaries: prove they build and run without a Docker engine.
	@$(MAKE) --no-print-directory static-check
	@E2E_STATE=$(TEST_STATE) e2e/cluster.sh up
	@E2E_STATE=$(TEST_REMOTE_STATE) E2E_TRUST_STATE=$(TEST_STATE) e2e/cluster.sh up
	@status=0; \
	export KUBECONFIG=$(TEST_STATE)/admin.kubeconfig E2E_BIN=$$(cat $(TEST_STATE)/bin); \
	export E2E_SOPS_BIN=$$(e2e/sops/build.sh); \
	export E2E_REMOTE_KUBECONFIG=$(TEST_REMOTE_STATE)/admin.kubeconfig; \
	export E2E_FLUX_BIN=$$(e2e/flux/build.sh); \
	export E2E_FLUXPEER_BIN=$$(e2e/fluxpeer/build.sh); \
	export E2E_FLUXKC_BIN=$$(e2e/fluxkc/build.sh); \
	export E2E_FLUX_IRC_CRDS=$$(e2e/fluxirc/crds.sh); \
	export E2E_FLUX_IRC_BIN=$$(e2e/fluxirc/build.sh); \
	$(CARGO) test --locked --workspace --lib --bins || status=$$?; \
	$(CARGO) test --locked -p kustomize-engine --test conformance || status=$$?; \
	integration=$$($(CARGO) test --locked --no-run --test integration 2>&1 | sed -n 's/.*Executable .*(\(.*\))$$/\1/p'); \
	test -x "$$integration" || { echo "no integration test binary"; status=1; }; \
	$(CARGO) test --locked -p image-reflector-controller --test cli --test flux_crds --test api_server --test registry --test hostile --test flux_peer --test controller --test policy --test differential \
	  >$(TEST_STATE)/image-tests.log 2>&1 & images=$$!; \
	"$$integration" --test-threads=$(TEST_THREADS) $(CHAOS_SKIP) || status=$$?; \
	wait $$images || status=$$?; \
	echo "== image-reflector-controller tests (run beside the integration tests)"; cat $(TEST_STATE)/image-tests.log; \
	E2E_STATE=$(TEST_REMOTE_STATE) e2e/cluster.sh down; \
	E2E_STATE=$(TEST_STATE) e2e/cluster.sh down; \
	exit $$status

# The fault suite, after `make test` in CI: tests that start a control plane of their own and
# take parts of it down (API server restart, an etcd outage of E2E_ETCD_OUTAGE_SECS, default
# 30), and the soak. Their names contain one of these words; `make test` skips them. Their
# failures explain themselves in their messages, which a backtrace would push out of view.
CHAOS_TESTS := outage soak
CHAOS_SKIP := $(foreach t,$(CHAOS_TESTS),--skip $(t))
.PHONY: chaos
chaos: tools
	@e2e/controlplane/build.sh >/dev/null
	@e2e/flux/build.sh >/dev/null
	@$(CARGO) build --locked --bin kustomize-controller --test integration
	@E2E_STATE=$(TEST_STATE) e2e/cluster.sh up
	@status=0; \
	export KUBECONFIG=$(TEST_STATE)/admin.kubeconfig E2E_BIN=$$(cat $(TEST_STATE)/bin); \
	export E2E_FLUX_BIN=$$(e2e/flux/build.sh); \
	RUST_BACKTRACE=0 $(CARGO) test --locked --test integration -- --include-ignored --test-threads=2 $(CHAOS_TESTS) || status=$$?; \
	E2E_STATE=$(TEST_STATE) e2e/cluster.sh down; \
	exit $$status

# Builds every case in crates/kustomize/tests/cases/ with our engine and with the kustomize oracle.
.PHONY: conformance
conformance: tools
	@bin=$$(e2e/controlplane/build.sh); \
	E2E_BIN=$$bin $(CARGO) test --locked -p kustomize-engine --test conformance

# Not a test: our engine vs Go kustomize on a generated tree of >= 1000 objects.
.PHONY: bench-kustomize
bench-kustomize: tools
	@benches/kustomize.sh

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
	@cp crds/kustomize.toolkit.fluxcd.io_kustomizations.yaml config/crd/
	@$(CARGO) run --quiet -p image-reflector-controller -- crds --output-dir crds
	@cp crds/image.toolkit.fluxcd.io_imagerepositories.yaml crds/image.toolkit.fluxcd.io_imagepolicies.yaml config/crd/

.PHONY: static static-check static-build docker-build
# The static binaries the images ship, built with the release profile (fat LTO, one codegen
# unit: ~11 minutes cold on two cores) and checked without a Docker engine.
static:
	@$(MAKE) --no-print-directory static-build STATIC_PROFILE=release
# What `make test` runs: the same static linking and checks with the static-check profile
# (release without LTO and optimisation), minutes cheaper; `make static` is for shipping.
static-check:
	@$(MAKE) --no-print-directory static-build STATIC_PROFILE=static-check
STATIC_PROFILE ?= release
STATIC_TARGET := x86_64-unknown-linux-gnu
static-build:
	@RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build --locked --profile $(STATIC_PROFILE) \
	  -p kustomize-controller --bin kustomize-controller \
	  -p image-reflector-controller --bin image-reflector-controller \
	  --target $(STATIC_TARGET) --target-dir target/static
	@dir=target/static/$(STATIC_TARGET)/$(STATIC_PROFILE); \
	for bin in kustomize-controller image-reflector-controller; do \
	  if ldd "$$dir/$$bin" 2>&1 | grep -q '=>'; then echo "$$dir/$$bin needs shared libraries:"; ldd "$$dir/$$bin"; exit 1; fi; \
	done; \
	"$$dir/kustomize-controller" crds | grep -q 'name: kustomizations.kustomize.toolkit.fluxcd.io'; \
	"$$dir/image-reflector-controller" crds | grep -q 'name: imagerepositories.image.toolkit.fluxcd.io'; \
	"$$dir/image-reflector-controller" --help | grep -q -- '--watch-all-namespaces'; \
	echo "static binaries OK: $$(cd $$dir && du -h kustomize-controller image-reflector-controller | tr '\t\n' ' ')"
# One image per controller (the Dockerfile's targets), so each swaps for Flux's image as is.
docker-build:
	docker build --target kustomize-controller -t kustomize-controller:dev .
	docker build --target image-reflector-controller -t image-reflector-controller:dev .

.PHONY: demo demo-down
demo: tools
	@E2E_STATE=$(DEV_STATE) e2e/demo.sh up
demo-down:
	@E2E_STATE=$(DEV_STATE) e2e/demo.sh down
	@E2E_STATE=$(DEV_STATE) e2e/cluster.sh down

# Object counts of the applier benchmark.
BENCH_SIZES ?= 100 1000
# The benchmarks' control plane, started afresh and stopped by each benchmark.
BENCH_STATE ?= $(CURDIR)/.e2e-bench
.PHONY: bench
bench: bench-kustomize bench-apply bench-controller bench-images

# Applier benchmark, on the benchmarks' own control plane (started and stopped here).
.PHONY: bench-apply
bench-apply: tools
	@E2E_STATE=$(BENCH_STATE) e2e/cluster.sh up; \
	status=0; \
	KUBECONFIG=$(BENCH_STATE)/admin.kubeconfig $(CARGO) bench --quiet --locked --bench apply -- $(BENCH_SIZES) \
	  || status=$$?; \
	E2E_STATE=$(BENCH_STATE) e2e/cluster.sh down; \
	exit $$status

# Controller benchmark: ours beside Flux's kustomize-controller (built from its Go module), in
# turn, on a control plane of its own. BENCH_SCALE=0.1 makes every workload ten times smaller;
# BENCH_ONLY=single,wait runs only those workloads (single, wait, fleet).
.PHONY: bench-controller
bench-controller: tools
	@flux=$$(e2e/fluxkc/build.sh); \
	$(CARGO) build --quiet --locked --release --bin kustomize-controller; \
	E2E_STATE=$(BENCH_STATE) e2e/cluster.sh up; \
	status=0; \
	KUBECONFIG=$(BENCH_STATE)/admin.kubeconfig E2E_STATE=$(BENCH_STATE) FLUX_KC_BIN=$$flux \
	  $(CARGO) bench --quiet --locked --bench controller || status=$$?; \
	E2E_STATE=$(BENCH_STATE) e2e/cluster.sh down; \
	exit $$status

# Image reflector benchmark: ours (release) beside Flux's image-reflector-controller v1.2.0, in
# turn, on one control plane and one registry: 1000 ImageRepositories x 100 tags and 1000
# ImagePolicies, cold and after a restart (benches/images.py). BENCH_SCALE=0.1 makes it ten
# times smaller; BENCH_PEERS=flux or ours runs one alone.
.PHONY: bench-images
bench-images: tools
	@flux=$$(e2e/fluxirc/build.sh); \
	$(CARGO) build --quiet --locked --release -p image-reflector-controller --bin image-reflector-controller; \
	target=$$($(CARGO) metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])'); \
	E2E_STATE=$(BENCH_STATE) e2e/cluster.sh up; \
	status=0; \
	KUBECONFIG=$(BENCH_STATE)/admin.kubeconfig E2E_STATE=$(BENCH_STATE) FLUX_IRC_BIN=$$flux \
	  BENCH_IRC=$$target/release/image-reflector-controller benches/images.py || status=$$?; \
	E2E_STATE=$(BENCH_STATE) e2e/cluster.sh down; \
	exit $$status
