#!/usr/bin/env bash
# Builds test/k8s/cmd/kube-control-plane (upstream's kube-scheduler and
# kube-controller-manager in one binary, for the DaemonSet rollout test in
# deploy/) into ${KPROXY_CACHE:-$HOME/.cache/kproxy} if that exact build is
# missing, and prints its path (build-k8s-cmd.sh says how).
#
#   test/build-control-plane.sh          build if missing, print the path
#   test/build-control-plane.sh --path   only print the path (built or not)
exec "$(dirname "${BASH_SOURCE[0]}")/k8s/build-k8s-cmd.sh" kube-control-plane "$@"
