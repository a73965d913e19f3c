package harness

import (
	"context"
	"fmt"
	"os"
	"strconv"

	"sigs.k8s.io/knftables"
)

// The kernel's own forwarding is the limit a proxy is measured against:
// nftables DNAT from each service address to its endpoints, round-robin
// per connection or flow as kube-proxy's nftables mode balances, and no
// process in between (only machine-wide CPU measures it).

// kernelTable is the harness's nftables table, one per plan slot.
func kernelTable() string { return "kproxy-bench-" + strconv.Itoa(netOffset/netsPerPlan) }

// kernelPort is a service port the kernel peer forwards to the backends.
type kernelPort struct {
	proto            string
	service, backend int
}

// kernelPorts are the kernel peer's ports for the load modes.
func kernelPorts(b *Backends, modes []string) []kernelPort {
	var out []kernelPort
	seen := map[int]bool{}
	for _, m := range modes {
		p := servicePort(m)
		if seen[p] {
			continue // keepalive and conn share the TCP port
		}
		seen[p] = true
		proto, backend := "tcp", b.TCPPort
		switch m {
		case ModeUDP:
			proto, backend = "udp", b.UDPPort
		case ModeBulk:
			backend = b.SinkPort
		case ModeClose:
			backend = b.HTTPPort
		}
		out = append(out, kernelPort{proto, p, backend})
	}
	return out
}

// programKernelDNAT replaces the table with DNAT rules for n service
// ports in the load modes: a map from service address, protocol and port
// to the service's chain, which picks an endpoint chain with numgen (as
// kube-proxy's nftables mode), which DNATs.
func programKernelDNAT(ctx context.Context, nft knftables.Interface, n int, b *Backends, modes []string) error {
	tx := nft.NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Delete(&knftables.Table{}) // a run that died left its rules
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("kproxy-bench: the kernel's forwarding, for comparison")})
	tx.Add(&knftables.Chain{Name: "output", Type: knftables.PtrTo(knftables.NATType),
		Hook: knftables.PtrTo(knftables.OutputHook), Priority: knftables.PtrTo(knftables.DNATPriority)})
	tx.Add(&knftables.Map{Name: "services", Type: "ipv4_addr . inet_proto . inet_service : verdict"})
	tx.Add(&knftables.Rule{Chain: "output", Rule: "ip daddr . meta l4proto . th dport vmap @services"})
	ports := kernelPorts(b, modes)
	for _, p := range ports {
		for k, ip := range b.IPs {
			ep := fmt.Sprintf("ep-%d-%s-%d", k, p.proto, p.backend)
			tx.Add(&knftables.Chain{Name: ep})
			tx.Add(&knftables.Rule{Chain: ep, Rule: fmt.Sprintf("meta l4proto %s dnat to %s:%d", p.proto, ip, p.backend)})
		}
	}
	for i := range n {
		for _, p := range ports {
			svc := fmt.Sprintf("%s-%s-%d", serviceName(i), p.proto, p.service)
			tx.Add(&knftables.Chain{Name: svc})
			// Service port i's endpoints, from backend i on, as the
			// proxies' round-robin starts.
			var vmap string
			for k := range b.IPs {
				if k > 0 {
					vmap += " , " // spaced, as knftables parses verdict maps
				}
				vmap += fmt.Sprintf("%d : goto ep-%d-%s-%d", k, (i+k)%len(b.IPs), p.proto, p.backend)
			}
			tx.Add(&knftables.Rule{Chain: svc, Rule: fmt.Sprintf("numgen inc mod %d vmap { %s }", len(b.IPs), vmap)})
			tx.Add(&knftables.Element{Map: "services", Key: []string{hostIP(kernelNet, i), p.proto, strconv.Itoa(p.service)},
				Value: []string{"goto " + svc}})
		}
	}
	return nft.Run(ctx, tx)
}

// startKernel programs the kernel peer's rules when o compares it and
// this process may (root), and returns what removes them; nil, nil when
// it does not run.
func startKernel(ctx context.Context, o *Options, b *Backends) (stop func(), err error) {
	if !o.compares(TargetKernel) || os.Geteuid() != 0 {
		return nil, nil
	}
	nft, err := knftables.New(knftables.IPv4Family, kernelTable())
	if err != nil {
		return nil, fmt.Errorf("kernel: %w", err)
	}
	if err := programKernelDNAT(ctx, nft, o.Ports, b, o.Modes); err != nil {
		return nil, fmt.Errorf("kernel: program DNAT rules: %w", err)
	}
	return func() { deleteKernelDNAT(context.Background(), nft) }, nil
}

// deleteKernelDNAT removes the table.
func deleteKernelDNAT(ctx context.Context, nft knftables.Interface) error {
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	return nft.Run(ctx, tx)
}
