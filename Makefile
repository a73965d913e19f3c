# kproxy: `make run` for the demo, `make test` for every test (with -race).
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
PROTOC_GEN_GO_VERSION := v1.36.12
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build run test test-deps bench bench-deps fuzz generate tools vet clean image e2e e2e-smoke

all: build

# kproxy, the node agent; kproxy-bench, the benchmark harness (its own
# binary, so kproxy links none of it; it runs the kproxy beside it).
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/kproxy ./cmd/kproxy
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/kproxy-bench ./cmd/kproxy-bench
	$(GO) build -o $(BIN)/demo-backends ./examples/demo-backends

# kproxy's Linux image without a container daemon: an OCI archive
# (skopeo's oci-archive:bin/kproxy-image.oci.tar:$(VERSION)) on an empty
# base, holding a static kproxy and this machine's Debian nft and
# iptables-nft with the libraries they load (cmd/kproxy-image/stage-tools.sh;
# as root it apt-gets nftables and iptables where missing).
image:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(BIN)/image/kproxy ./cmd/kproxy
	cmd/kproxy-image/stage-tools.sh $(BIN)/image/tools
	$(GO) run ./cmd/kproxy-image -tools $(BIN)/image/tools -kproxy $(BIN)/image/kproxy -version $(VERSION) -out $(BIN)/kproxy-image.oci.tar

# The demo: three HTTP and two UDP backends on loopback, and kproxy serving
# examples/services.yaml. Then: curl 127.0.0.10:8080 (see README).
run: build
	@$(BIN)/demo-backends & trap "kill $$! 2>/dev/null" EXIT; \
	$(BIN)/kproxy run --source file:examples/services.yaml --portal bind --bind-address 127.0.0.1 $(ARGS)

test: vet test-deps apiserver control-plane kwok jaeger
	$(GO) test -race -count=1 -timeout 20m ./...
	# Several remotings in one process (replicas, a core and its backend): each sets gRPC's global logger
	# as it starts, which -race reports, so these run without it.
	$(GO) test -count=1 -timeout 5m -run 'TestCoreReplica|TestBackendTakesCoresHeartbeat' ./actors/remote

# Each fuzz target for FUZZTIME (CI runs it after the tests). Minimizing
# a new input is capped, or one slow minimization eats the whole budget.
# A count, not a duration: Go 1.26's fuzz coordinator can report its own
# -fuzztime deadline as a failure ("context deadline exceeded", no
# crasher; golang/go#75804, fixed in Go 1.27), which a count never sets.
FUZZTIME ?= 15000x
FUZZ_TARGETS = FuzzManifests:./watcher/filesource FuzzSimpleYAML:./watcher/filesource FuzzDocumentReader:./watcher/filesource FuzzAdminRequests:./cmd/kproxy FuzzConfig:./cmd/kproxy
fuzz:
	@for t in $(FUZZ_TARGETS); do \
		name=$${t%%:*}; pkg=$${t#*:}; \
		echo "fuzz $$name ($$pkg) for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 100x $$pkg || exit 1; \
	done

# kube-apiserver + embedded etcd for test/kubetest, built only if missing into
# $KPROXY_CACHE (default ~/.cache/kproxy; ~12 min cold); prints its path.
.PHONY: apiserver
apiserver:
	@GO="$(GO)" test/build-apiserver.sh
test: export KPROXY_APISERVER = $(shell test/build-apiserver.sh --path)

# kube-scheduler and kube-controller-manager (one binary, the API server's
# k8s.io/kubernetes) and kwok, for the DaemonSet rollout test in deploy/,
# built only if missing into $KPROXY_CACHE; each prints its path. The
# control plane reuses most of the API server's compile (after it, ~2 min
# on 2 cores); kwok is its own module (~3 min cold).
.PHONY: control-plane kwok
control-plane: apiserver
	@GO="$(GO)" test/build-control-plane.sh
test: export KPROXY_CONTROL_PLANE = $(shell test/build-control-plane.sh --path)
kwok:
	@GO="$(GO)" test/build-kwok.sh
test: export KPROXY_KWOK = $(shell test/build-kwok.sh --path)

# A Kubernetes cluster from parts (test/cluster/cluster.sh, as root): the
# API server and control plane above, nodes in network namespaces with
# Debian's containerd and upstream's kubelet (test/k8s/node), kproxy installed
# from deploy/ with make image's image. make e2e-smoke serves real pods
# through it from a node, another host and a pod (about 30 s warm);
# make e2e-conformance rolls kproxy's DaemonSet under load (restart, undo,
# a ConfigMap change, a kill on each node: nothing may be lost) and runs the [Conformance] specs
# of Kubernetes' network e2e tests against it (what CI runs); make e2e runs,
# on a dual-stack cluster, the rollout check (kills included), the whole
# suite and its [Feature:IPv6DualStack] specs against kproxy,
# the suite under a crash storm, the rollout check, the suite, its
# dual-stack specs and the swap from kube-proxy to kproxy and back against
# kube-proxy (reports in bin/),
# and fails where kproxy loses a request or a stream in the rollout
# check, fails what kube-proxy passes, documented differences aside, or
# fails under the storm what it passes without (docs/conformance.md,
# docs/operating.md). Torn down at the end, also when interrupted.
.PHONY: e2e e2e-smoke e2e-conformance
e2e: apiserver control-plane
	KPROXY_CLUSTER_IPFAMILY=dual test/cluster/cluster.sh all
e2e-smoke: apiserver control-plane
	@trap 'test/cluster/cluster.sh down' EXIT; \
	test/cluster/cluster.sh up && test/cluster/cluster.sh smoke
e2e-conformance: apiserver control-plane
	test/cluster/cluster.sh conformance

# Jaeger (v2, in-memory) for the tracing test, built only if missing into
# $KPROXY_CACHE (~10 min cold); prints its path.
.PHONY: jaeger
jaeger:
	@GO="$(GO)" test/build-jaeger.sh
test: export KPROXY_JAEGER = $(shell test/build-jaeger.sh --path)

# Kernel-portal tests need nft, iptables and ip, the kpng-json test jq, the browser tests
# (test/browsertest) chromium, the image test (cmd/kproxy-image) skopeo and umoci; install them where missing (as root, from Debian's
# packages) so they run rather than skip.
test-deps:
	@missing=""; \
	command -v nft >/dev/null || missing="$$missing nftables"; \
	command -v iptables-restore >/dev/null || missing="$$missing iptables"; \
	command -v ip >/dev/null || missing="$$missing iproute2"; \
	command -v jq >/dev/null || missing="$$missing jq"; \
	command -v chromium >/dev/null || [ -x /usr/bin/chromium ] || missing="$$missing chromium"; \
	command -v skopeo >/dev/null || missing="$$missing skopeo"; \
	command -v umoci >/dev/null || missing="$$missing umoci"; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
		else echo "not root: kernel-portal and browser tests will be skipped (missing:$$missing)"; fi; \
	fi

vet:
	$(GO) vet ./...
	GOOS=windows $(GO) build ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi

# `make bench`: a short run of every kproxy-bench scenario (startup,
# ports, churn, chaos; client-address as root) on bin/kproxy against direct
# connections and HAProxy in the same run, one table (JSON and HTML reports in bin/); then the
# go-test benchmarks of one service port. BENCH_ARGS adds flags, e.g.
# BENCH_ARGS="--ports 1000 --duration 5s", or an earlier build to compare
# with: BENCH_ARGS="--baseline-kproxy /tmp/kproxy-main".
BENCH_ARGS ?=
bench: build bench-deps
	$(BIN)/kproxy-bench all --short --compare direct,kernel,haproxy,haproxy-tuned,nginx,relay --json $(BIN)/bench.json --html $(BIN)/bench.html $(BENCH_ARGS)
	$(GO) test -run '^$$' -bench 'TCP' -benchtime 10x -count 1 ./bench/
	$(GO) test -run '^$$' -bench PortalRestart -benchtime 100x -count 1 ./bench/
	$(GO) test -run '^$$' -bench TracingConnectionRate -benchtime 10x -count 1 ./bench/

# The peers from Debian's packages where missing (as root): HAProxy, and
# nginx with its stream module; otherwise their comparisons are skipped,
# and kproxy-bench says so. The packages' services are kept from starting
# (policy-rc.d): nginx's default site would listen on every address.
bench-deps:
	@missing=""; command -v haproxy >/dev/null || missing="haproxy"; \
	{ command -v nginx >/dev/null && [ -e /usr/lib/nginx/modules/ngx_stream_module.so ]; } || missing="$$missing nginx-light libnginx-mod-stream"; \
	[ -n "$$missing" ] || exit 0; \
	if [ "$$(id -u)" != 0 ]; then echo "not root: $$missing not installed, those comparisons are skipped"; exit 0; fi; \
	pol=/usr/sbin/policy-rc.d; made=""; \
	[ -e $$pol ] || { printf '#!/bin/sh\nexit 101\n' >$$pol && chmod +x $$pol && made=1; }; \
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; rc=$$?; \
	[ -z "$$made" ] || rm -f $$pol; exit $$rc

# protoc from Debian's protobuf-compiler, protoc-gen-go from the Go module proxy.
tools:
	@command -v protoc >/dev/null || { \
		if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq protobuf-compiler; \
		else sudo apt-get update -qq && sudo apt-get install -y -qq protobuf-compiler; fi; }
	GOBIN=$(BIN) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

generate: tools
	PATH="$(BIN):$$PATH" protoc --go_out=. --go_opt=module=github.com/kproxy/kproxy messages/model.proto messages/protocol.proto messages/remote.proto

clean:
	rm -rf $(BIN)
