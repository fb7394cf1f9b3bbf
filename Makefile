# cudatap — see README.md. Tests and the demo need root (real uprobes).
# sudo resets PATH: fall back to the usual Go install location.
GO      ?= $(shell command -v go || echo /usr/local/go/bin/go)
BIN     ?= bin/cudatap
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The committed BPF objects are built with Debian 12's clang-19 and
# llvm-strip-19 (what .ci/run installs): another compiler makes other bytes,
# and check-generate would fail for no fault of the sources.
BPF_CLANG ?= clang-19
BPF_STRIP ?= llvm-strip-19
# go-nvml's nvml.h marks the NVML 13 deprecations: the cgo stubs of its
# bindings draw a page of -Wdeprecated-declarations warnings from the C
# compiler on every cold build, none of them about cudatap's code.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
# What `cudatap version` says about the build (besides what Go records:
# commit, its time, a modified tree): the release, and the BPF object.
BPF_OBJECT := $(shell sha256sum tracer/probe/cudatap_bpfel.o 2>/dev/null | cut -c1-16)
LDFLAGS ?= -X main.version=$(VERSION) -X main.bpfObject=$(BPF_OBJECT)

.PHONY: all build demo test test-deps test-short bench generate check-generate vet gpu-check clean

all: build

build:
	CGO_ENABLED=1 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/cudatap

demo: build
	./$(BIN) demo

# Everything, including the root tests with real uprobes. One package at a
# time (-p 1): the --all tests trace every CUDA process on the host, and
# another package's test programs (some killed mid-call on purpose) would
# be theirs too.
test: test-deps
	$(GO) vet ./...
	$(GO) test -p 1 -count=1 ./...

# What the tests need beyond Go and a C compiler: Debian's Python packages
# for HolisticTraceAnalysis (testdata/hta), which checks that the traces
# read as Kineto traces, Debian's prometheus, which scrapes the agent in
# its test, and Debian's chromium, which opens the HTML report headless
# (cmd/cudatap/report_test.go). Installed when missing.
HTA_DEPS = python3-pandas python3-numpy python3-networkx python3-plotly python3-yaml python3-psutil python3-pydot
test-deps:
	@command -v prometheus >/dev/null || { \
		command -v apt-get >/dev/null || { echo "the tests need Debian's prometheus package (a Prometheus server) on PATH" >&2; exit 1; }; \
		echo "installing prometheus"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq prometheus >/dev/null; }; }
	@/usr/bin/python3 -c 'import pandas, numpy, networkx, plotly, yaml, psutil, pydot' 2>/dev/null || { \
		command -v apt-get >/dev/null || { echo "the tests need $(HTA_DEPS) (Debian package names) for /usr/bin/python3" >&2; exit 1; }; \
		echo "installing $(HTA_DEPS)"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(HTA_DEPS) >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(HTA_DEPS) >/dev/null; }; }
	@command -v chromium >/dev/null || { \
		command -v apt-get >/dev/null || { echo "the tests need Debian's chromium (a headless browser for the HTML report) on PATH" >&2; exit 1; }; \
		echo "installing chromium"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; }

# Without root: unit tests only (root tests skip with a message).
test-short:
	$(GO) test -short ./...

# Decode + model throughput and tracing overhead; the README quotes these.
bench:
	$(GO) test -run '^$$' -bench 'DecodeAndModel|ModelHandle' -benchtime 3s -cpu 1 -benchmem ./tracer/model/
	$(GO) test -run '^$$' -bench 'Consumer' -benchtime 2s -cpu 1 ./tracer/
	$(GO) test -run '^$$' -bench 'BenchmarkFlood$$' -benchtime 1x ./tracer/
	$(GO) test -run '^$$' -bench 'LaunchOverhead' -benchtime 1x ./tracer/
	$(GO) test -run '^$$' -bench 'AttachLatency' -benchtime 20x ./tracer/
	$(GO) test -run '^$$' -bench 'Unwind' ./symbolize/unwind/
	$(GO) test -run '^$$' -bench 'Poll' ./tracer/nvml/

generate:
	@command -v $(BPF_CLANG) >/dev/null || { echo "make generate needs $(BPF_CLANG) and $(BPF_STRIP): apt-get install clang-19 llvm-19 libbpf-dev" >&2; exit 1; }
	cd tracer/probe && BPF_CLANG=$(BPF_CLANG) BPF_STRIP=$(BPF_STRIP) $(GO) generate ./...
	cd tracer/gputime/collector && $(GO) generate .
	cd internal/inject && $(GO) generate .

# CI: the committed BPF objects and collector library must be what the
# sources produce.
check-generate: generate
	git diff --exit-code -- tracer/ bpf/ internal/inject/ || (echo "generated BPF objects, collector or injection stub are stale: run make generate and commit" >&2; exit 1)

vet:
	$(GO) vet ./...

# On a GPU machine: compare cudatap's syncs with PyTorch's sync debug mode.
gpu-check: build
	./testdata/gpu/gpu-check.sh ./$(BIN)

clean:
	rm -rf bin
