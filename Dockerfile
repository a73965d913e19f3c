# kproxy's image (no container engine runs on the dev machines: this file is
# reviewed, not built, by the tests; `make image` builds the Linux image
# without a daemon, as an OCI archive, and its test runs it: see
# docs/operating.md, "Building the image without a container daemon"):
#   docker build --build-arg VERSION=$(git describe --always --dirty) -t kproxy:latest .
# and for deploy/daemonset-windows.yaml, a HostProcess image:
#   docker buildx build --platform windows/amd64 --target windows -t kproxy:latest-windows .

# The tests run on Debian bookworm: the image uses its Go toolchain image and
# the nft and iptables versions the kernel-portal tests are run with.
ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
ARG TARGETOS=linux
ARG TARGETARCH=amd64
ARG VERSION=dev
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static (no cgo): the binary needs nothing from the base but nft and iptables.
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=$VERSION" -o /out/ ./cmd/kproxy

# Windows HostProcess containers run on the host: the image only carries
# kproxy.exe (netsh and powershell are the host's).
FROM mcr.microsoft.com/oss/kubernetes/windows-host-process-containers-base-image:v1.0.0 AS windows
COPY --from=build /out/kproxy.exe /kproxy.exe

# The default target. kproxy execs nft (knftables) and iptables-restore, so
# the base needs them: distroless or scratch would not do. Debian's iptables
# is the nf_tables variant; on hosts still on legacy iptables, run
# update-alternatives --set iptables /usr/sbin/iptables-legacy (and ip6tables)
# in a derived image, or use --portal nftables (the ConfigMap's mode).
FROM debian:bookworm-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nftables iptables \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/kproxy /usr/local/bin/kproxy
ENTRYPOINT ["/usr/local/bin/kproxy"]
