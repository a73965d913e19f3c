package remote

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	protoremote "github.com/asynkron/protoactor-go/remote"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/kproxy/kproxy/actors/actorlog"
)

// Config configures protoactor remoting (gRPC underneath) for a
// core or a backend. Both sides listen: protoactor delivers a message by
// dialing the receiver's address, so the core dials its backends back.
type Config struct {
	// Listen is host:port to serve remoting on; a backend defaults to
	// 127.0.0.1:0 (loopback, any free port).
	Listen string
	// Advertise is the address peers dial to reach this one (default: the
	// address Listen bound).
	Advertise string
	// Token is the shared secret every remoting connection must present
	// (as "authorization: Bearer TOKEN"); empty accepts any peer.
	Token string
	// TLS, when set, encrypts remoting: ServerTLS for what this process
	// serves (with ClientCAs and RequireAndVerifyClientCert for client
	// certificates), ClientTLS for what it dials.
	ServerTLS, ClientTLS *tls.Config
	Log                  zerolog.Logger
}

// remoteSystem is an actor system of its own with remoting started.
type remoteSystem struct {
	system *actor.ActorSystem
	remote *protoremote.Remote
	// identities is set when peers must present client certificates: who
	// each peer's certificate names, by the remoting address it declares.
	identities *identities
	// cluster is set on a core replica (replicas.go).
	cluster *cluster.Cluster
}

// identities maps a peer's remoting address, as its connection declares it
// (protoactor's ConnectRequest, the first message of every stream), to the
// node its client certificate names: its Common Name, without a
// "system:node:" prefix (a kubelet's client certificate names its node so).
type identities struct {
	mu sync.Mutex
	m  map[string]string
}

func (i *identities) set(addr, id string) {
	i.mu.Lock()
	i.m[addr] = id
	i.mu.Unlock()
}

func (i *identities) get(addr string) (string, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	id, ok := i.m[addr]
	return id, ok
}

// certIdentity is the verified client certificate of a connection and the
// node it names.
func certIdentity(ctx context.Context) (*x509.Certificate, string) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, ""
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.PeerCertificates) == 0 {
		return nil, ""
	}
	cert := info.State.PeerCertificates[0]
	return cert, strings.TrimPrefix(cert.Subject.CommonName, "system:node:")
}

// certCovers reports whether cert is valid for addr's host (an IP or DNS
// SAN), as it must be anyway for the core to dial that address back.
func certCovers(cert *x509.Certificate, addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && cert.VerifyHostname(host) == nil
}

// identStream records the address a stream's ConnectRequest declares
// against the stream's client certificate.
type identStream struct {
	grpc.ServerStream
	ids   *identities
	cert  *x509.Certificate
	id    string
	first bool
}

// RecvMsg records the declared address, if the certificate is valid for
// it: a peer cannot claim another node's address.
func (s *identStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && !s.first {
		s.first = true
		if rm, ok := m.(*protoremote.RemoteMessage); ok {
			if addr := rm.GetConnectRequest().GetServerConnection().GetAddress(); addr != "" && s.cert != nil && certCovers(s.cert, addr) {
				s.ids.set(addr, s.id)
			}
		}
	}
	return err
}

// maxRemoteMessage bounds one remoting message (a Snapshot of every
// service port of a node; a batch of deltas): 64 MiB.
const maxRemoteMessage = 64 << 20

// errUnauthenticated is what a peer without the right token is told.
const unauthenticatedMessage = "kproxy remote: missing or wrong token (the core and its backends must share --remote-token-file)"

// startRemote builds an actor system and starts remoting on rc.Listen.
func startRemote(rc Config, component string) (*remoteSystem, error) {
	rs, cfg, err := prepareRemote(rc, component)
	if err != nil {
		return nil, err
	}
	rs.remote = protoremote.NewRemote(rs.system, cfg)
	if err := startRemoteServer(rs.remote.Start); err != nil {
		return nil, err
	}
	return rs, nil
}

// prepareRemote builds an actor system and the remoting configuration to
// start on it (by startRemote, or by protoactor's cluster as a member).
func prepareRemote(rc Config, component string) (*remoteSystem, *protoremote.Config, error) {
	if rc.Listen == "" {
		rc.Listen = "127.0.0.1:0"
	}
	host, portStr, err := net.SplitHostPort(rc.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("remote listen address %q: %w", rc.Listen, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, nil, fmt.Errorf("remote listen address %q: %w", rc.Listen, err)
	}
	// Bind here, so an address in use or not ours is an error rather
	// than protoactor's panic. Port 0 stays 0: protoactor binds a free
	// port and advertises the one it got (resolving it here and binding
	// it again raced with other processes doing the same).
	l, err := net.Listen("tcp", rc.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("remote listen: %w", err)
	}
	l.Close()
	log := rc.Log.With().Str("component", component).Logger()
	system := actor.NewActorSystem(actorlog.Option(log))
	shrinkRegistry(system)
	var ids *identities
	if rc.ServerTLS != nil && rc.ServerTLS.ClientAuth == tls.RequireAndVerifyClientCert {
		ids = &identities{m: map[string]string{}}
	}
	server := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxRemoteMessage),
		grpc.StreamInterceptor(streamAuth(rc.Token, ids, log)),
		grpc.UnaryInterceptor(unaryAuth(rc.Token, log)),
	}
	dial := []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxRemoteMessage), grpc.MaxCallSendMsgSize(maxRemoteMessage))}
	dial = append(dial, rc.dialOptions()...)
	if rc.ServerTLS != nil {
		server = append(server, grpc.Creds(loggedHandshakes{TransportCredentials: credentials.NewTLS(rc.ServerTLS), log: log}))
	}
	// protoactor's queues start at a million slots each (16 MB of pointers
	// the garbage collector scans on every cycle), one per peer: a core
	// with 1,000 backends held 15 GB of them. They grow when full; start
	// them small.
	opts := []protoremote.ConfigOption{protoremote.WithServerOptions(server...), protoremote.WithDialOptions(dial...),
		protoremote.WithEndpointWriterQueueSize(remoteQueueSize), protoremote.WithEndpointManagerQueueSize(remoteQueueSize)}
	if rc.Advertise != "" {
		opts = append(opts, protoremote.WithAdvertisedHost(rc.Advertise))
	}
	cfg := protoremote.Configure(host, port, opts...)
	// protoactor retries a failed connection 5 times 2 s apart inside its
	// endpoint writer before it gives up; once is enough here (the
	// subscriber re-subscribes on its own schedule), and a returning
	// core is reached within one retry.
	cfg.MaxRetryCount = 1
	return &remoteSystem{system: system, identities: ids}, cfg, nil
}

// remoteQueueSize is the first size of protoactor's remoting queues.
const remoteQueueSize = 1024

// startRemoteServer turns protoactor's panic on listen into an error.
func startRemoteServer(start func()) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("remote listen: %v", p)
		}
	}()
	start()
	return nil
}

func (rs *remoteSystem) address() string { return rs.system.Address() }

func (rs *remoteSystem) stop() {
	if rs.cluster != nil {
		rs.cluster.Shutdown(true) // leaves the cluster, then stops remoting and the system
		return
	}
	rs.remote.Shutdown(false)
	rs.system.Shutdown()
}

// dialOptions are the credentials this side presents when it dials a peer.
func (rc Config) dialOptions() []grpc.DialOption {
	var out []grpc.DialOption
	if rc.ClientTLS != nil {
		out = append(out, grpc.WithTransportCredentials(credentials.NewTLS(rc.ClientTLS)))
	} else {
		out = append(out, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if rc.Token != "" {
		out = append(out, grpc.WithPerRPCCredentials(bearer{token: rc.Token, secure: rc.ClientTLS != nil}))
	}
	return out
}

// bearer presents the shared token on every gRPC call.
type bearer struct {
	token  string
	secure bool
}

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}
func (b bearer) RequireTransportSecurity() bool { return b.secure }

// checkToken accepts a call that presents token (always, when token is empty).
func checkToken(ctx context.Context, token string) error {
	if token == "" {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if subtle.ConstantTimeCompare([]byte(v), []byte("Bearer "+token)) == 1 {
			return nil
		}
	}
	return status.Error(codes.Unauthenticated, unauthenticatedMessage)
}

func peerOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok {
		return p.Addr.String()
	}
	return "unknown"
}

// streamAuth refuses a remoting stream without the token, before protoactor
// reads a message from it.
func streamAuth(token string, ids *identities, log zerolog.Logger) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := checkToken(ss.Context(), token); err != nil {
			log.Error().Str("peer", peerOf(ss.Context())).Msg("remote peer refused: missing or wrong token")
			return err
		}
		if ids != nil {
			cert, id := certIdentity(ss.Context())
			ss = &identStream{ServerStream: ss, ids: ids, cert: cert, id: id}
		}
		return handler(srv, ss)
	}
}

// unaryAuth answers protoactor's unary calls itself: they are not
// implemented upstream (they panic, which would end the process), and
// the answer tells a peer whether its token is accepted
// (Unauthenticated, or Unimplemented once it is).
func unaryAuth(token string, log zerolog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, _ any, info *grpc.UnaryServerInfo, _ grpc.UnaryHandler) (any, error) {
		if err := checkToken(ctx, token); err != nil {
			log.Error().Str("peer", peerOf(ctx)).Msg("remote peer refused: missing or wrong token")
			return nil, err
		}
		return nil, status.Error(codes.Unimplemented, "kproxy remote: token accepted; "+info.FullMethod+" is not served")
	}
}

// ErrRefused is wrapped by the error a backend gets when a core refuses
// its credentials.
var ErrRefused = errors.New("core refused this backend")

// checkCore asks the core at addr whether it accepts rc's credentials: nil
// when it does, an error wrapping ErrRefused when it refuses them, another
// error when it cannot be reached.
func checkCore(ctx context.Context, addr string, rc Config) error {
	conn, err := grpc.NewClient(addr, rc.dialOptions()...)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = protoremote.NewRemotingClient(conn).ListProcesses(ctx, &protoremote.ListProcessesRequest{})
	switch status.Code(err) {
	case codes.Unimplemented, codes.OK:
		return nil
	case codes.Unauthenticated:
		return fmt.Errorf("%w at %s: %s", ErrRefused, addr, status.Convert(err).Message())
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.Unavailable && rc.ClientTLS != nil &&
		(strings.Contains(s.Message(), "handshake") || strings.Contains(s.Message(), "certificate") || strings.Contains(s.Message(), "tls:")) {
		// A TLS handshake failure (a certificate the core does not trust,
		// or the core's not trusted here) shows as Unavailable.
		return fmt.Errorf("%w at %s: TLS: %s", ErrRefused, addr, s.Message())
	}
	return fmt.Errorf("core %s unreachable: %w", addr, err)
}

// loggedHandshakes logs a peer's failed TLS handshake (a certificate not
// trusted), which gRPC would otherwise report nowhere.
type loggedHandshakes struct {
	credentials.TransportCredentials
	log zerolog.Logger
}

func (l loggedHandshakes) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := l.TransportCredentials.ServerHandshake(c)
	if err != nil {
		l.log.Error().Err(err).Str("peer", c.RemoteAddr().String()).Msg("remote peer refused: TLS handshake failed")
	}
	return conn, info, err
}

func (l loggedHandshakes) Clone() credentials.TransportCredentials {
	return loggedHandshakes{TransportCredentials: l.TransportCredentials.Clone(), log: l.log}
}
