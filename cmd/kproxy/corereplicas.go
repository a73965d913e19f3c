package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/cluster/clusterproviders/k8s"

	"github.com/kproxy/kproxy/actors/remote"
)

// replicaFlags make a core one replica of several on protoactor's cluster
// (--serve-cluster): each watches the source itself, and each node is
// served by the replica the cluster's placement names.
type replicaFlags struct {
	provider string
	name     string
	peers    string
	health   string
	refresh  time.Duration
}

func (f *replicaFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.provider, "serve-cluster", "", "with --serve: be one core replica of several on protoactor's cluster, found by this provider: kubernetes (the replicas' pods, by label; needs get/list/watch/patch on pods) or automanaged (--serve-cluster-peers); empty serves alone")
	fs.StringVar(&f.name, "serve-cluster-name", "kproxy-core", "with --serve-cluster: the cluster's name (replicas of one name form one cluster)")
	fs.StringVar(&f.peers, "serve-cluster-peers", "", "with --serve-cluster automanaged: every replica's --serve-cluster-health-address, comma-separated (this one's too)")
	fs.StringVar(&f.health, "serve-cluster-health-address", "127.0.0.1:6330", "with --serve-cluster automanaged: host:port of this replica's health endpoint, which the others poll (loopback unless --remote-allow-non-loopback)")
	fs.DurationVar(&f.refresh, "serve-cluster-refresh", 500*time.Millisecond, "with --serve-cluster automanaged: how often each replica polls the others; one that does not answer leaves the cluster")
}

// validate checks the flags together; remoting's checks apply to the
// health address as to --serve.
func (f *replicaFlags) validate(r *remoteFlags) error {
	switch f.provider {
	case "":
		if f.peers != "" {
			return errors.New("--serve-cluster-peers needs --serve-cluster automanaged")
		}
		return nil
	case "kubernetes":
		if f.peers != "" {
			return errors.New("--serve-cluster-peers is for --serve-cluster automanaged; kubernetes finds the replicas' pods")
		}
	case "automanaged":
		if len(splitList(f.peers)) == 0 {
			return errors.New("--serve-cluster automanaged needs --serve-cluster-peers")
		}
		if err := r.checkListen("--serve-cluster-health-address", f.health); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--serve-cluster %q: want kubernetes or automanaged", f.provider)
	}
	if f.name == "" {
		return errors.New("--serve-cluster-name is empty")
	}
	return nil
}

// replicas builds the cluster's provider (nil: serve alone).
func (f *replicaFlags) replicas() (*remote.Replicas, error) {
	switch f.provider {
	case "kubernetes":
		p, err := k8s.New() // in-cluster: the pod's service account and namespace
		if err != nil {
			return nil, fmt.Errorf("--serve-cluster kubernetes: %w", err)
		}
		return &remote.Replicas{Name: f.name, Provider: p}, nil
	case "automanaged":
		p, err := remote.Automanaged(f.health, splitList(f.peers), f.refresh)
		if err != nil {
			return nil, fmt.Errorf("--serve-cluster automanaged: %w", err)
		}
		return &remote.Replicas{Name: f.name, Provider: p}, nil
	}
	return nil, nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
