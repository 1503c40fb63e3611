# nri-hcn-portmap
GO                 ?= go
CONTAINERD_VERSION ?= v2.4.2
GOBIN              ?= $(shell $(GO) env GOPATH)/bin
CONTAINERD         := $(GOBIN)/containerd
CONTAINERD_SHIM    := $(GOBIN)/containerd-shim-runc-v2
KUBE_APISERVER     := $(GOBIN)/kube-apiserver-v1.37.2
ETCD               := $(GOBIN)/etcd-v3.6.16
KUBECTL            := $(GOBIN)/kubectl-v1.37.2
export KUBE_APISERVER_BIN := $(KUBE_APISERVER)
export ETCD_BIN := $(ETCD)
export KUBECTL_BIN := $(KUBECTL)
export CONTAINERD_BIN := $(CONTAINERD)
# The version stamped into the binaries (nri-hcn-portmap version, the start
# log line): the git description of the tree, or VERSION=... to override.
VERSION            ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# the commit and its date (not the build's: the same tree builds the same
# binary)
COMMIT             ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DATE               ?= $(shell git log -1 --format=%cI 2>/dev/null || echo unknown)
LDFLAGS            := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)

.PHONY: all build build-windows vet test unit e2e demo containerd helm promtool manifests clean fuzz bench test-windows e2e-windows kube compat compat-containerd dist schema trip

all: build build-windows

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/nri-hcn-portmap ./cmd/nri-hcn-portmap

build-windows:
	GOOS=windows GOARCH=amd64 $(GO) build -ldflags "$(LDFLAGS)" -o bin/nri-hcn-portmap.exe ./cmd/nri-hcn-portmap

# vet: gofmt, both OSes, and go.mod lists exactly what the product uses
# (the benchmarks are their own module, test/bench, with their own go.mod).
vet:
	@unformatted="$$(gofmt -l .)"; if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) mod tidy -diff
	$(GO) vet ./...
	GOOS=windows GOARCH=amd64 $(GO) build ./...
	GOOS=windows GOARCH=amd64 $(GO) vet ./...
	cd test/bench && $(GO) mod tidy -diff && $(GO) vet ./...

# The tools the tests run are built without symbol tables and DWARF (-s
# -w): nobody debugs them, and their links (kube-apiserver's above all) are
# a good part of a fresh machine's first build.
TOOL_LDFLAGS ?= -s -w

# promtool checks the shipped alert rules (test/deploy): the one on PATH
# where there is one (.ci/run installs Debian's, package prometheus,
# promtool 2.42), else built once into $(GOBIN), about five minutes
PROMTOOL_VERSION ?= v0.316.0
PROMTOOL     ?= $(or $(shell command -v promtool),$(GOBIN)/promtool)
export PROMTOOL_BIN := $(PROMTOOL)
promtool: $(PROMTOOL)
$(PROMTOOL):
	$(GO) install -ldflags "$(TOOL_LDFLAGS)" github.com/prometheus/prometheus/cmd/promtool@$(PROMTOOL_VERSION)

# helm v3.22.0 (pinned in hack/kube/apiserver/go.mod, helm.go), for
# rendering the chart in tests and into deploy/kustomize: built from the
# module that builds kube-apiserver and kubectl, where its Kubernetes
# packages are theirs, so after make kube it compiles in under a minute
# (about three minutes alone).
HELM         := $(GOBIN)/helm
export HELM_BIN := $(HELM)
helm: $(HELM)
$(HELM):
	cd hack/kube/apiserver && $(GO) build -ldflags "$(TOOL_LDFLAGS)" -o $@ helm.sh/helm/v3/cmd/helm

# The kustomize manifests are rendered from the Helm chart, the one source
# (test/deploy fails when they drift): make manifests after changing it.
# Rendered for Kubernetes 1.30, which has ValidatingAdmissionPolicy (helm
# template asks no cluster, so it is told).
KUBE_VERSION ?= 1.30.0
KUBE_APIS    ?= admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy
manifests: $(HELM)
	$(HELM) template nri-hcn-portmap deploy/helm/nri-hcn-portmap --namespace nri-hcn-portmap \
		--kube-version $(KUBE_VERSION) --api-versions $(KUBE_APIS) | $(GO) run ./hack/kustomize -out deploy/kustomize
	$(HELM) template nri-hcn-portmap deploy/helm/nri-hcn-portmap --namespace nri-hcn-portmap \
		--kube-version $(KUBE_VERSION) --api-versions $(KUBE_APIS) --set daemonset.enabled=false --set cleanup.enabled=true \
		--show-only templates/cleanup.yaml | $(GO) run ./hack/kustomize -out deploy/kustomize -cleanup
	$(HELM) template nri-hcn-portmap deploy/helm/nri-hcn-portmap --namespace nri-hcn-portmap \
		--kube-version $(KUBE_VERSION) --api-versions $(KUBE_APIS) --set daemonset.enabled=false --set serviceNodes.enabled=true \
		| $(GO) run ./hack/kustomize -out deploy/kustomize -service-nodes

# The chart's values.schema.json takes its limits from the plugin's
# (config.Limits, written by config/schema; test/deploy fails when they
# drift): make schema after changing either.
schema:
	$(GO) run ./hack/schema

# A release's artifacts (all but the image), in dist/$(VERSION)/:
#   make dist VERSION=v1.2.3
dist: $(HELM)
	VERSION=$(VERSION) HELM=$(HELM) GO=$(GO) bash hack/dist.sh

# containerd for the end-to-end tests and the demo, built from source with
# the Go toolchain (about two minutes the first time).
containerd: $(CONTAINERD) $(CONTAINERD_SHIM)
# and the runc shim (the CRI e2e test runs a real hostNetwork pod with
# runc): one go install, so the packages the two share compile once and one
# links while the other compiles
$(CONTAINERD) $(CONTAINERD_SHIM) &:
	$(GO) install -ldflags "$(TOOL_LDFLAGS)" github.com/containerd/containerd/v2/cmd/containerd@$(CONTAINERD_VERSION) \
		github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$(CONTAINERD_VERSION)

# A real kube-apiserver and etcd for the Kubernetes e2e tests, built from
# source by the wrapper modules in hack/kube (about 7 minutes the first time
# on 2 cores; cached in GOBIN).
kube: $(KUBE_APISERVER) $(ETCD) $(KUBECTL)
# with its version stamped as a release build's (helm checks a chart's
# kubeVersion against it)
KUBE_VERSION_LDFLAGS := $(TOOL_LDFLAGS) -X k8s.io/component-base/version.gitVersion=v1.37.2 \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
	-X k8s.io/component-base/version.gitTreeState=clean
# and kubectl (the README's and NOTES.txt's commands run as written in
# test/deploy, and kubectl kustomize renders the overlays): one go build,
# as containerd and its shim
$(KUBE_APISERVER) $(KUBECTL) &:
	rm -rf $(GOBIN)/kube-build.tmp && mkdir -p $(GOBIN)/kube-build.tmp
	cd hack/kube/apiserver && $(GO) build -ldflags "$(KUBE_VERSION_LDFLAGS)" -o $(GOBIN)/kube-build.tmp/ \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl
	mv $(GOBIN)/kube-build.tmp/kube-apiserver $(KUBE_APISERVER)
	mv $(GOBIN)/kube-build.tmp/kubectl $(KUBECTL)
	rmdir $(GOBIN)/kube-build.tmp
$(ETCD):
	cd hack/kube/etcd && $(GO) build -ldflags "$(TOOL_LDFLAGS)" -o $@ go.etcd.io/etcd/server/v3

# Everything: vet (Linux and Windows), unit tests with the race detector,
# end-to-end tests against a real containerd. Needs root for containerd.
# The end-to-end tests run without -race: the plugin they test runs as its
# own process, built as released, and their race builds (the Kubernetes
# clients above all) were minutes of a fresh machine's run.
# Each package has a short -timeout, so a leaked lock fails in minutes, not
# after go test's default ten.
UNIT_TIMEOUT ?= 2m
E2E_TIMEOUT  ?= 8m
test: vet containerd kube helm promtool unit
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) ./test/...

unit:
	$(GO) test -race -count=1 -timeout $(UNIT_TIMEOUT) $$($(GO) list ./... | grep -v /test/)

e2e: containerd
	$(GO) test -count=1 -timeout $(E2E_TIMEOUT) -v ./test/e2e/

demo: containerd
	$(GO) run ./test/demo

clean:
	rm -rf bin

# Fuzz the parsers of untrusted input for FUZZTIME each (not part of `make test`).
# Minimizing a new input is bounded (FUZZMINIMIZE), so the time goes to
# fuzzing rather than to shrinking inputs.
FUZZTIME     ?= 30s
FUZZMINIMIZE ?= 2s
FUZZ          = $(GO) test -run '^$$' -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINIMIZE)
fuzz:
	$(FUZZ) -fuzz '^FuzzParsePortMappings$$' ./plugin/request/
	$(FUZZ) -fuzz '^FuzzDecodeCRIMetadata$$' ./plugin/request/
	$(FUZZ) -fuzz '^FuzzDecode$$' ./config/

# The end-to-end suite against each containerd line the README names, each
# built from its module source into COMPAT_DIR (2.5 to 7.5 minutes each the
# first time on 2 cores). The harness writes the config version each reads.
COMPAT_VERSIONS ?= v1.7.35 v2.0.14 v2.1.9 v2.2.9 v2.3.7 v2.4.2
COMPAT_DIR      ?= $(GOBIN)/containerd-compat
compat: kube helm compat-containerd
	@for v in $(COMPAT_VERSIONS); do \
		echo "== containerd $$v"; \
		CONTAINERD_BIN=$(COMPAT_DIR)/containerd-$$v/containerd \
			$(GO) test -count=1 -timeout $(E2E_TIMEOUT) ./test/e2e/ || exit 1; \
	done

# only the builds of make compat
compat-containerd:
	@for v in $(COMPAT_VERSIONS); do bash hack/containerd-build.sh $$v $(COMPAT_DIR) || exit 1; done

# Benchmarks (needs root and containerd, like the e2e tests): writes
# test/bench/results/BENCHMARKS.md and bench.png.
bench: containerd
	cd test/bench && $(GO) run ./report -out results/BENCHMARKS.md -plot results/bench.png

# The trip of one start through the controller, counted from a trace of its
# calls (delve's dlv trace of TestOneStartIsMappedAndReportedOnce, hack/trip):
# the figures of docs/development.md's trip. Not part of make test.
DLV_VERSION ?= v1.27.2
DLV         ?= $(GOBIN)/dlv
TRIP_TRACE  := nri-hcn-portmap/nri-hcn-portmap/(plugin|hcn)
trip: $(DLV)
	$(DLV) trace --test ./plugin '$(TRIP_TRACE)' -- -test.run '^TestOneStartIsMappedAndReportedOnce$$' 2>&1 | $(GO) run ./hack/trip $(TRIP_FLAGS)
$(DLV):
	$(GO) install github.com/go-delve/delve/cmd/dlv@$(DLV_VERSION)

# The Windows code (hcn's hcsshim adapter) executed under wine against the
# HNS emulator; needs wine64 and gcc-mingw-w64-x86-64 (.ci/run installs them).
test-windows:
	bash test/hnsemu/test-windows.sh

# the release .exe doing its main job under wine, against real containerd
# (make containerd) and the HNS emulator
e2e-windows: build-windows
	PLUGIN_EXE=$(CURDIR)/bin/nri-hcn-portmap.exe bash test/hnsemu/e2e-windows.sh
