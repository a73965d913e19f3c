#!/usr/bin/env bash
# Builds test/k8s/cmd/kube-apiserver-etcd (kube-apiserver + embedded etcd, for
# test/kubetest) into ${KPROXY_CACHE:-$HOME/.cache/kproxy} if that exact
# build is missing, and prints its path (build-k8s-cmd.sh says how).
#
#   test/build-apiserver.sh          build if missing, print the path
#   test/build-apiserver.sh --path   only print the path (built or not)
exec "$(dirname "${BASH_SOURCE[0]}")/k8s/build-k8s-cmd.sh" kube-apiserver-etcd "$@"
