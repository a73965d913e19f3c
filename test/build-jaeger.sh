#!/usr/bin/env bash
# Builds Jaeger (v2, the all-in-one `jaeger` binary: an OpenTelemetry Collector
# with Jaeger's in-memory storage and query API) from its Go module into a cache,
# only if that exact build is missing, and prints its path on stdout (progress
# goes to stderr). The tracing tests send OTLP to it and read traces back
# through its query API.
#
#   ${KPROXY_CACHE:-$HOME/.cache/kproxy}/jaeger-<version>
#
# Built inside the module's own directory in the module cache, with its own
# go.mod and go.sum: Jaeger's go.mod has a replace directive, so
# `go install ...@version` refuses it, and a wrapper module cannot import a
# main package. Without the `ui` build tag the UI is a placeholder page; the
# query API (/api/traces) is complete. A cold build takes ~10 minutes on 2 cores.
#
#   test/build-jaeger.sh          build if missing, print the path
#   test/build-jaeger.sh --path   only print the path (built or not)
set -euo pipefail

GO=${GO:-go}
version=v1.76.0 # Jaeger v2.13 (its Go module keeps v1 tags)
cache=${KPROXY_CACHE:-${HOME:-/root}/.cache/kproxy}
bin="$cache/jaeger-$version"
if [ "${1:-}" = --path ]; then
	echo "$bin"
	exit 0
fi

if [ ! -x "$bin" ]; then
	mkdir -p "$cache"
	exec 9>"$cache/.build-jaeger.lock"
	flock 9 # another build of the same cache: wait for it, then reuse its result
	if [ ! -x "$bin" ]; then
		echo "build-jaeger.sh: building $bin (cold: ~10 min on 2 cores)" >&2
		start=$(date +%s)
		dir=$(cd / && GOFLAGS=-mod=mod "$GO" mod download -json "github.com/jaegertracing/jaeger@$version" |
			sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[ -d "$dir" ] || { echo "build-jaeger.sh: download of jaeger $version failed" >&2; exit 1; }
		tmp=$(mktemp "$bin.tmp.XXXXXX")
		trap 'rm -f "$tmp"' EXIT
		(cd "$dir" && GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w" -o "$tmp" ./cmd/jaeger)
		chmod 0755 "$tmp"
		mv -f "$tmp" "$bin"
		trap - EXIT
		echo "build-jaeger.sh: built in $(($(date +%s) - start))s, $(du -m "$bin" | cut -f1) MB" >&2
	fi
	exec 9>&-
fi
echo "$bin"
