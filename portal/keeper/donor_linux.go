//go:build linux

package keeper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/rs/zerolog"
)

// A serving kproxy shares its listening sockets with its successor (a
// rollout starts the next pod's process beside it): the successor takes
// the very same sockets, so both serve one accept queue and one datagram
// queue, and when the old process closes its descriptors nothing queued
// on them is lost, TCP or UDP (HAProxy's seamless reload and Envoy's hot
// restart pass their listeners the same way). The old process serves
// "list" on a socket beside its serving mark; its successor reaches it
// with DialDonor.

// Each calls send with every socket to share (the descriptor valid for
// the call).
type Each func(send func(network, address string, fd uintptr) error) error

// ServeSockets answers "list" on path with each's sockets until ctx ends.
func ServeSockets(ctx context.Context, path string, each Each, log zerolog.Logger) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("share sockets: %w", err)
	}
	old := syscall.Umask(0o077)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	syscall.Umask(old)
	if err != nil {
		return fmt.Errorf("share sockets: %w", err)
	}
	go func() {
		<-ctx.Done()
		ln.Close()
		os.Remove(path)
	}()
	go func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, maxMessage)
				n, _, _, _, err := c.ReadMsgUnix(buf, nil)
				if err != nil || string(buf[:n]) != verbList {
					return
				}
				err = each(func(network, address string, fd uintptr) error {
					_, _, err := c.WriteMsgUnix([]byte(verbKept+" "+Key(network, address)), syscall.UnixRights(int(fd)), nil)
					return err
				})
				if err == nil {
					_, _, err = c.WriteMsgUnix([]byte(verbEnd), nil, nil)
				}
				if err != nil {
					log.Warn().Err(err).Msg("cannot share the listening sockets with the successor")
					return
				}
				log.Info().Msg("listening sockets shared with the successor")
			}()
		}
	}()
	return nil
}

// DialDonor takes the sockets a serving predecessor shares at path: the
// Client's Take returns them; Keep and Drop do nothing (it is not a
// keeper), and DropRest closes those not taken.
func DialDonor(path string, log zerolog.Logger) (*Client, error) {
	k, err := Dial(path, log)
	if err != nil {
		return nil, err
	}
	k.donor = true
	k.Close() // one list is all a donor answers
	return k, nil
}
