# tollgate — build, test and benchmark targets. Tools are installed into
# ./bin from the Go module proxy at pinned versions.
GO       ?= go
BIN      := $(CURDIR)/bin
GOLANGCI := $(BIN)/golangci-lint
GOLANGCI_VERSION := v2.15.0

.PHONY: all build image test deps tidy vet lint race kubeapi kubeapi-check bench fuzz demo tools clean

all: build

## VERSION is the chart's appVersion, so that the image `make image` tags
## is the one the chart deploys by default; COMMIT is the checked-out commit.
## `tollgate --version` prints both.
VERSION ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' charts/tollgate/Chart.yaml)
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
VERSION_LDFLAGS := -X main.version=$(VERSION) -X main.commit=$(COMMIT)

## build: compile every package, and the tollgate binary into bin/tollgate.
build:
	$(GO) build ./...
	$(GO) build -ldflags '$(VERSION_LDFLAGS)' -o $(BIN)/tollgate ./cmd/tollgate

## image: the container image, without a daemon: a static linux binary in one
## layer (hack/image), written as an OCI and `docker save` archive tagged
## $(IMAGE_REPO):$(VERSION). IMAGE_ARCH picks the architecture; IMAGE_CA_CERTS
## adds a CA bundle. docs/image.md says how to load or push it.
IMAGE_REPO     ?= ghcr.io/tollgate/tollgate
IMAGE_ARCH     ?= amd64
IMAGE_TAR      ?= $(BIN)/tollgate-image.tar
IMAGE_CA_CERTS ?=
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=$(IMAGE_ARCH) $(GO) build -trimpath \
	  -ldflags '-s -w $(VERSION_LDFLAGS)' -o $(BIN)/linux-$(IMAGE_ARCH)/tollgate ./cmd/tollgate
	SOURCE_DATE_EPOCH=$${SOURCE_DATE_EPOCH:-$$(git log -1 --format=%ct 2>/dev/null || echo 0)} \
	  $(GO) run ./hack/image -binary $(BIN)/linux-$(IMAGE_ARCH)/tollgate -arch $(IMAGE_ARCH) \
	  -repo $(IMAGE_REPO) -version $(VERSION) -revision '$(COMMIT)' -ca-certs '$(IMAGE_CA_CERTS)' -o $(IMAGE_TAR)

## test: install test dependencies, module tidiness, lint (vet among it), the
## real kube-apiserver and etcd the Kubernetes tests run, and every test with
## the race detector (what CI runs). go vet's analyzers run once, as
## golangci-lint's govet (its default set is cmd/vet's list), so the tests
## run with -vet=off. kubeapi-check comes first: it compiles the standard
## library and etcd's packages for the tool builds after it; lint then
## compiles the packages the kube-apiserver build and the tests share.
test: deps tidy kubeapi-check lint kubeapi race

## deps: the Debian and npm packages the tests need (hack/deps.sh).
deps:
	./hack/deps.sh

## tidy: fail when go.mod or go.sum is not tidy.
tidy:
	$(GO) mod tidy -diff

## Everything that needs no cgo builds in one mode, CGO_ENABLED=0 (vet,
## lint, the tests run without the race detector and the binaries they
## build), so a cold run compiles the dependencies once for all of them;
## only -race needs cgo.
NOCGO := CGO_ENABLED=0

## vet: go vet alone (make test runs the same analyzers in lint).
vet:
	$(NOCGO) $(GO) vet ./...

## race: every test. Under the race detector where goroutines meet; the
## packages whose code starts none and shares nothing across goroutines run
## without it (it costs them 3 to 4 times the time and finds nothing), and
## the tokenizers' shared state is raced by its concurrency test alone.
## The test binaries are linked without DWARF (-s -w), which halves the
## link of the larger ones; stack traces and race reports do not need it.
## -vet=off: lint has run vet's analyzers, and go test's own vet pass would
## analyze every dependency again under the race build.
NORACE := ./sched/... ./extproc/request/... ./extproc/schedmetrics ./envoy/... ./examples/... \
	./hack/... ./charts/... ./test/kvwire ./test/testbin
TESTFLAGS := -ldflags='-s -w' -vet=off -count=1
race:
	$(NOCGO) $(GO) test $(TESTFLAGS) -shuffle=on -timeout 20m $(NORACE)
	$(GO) test $(TESTFLAGS) -race -run 'TestConcurrentUse' ./extproc/request/tokenize
	$(GO) test $(TESTFLAGS) -race -shuffle=on -timeout 20m $(filter-out $(shell $(GO) list $(NORACE)),$(shell $(GO) list ./...))

## kubeapi: kube-apiserver (the k8s.io/kubernetes release matching the project's
## k8s.io/* modules) and etcd for the real-API tests, built from the separate
## module in test/kubeapi into test/kubeapi/bin, and the Prometheus Operator
## CRDs generated from its API types into test/kubeapi/crds. Rebuilt only when
## that module changes. The build reuses the packages the tests compile too,
## and its own (over a gigabyte) leave the build cache with it
## (hack/scratch-gocache.sh).
KUBEAPI      := test/kubeapi
KUBE_VERSION := v1.37.2
KUBE_LDFLAGS := -X k8s.io/component-base/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 \
	-X k8s.io/client-go/pkg/version.gitVersion=$(KUBE_VERSION) \
	-X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=37
## The packages only kube-apiserver builds (over two thirds of its compile)
## compile without inlining, a quarter less CPU; the chart tests' CPU
## against that API server did not change measurably. On the command line,
## these patterns win over GOFLAGS' all=, so they repeat -dwarf=false.
KUBE_GCFLAGS := $(foreach m,k8s.io/kubernetes k8s.io/apiserver k8s.io/kube-aggregator,-gcflags='$(m)/...=-dwarf=false -l')
MONITORING_MOD := github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring
KUBEAPI_STAMP  := $(KUBEAPI)/bin/.built

kubeapi: $(KUBEAPI_STAMP)

$(KUBEAPI_STAMP): $(KUBEAPI)/go.mod $(KUBEAPI)/go.sum $(wildcard $(KUBEAPI)/cmd/*/*.go) go.mod
	cd $(KUBEAPI) && $(NOCGO) GO=$(GO) $(CURDIR)/hack/scratch-gocache.sh $(GO) build $(KUBE_GCFLAGS) -ldflags '$(KUBE_LDFLAGS) -s -w' \
	  -o bin/ k8s.io/kubernetes/cmd/kube-apiserver ./cmd/etcd sigs.k8s.io/controller-tools/cmd/controller-gen
	rm -rf $(KUBEAPI)/crds
	$(GO) mod download $(MONITORING_MOD)
	cd "$$($(GO) list -m -f '{{.Dir}}' $(MONITORING_MOD))" && GOFLAGS=-mod=mod \
	  $(CURDIR)/$(KUBEAPI)/bin/controller-gen crd paths=./v1 output:crd:dir=$(CURDIR)/$(KUBEAPI)/crds
	touch $@

## kubeapi-check: tidiness and vet of the nested test/kubeapi module, which
## ./... in the main module does not reach, and that it builds the modules
## the main module builds too at the same versions.
kubeapi-check:
	cd $(KUBEAPI) && $(GO) mod tidy -diff && $(NOCGO) $(GO) vet ./...
	GO=$(GO) ./hack/kubeapi-versions.sh

## The test targets compile without DWARF, set through GOFLAGS so that the
## go commands the tests start (builds of the tollgate binary) do too and
## share the compiled packages: nothing in make test reads it (stack traces
## and race reports use the symbol table), and it is a fifth of every
## compiled package in the build cache.
TEST_GOFLAGS := $(strip $(GOFLAGS) -gcflags=all=-dwarf=false)
tidy vet lint race kubeapi $(KUBEAPI_STAMP) kubeapi-check $(GOLANGCI): export GOFLAGS = $(TEST_GOFLAGS)

lint: $(GOLANGCI)
	$(NOCGO) $(GOLANGCI) run ./...

## golangci-lint builds like the tests (CGO_ENABLED=0, so it shares their
## standard library), and its own packages leave the build cache with it.
$(GOLANGCI):
	GOBIN=$(BIN) $(NOCGO) GO=$(GO) ./hack/scratch-gocache.sh \
	  $(GO) install -ldflags '-s -w' github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)

tools: $(GOLANGCI)

## bench: the performance benchmark (not part of test): scheduler and tokenizer
## micro-benchmarks, end-to-end load against a null ext_proc server, replica
## mode's peer hop and scheduler throughput (needs etcd), held-request
## memory and drain, engine-metrics scrape cost at 256 workers. Prints one table, also written to bench-out/results.md.
## PROFILE=1 adds CPU and allocation profiles of the server code under load.
bench:
	$(GO) run ./test/bench/cmd/tollbench run -out bench-out $(if $(PROFILE),-profile)

## fuzz: a short run of every fuzz target.
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 5s $$pkg || exit 1; \
	  done; \
	done

## demo: the self-contained demonstration (real server, simulated Envoy and workers).
demo:
	$(GO) run ./test/demo/cmd/tollgate-demo

clean:
	rm -rf $(BIN) demo-out
