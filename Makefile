# tollgate — build, test and benchmark targets. Tools are installed into
# ./bin from the Go module proxy at pinned versions.
GO       ?= go
BIN      := $(CURDIR)/bin
GOLANGCI := $(BIN)/golangci-lint
GOLANGCI_VERSION := v2.15.0

.PHONY: all build test vet lint race bench fuzz demo tools clean

all: build

build:
	$(GO) build ./...

## test: vet, lint, and every test with the race detector (what CI runs).
test: vet lint race

vet:
	$(GO) vet ./...

race:
	$(GO) test -race -shuffle=on -count=1 -timeout 20m ./...

lint: $(GOLANGCI)
	$(GOLANGCI) run ./...

$(GOLANGCI):
	GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_VERSION)

tools: $(GOLANGCI)

## bench: scheduler micro-benchmarks (not part of test).
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 1x -count 1 ./sched/... >/dev/null
	$(GO) test -run '^$$' -bench . -benchmem ./sched/...

## fuzz: a short run of every fuzz target.
FUZZTIME ?= 20s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## demo: the self-contained demonstration (real server, simulated Envoy and workers).
demo:
	$(GO) run ./cmd/tollgate demo

clean:
	rm -rf $(BIN) demo-out
