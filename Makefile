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
# The Perfetto protobuf code is generated with Debian 12's protoc (its
# version is written into the file) and protoc-gen-go at go.mod's version.
PROTOC_VERSION = 3.21.12
# go-nvml's nvml.h marks the NVML 13 deprecations: the cgo stubs of its
# bindings draw a page of -Wdeprecated-declarations warnings from the C
# compiler on every cold build, none of them about cudatap's code.
export CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
# What `cudatap version` says about the build (besides what Go records:
# commit, its time, a modified tree): the release, and the BPF objects (one
# id for the x86-64 and arm64 pair, built from the same sources).
BPF_OBJECT := $(shell cat tracer/probe/cudatap_x86_bpfel.o tracer/probe/cudatap_arm64_bpfel.o 2>/dev/null | sha256sum | cut -c1-16)
LDFLAGS ?= -X main.version=$(VERSION) -X main.bpfObject=$(BPF_OBJECT)

.PHONY: all build demo test fuzz check-pure test-deps test-short bench generate check-generate vet gpu-check clean man release release-deps release-check

all: build

build:
	CGO_ENABLED=1 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/cudatap

demo: build
	./$(BIN) demo

# Everything, including the root tests with real uprobes. The root tests
# mostly wait (on their workloads, and on the kernel to remove probes), so
# more run at once than there are cores: 4 packages, and within each up to
# 8 tests that call t.Parallel. The --all tests trace every CUDA process on
# the host, other packages' and other test runs' among them, and assert
# only on their own workloads'; tests that measure this process (its
# descriptors, heap, CPU time) or change it (environment, subreaper) are
# not parallel.
test: test-deps
	$(GO) vet ./...
	$(GO) test -count=1 -p 4 -parallel 8 ./...

# Recordings are untrusted input: fuzz every command that reads one with
# valid-looking recordings (export/fuzz_test.go) for a bounded time (CI
# runs it; make test replays the seeds and what earlier runs found, in
# export/testdata, as plain go test does).
FUZZTIME ?= 30s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzRecordings$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 5s ./export

# The pure stages build without cgo (no go-nvml, no cilium/ebpf): they
# test anywhere, and other tools can import them. The simulated CUDA
# libraries are what the tracer is tested against, so they are built from
# none of its packages, tests included: what both need (the CUPTI ABI
# header) lives below them, in internal/cuptiabi.
PURE = ./export/... ./symbolize/... ./tracer/event/... ./tracer/model/... ./tracer/recording/... ./tracer/replay/... ./tracer/gpusample/...
check-pure:
	CGO_ENABLED=0 $(GO) build $(PURE)
	@! $(GO) list -deps $(PURE) | grep -E 'cilium/ebpf|NVIDIA/go-nvml' || { echo "a pure package imports cilium/ebpf or go-nvml" >&2; exit 1; }
	@! $(GO) list -deps -test ./internal/sim/... | grep '^github.com/cudatap/cudatap/tracer/' || { echo "internal/sim depends on the tracer packages above: move what both need into a package under internal/" >&2; exit 1; }

# What the tests need beyond Go and a C compiler: Debian's Python packages
# for HolisticTraceAnalysis (testdata/hta), which checks that the traces
# read as Kineto traces, Debian's prometheus, which scrapes the agent in
# its test, and Debian's chromium, which opens the HTML report headless
# (cmd/cudatap/report_test.go). Installed when missing.
HTA_DEPS = python3-pandas python3-numpy python3-networkx python3-plotly python3-yaml python3-psutil python3-pydot
test-deps:
	$(call debian-install,command -v prometheus,prometheus)
	$(call debian-install,/usr/bin/python3 -c 'import pandas; import numpy; import networkx; import plotly; import yaml; import psutil; import pydot',$(HTA_DEPS))
	$(call debian-install,command -v chromium,chromium)

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
	$(call debian-install,test -f /usr/aarch64-linux-gnu/include/asm/ptrace.h,linux-libc-dev-arm64-cross)
	cd tracer/probe && BPF_CLANG=$(BPF_CLANG) BPF_STRIP=$(BPF_STRIP) $(GO) generate ./...
	cd tracer/gputime/collector && $(GO) generate .
	cd internal/inject && $(GO) generate .
	$(call debian-install,command -v protoc,protobuf-compiler)
	@protoc --version | grep -qx 'libprotoc $(PROTOC_VERSION)' || { echo "make generate needs protoc $(PROTOC_VERSION), Debian 12's protobuf-compiler: another version writes another header into export/perfetto/pb" >&2; exit 1; }
	cd export/perfetto/pb && $(GO) generate .

# CI: the committed BPF objects and collector library must be what the
# sources produce.
check-generate: generate
	git diff --exit-code -- tracer/ bpf/ internal/inject/ export/perfetto/pb/ || (echo "generated BPF objects, collector, injection stub or Perfetto protobuf code are stale: run make generate and commit" >&2; exit 1)

vet:
	$(GO) vet ./...

# On a GPU machine: compare cudatap's syncs with PyTorch's sync debug mode.
gpu-check: build
	./testdata/gpu/gpu-check.sh ./$(BIN)

clean:
	rm -rf bin

# Man pages, one per command (cudatap.1, cudatap-record.1, ...), made from
# the CLI's own help by `cudatap man` (cobra/doc) into $(DIST)/man: never
# committed, so never stale; dated by the commit, so the same tree makes the
# same pages. man -l $(DIST)/man/cudatap-record.1 reads one.
man: build
	rm -rf $(DIST)/man
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || date +%s) ./$(BIN) man $(DIST)/man

# Release: cudatap for linux/amd64 and linux/arm64, each starting on glibc
# 2.17 and later (packaging/build.sh says how), a wheel of each that puts
# cudatap on PATH (pip install), the man pages, and SHA256SUMS, into $(DIST).
DIST ?= dist
RELEASE_ARCHES = amd64 arm64
release: release-deps man
	mkdir -p $(DIST)
	rm -f $(DIST)/cudatap-linux-* $(DIST)/cudatap-*.whl $(DIST)/SHA256SUMS
	for arch in $(RELEASE_ARCHES); do \
		VERSION=$(VERSION) BPF_OBJECT=$(BPF_OBJECT) GO=$(GO) packaging/build.sh $$arch $(DIST)/cudatap-linux-$$arch || exit 1; \
		$(GO) run ./packaging/wheel -binary $(DIST)/cudatap-linux-$$arch -arch $$arch -version $(VERSION) -license LICENSE -o $(DIST) || exit 1; \
	done
	cd $(DIST) && sha256sum cudatap-linux-* cudatap-*.whl man/*.1 >SHA256SUMS
	@ls -l $(DIST)

# CI: the release as a user meets it (packaging/check-release.sh): glibc
# 2.17, arm64 under qemu-user, the wheels installed with pip, the image.
release-check: release
	GO=$(GO) packaging/check-release.sh $(DIST) $(VERSION)

# What the release and its check need beyond Go and gcc, installed when
# missing: Debian's arm64 cross compiler, qemu-user to run what it builds,
# file, and python3-venv for the wheel's venv.
release-deps:
	$(call debian-install,command -v aarch64-linux-gnu-gcc,gcc-aarch64-linux-gnu)
	$(call debian-install,command -v qemu-aarch64,qemu-user)
	$(call debian-install,command -v file,file)
	$(call debian-install,python3 -c 'import ensurepip',python3-venv)

# $(call debian-install,TEST,PACKAGE): installs Debian's PACKAGE unless the
# shell command TEST succeeds.
debian-install = @$(1) >/dev/null 2>&1 || { \
	command -v apt-get >/dev/null || { echo "make $@ needs Debian's $(2) (package names), or their equivalents" >&2; exit 1; }; \
	echo "installing $(2)"; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null 2>&1 || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null; }; }
