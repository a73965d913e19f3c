# kproxy's Linux image: a static binary on a small Debian with the nft and
# iptables binaries the kernel portals run.
#   docker build --build-arg VERSION=$(git describe --always) -t registry.example/kproxy:dev .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/kproxy ./cmd/kproxy

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends nftables iptables \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/kproxy /kproxy
USER 0
ENTRYPOINT ["/kproxy"]
