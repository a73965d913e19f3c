//go:build linux

package policyroute

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kproxy/kproxy/portal/steer"
)

var families = []struct {
	family int
	name   string
	all    *net.IPNet
}{
	{unix.AF_INET, "IPv4", &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}},
	{unix.AF_INET6, "IPv6", &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}},
}

func rule(family int) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = family
	r.Priority = steer.TransparentRulePriority
	r.Table = steer.TransparentTable
	r.Mark = steer.TransparentReplyMark
	mask := uint32(steer.TransparentReplyMark)
	r.Mask = &mask
	return r
}

// familyOff: the kernel has no such family here (IPv6 disabled).
func familyOff(err error) bool {
	return errors.Is(err, unix.EAFNOSUPPORT) || errors.Is(err, unix.EPROTONOSUPPORT)
}

// Ensure adds the rule and the table's local routes of both families,
// keeping those already there. A family the kernel lacks is skipped.
func Ensure() error {
	for _, f := range families {
		rules, err := ours(f.family)
		if familyOff(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("transparent proxying: list %s rules: %w", f.name, err)
		}
		if len(rules) == 0 {
			if err := netlink.RuleAdd(rule(f.family)); err != nil && !errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("transparent proxying: add %s rule fwmark 0x%x lookup %d: %w", f.name, steer.TransparentReplyMark, steer.TransparentTable, err)
			}
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return fmt.Errorf("transparent proxying: %w", err)
		}
		route := &netlink.Route{Family: f.family, Dst: f.all, Type: unix.RTN_LOCAL, Table: steer.TransparentTable,
			Scope: netlink.SCOPE_HOST, LinkIndex: lo.Attrs().Index}
		if err := netlink.RouteReplace(route); err != nil {
			return fmt.Errorf("transparent proxying: add %s route local %s dev lo table %d: %w", f.name, f.all, steer.TransparentTable, err)
		}
	}
	return nil
}

// Present reports whether the rules and routes of both families (of those
// the kernel has) are there.
func Present() (bool, error) {
	for _, f := range families {
		rules, err := ours(f.family)
		if familyOff(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("transparent proxying: list %s rules: %w", f.name, err)
		}
		routes, err := tableRoutes(f.family)
		if err != nil {
			return false, fmt.Errorf("transparent proxying: list %s routes of table %d: %w", f.name, steer.TransparentTable, err)
		}
		if len(rules) == 0 || len(routes) == 0 {
			return false, nil
		}
	}
	return true, nil
}

// Remove deletes the rules and every route of the table, of both
// families. Nothing there is no error.
func Remove() error {
	var errs []error
	for _, f := range families {
		rules, err := ours(f.family)
		if familyOff(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("transparent proxying: list %s rules: %w", f.name, err))
			continue
		}
		for i := range rules {
			if err := netlink.RuleDel(&rules[i]); err != nil && !errors.Is(err, unix.ENOENT) {
				errs = append(errs, fmt.Errorf("transparent proxying: delete %s rule %s: %w", f.name, rules[i], err))
			}
		}
		routes, err := tableRoutes(f.family)
		if err != nil {
			errs = append(errs, fmt.Errorf("transparent proxying: list %s routes of table %d: %w", f.name, steer.TransparentTable, err))
			continue
		}
		for i := range routes {
			if err := netlink.RouteDel(&routes[i]); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("transparent proxying: delete %s route %s: %w", f.name, routes[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// ours lists the family's rules that look up kproxy's table.
func ours(family int) ([]netlink.Rule, error) {
	return netlink.RuleListFiltered(family, &netlink.Rule{Table: steer.TransparentTable}, netlink.RT_FILTER_TABLE)
}

// tableRoutes lists every route of kproxy's table.
func tableRoutes(family int) ([]netlink.Route, error) {
	return netlink.RouteListFiltered(family, &netlink.Route{Table: steer.TransparentTable}, netlink.RT_FILTER_TABLE)
}
