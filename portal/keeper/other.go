//go:build !linux

package keeper

import (
	"context"
	"os"
	"time"

	"github.com/rs/zerolog"
)

// Options configure a Server.
type Options struct {
	Hold time.Duration
	Log  zerolog.Logger
}

// Server is the keeper (Linux only).
type Server struct{}

// Listen fails: descriptors pass between processes on Linux only here.
func Listen(string, Options) (*Server, error) { return nil, ErrUnsupported }

// Serve does nothing.
func (*Server) Serve(context.Context) error { return ErrUnsupported }

// Client is kproxy's side (Linux only).
type Client struct{}

// Dial fails.
func Dial(string, zerolog.Logger) (*Client, error) { return nil, ErrUnsupported }

func (*Client) OnReconnect(func())           {}
func (*Client) Take(string, string) *os.File { return nil }
func (*Client) Keep(string, string, uintptr) {}
func (*Client) Drop(string, string)          {}
func (*Client) DropRest()                    {}
func (*Client) Detach()                      {}
func (*Client) Close()                       {}

func (*Client) TakeConns(string, string) []Conn                { return nil }
func (*Client) KeepConn(string, string, string, ...int) string { return "" }
func (*Client) DropConn(string)                                {}
func (*Client) TakeFlows(string, string) []Flow                { return nil }
func (*Client) KeepFlow(string, string, string, []byte, int) string {
	return ""
}
func (*Client) KeepsConns() bool { return false }
func (*Client) Detached() bool   { return false }

// Waiting is none.
func (*Client) Waiting() int { return 0 }

// Each calls send with every socket to share.
type Each func(send func(network, address string, fd uintptr) error) error

// ServeSockets fails (Linux only).
func ServeSockets(context.Context, string, Each, zerolog.Logger) error { return ErrUnsupported }

// DialDonor fails (Linux only).
func DialDonor(string, zerolog.Logger) (*Client, error) { return nil, ErrUnsupported }
