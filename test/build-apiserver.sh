#!/usr/bin/env bash
# Builds test/cmd/kube-apiserver-etcd (kube-apiserver + embedded etcd, for
# watcher/kubetest) into ${KPROXY_CACHE:-$HOME/.cache/kproxy} if that exact
# build is missing, and prints its path (build-k8s-cmd.sh says how).
#
#   test/build-apiserver.sh          build if missing, print the path
#   test/build-apiserver.sh --path   only print the path (built or not)
exec "$(dirname "${BASH_SOURCE[0]}")/build-k8s-cmd.sh" kube-apiserver-etcd "$@"
