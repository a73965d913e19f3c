package remote

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/automanaged"
	"github.com/labstack/echo/v4"
)

// Automanaged is protoactor's automanaged provider over a fixed list of
// replicas' health addresses (host:port), each polled every refresh; a
// replica that does not answer leaves the cluster. Its own health endpoint
// listens on listen, not on every interface as upstream's would.
func Automanaged(listen string, peers []string, refresh time.Duration) (cluster.ClusterProvider, error) {
	if len(peers) == 0 {
		return nil, errors.New("automanaged core replicas: no peers")
	}
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("core replica health endpoint: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	e := echo.New()
	e.HideBanner, e.HidePort, e.Listener = true, true, l
	p := &automanagedProvider{AutoManagedProvider: automanaged.NewWithTesting(refresh, port, e, peers...)}
	e.GET("/_health", func(ctx echo.Context) error {
		c := p.cluster.Load()
		if c == nil {
			return ctx.NoContent(http.StatusServiceUnavailable)
		}
		host, memberPort, err := c.ActorSystem.GetHostPort()
		if err != nil {
			return ctx.NoContent(http.StatusServiceUnavailable)
		}
		return ctx.JSON(http.StatusOK, automanaged.NewNode(c.Config.Name, c.ActorSystem.ID, host, memberPort, port, c.GetClusterKinds()))
	})
	return p, nil
}

// automanagedProvider answers health checks with the member it starts.
type automanagedProvider struct {
	*automanaged.AutoManagedProvider
	cluster atomic.Pointer[cluster.Cluster]
}

func (p *automanagedProvider) StartMember(c *cluster.Cluster) error {
	p.cluster.Store(c)
	return p.AutoManagedProvider.StartMember(c)
}
