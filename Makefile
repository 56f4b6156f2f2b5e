# tollgate — build, test and benchmark targets. Tools are installed into
# ./bin from the Go module proxy at pinned versions.
GO       ?= go
BIN      := $(CURDIR)/bin
GOLANGCI := $(BIN)/golangci-lint
GOLANGCI_VERSION := v2.15.0

.PHONY: all build test deps tidy vet lint race bench fuzz demo tools clean

all: build

build:
	$(GO) build ./...

## test: install test dependencies, module tidiness, vet, lint, and every test with
## the race detector (what CI runs).
test: deps tidy vet lint race

## deps: the Debian and npm packages the tests need (hack/deps.sh).
deps:
	./hack/deps.sh

## tidy: fail when go.mod or go.sum is not tidy.
tidy:
	$(GO) mod tidy -diff

vet:
	$(GO) vet ./...

race:
	$(GO) test -race -shuffle=on -count=1 -timeout 20m ./...

lint: $(GOLANGCI)
	$(GOLANGCI) run ./...

$(GOLANGCI):
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)

tools: $(GOLANGCI)

## bench: the performance benchmark (not part of test): scheduler and tokenizer
## micro-benchmarks, end-to-end load against a null ext_proc server, held-request
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
	$(GO) run ./cmd/tollgate demo

clean:
	rm -rf $(BIN) demo-out
