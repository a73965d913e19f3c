package datapath

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pires/go-proxyproto"
)

// TestProxyHeaderParses: the header of each version and family is what
// go-proxyproto's parser reads back, with the client's address and the
// service address; v1 is the text the spec gives; an IPv4 client of a
// dual-stack socket (IPv4-mapped) is carried as IPv4.
func TestProxyHeaderParses(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		version              int
		client, dst          *net.TCPAddr
		wantSrc, wantDst, v1 string
		wantProto            proxyproto.AddressFamilyAndProtocol
	}{
		{"v1 IPv4", 1, tcpAddr("192.0.2.1", 40000), tcpAddr("198.18.0.10", 80), "192.0.2.1:40000", "198.18.0.10:80",
			"PROXY TCP4 192.0.2.1 198.18.0.10 40000 80\r\n", proxyproto.TCPv4},
		{"v1 IPv6", 1, tcpAddr("2001:db8::1", 40000), tcpAddr("2001:db8:5::10", 443), "[2001:db8::1]:40000", "[2001:db8:5::10]:443",
			"PROXY TCP6 2001:db8::1 2001:db8:5::10 40000 443\r\n", proxyproto.TCPv6},
		{"v1 IPv4-mapped", 1, tcpAddr("::ffff:192.0.2.1", 40000), tcpAddr("::ffff:198.18.0.10", 80), "192.0.2.1:40000", "198.18.0.10:80",
			"PROXY TCP4 192.0.2.1 198.18.0.10 40000 80\r\n", proxyproto.TCPv4},
		{"v2 IPv4", 2, tcpAddr("192.0.2.1", 40000), tcpAddr("198.18.0.10", 80), "192.0.2.1:40000", "198.18.0.10:80", "", proxyproto.TCPv4},
		{"v2 IPv6", 2, tcpAddr("2001:db8::1", 40000), tcpAddr("2001:db8:5::10", 443), "[2001:db8::1]:40000", "[2001:db8:5::10]:443", "", proxyproto.TCPv6},
		{"v2 IPv4-mapped", 2, tcpAddr("::ffff:192.0.2.1", 40000), tcpAddr("::ffff:198.18.0.10", 80), "192.0.2.1:40000", "198.18.0.10:80", "", proxyproto.TCPv4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ProxyHeader(tc.version, tc.client, tc.dst)
			if err != nil {
				t.Fatal(err)
			}
			if tc.v1 != "" && string(b) != tc.v1 {
				t.Errorf("v1 header %q, want %q", b, tc.v1)
			}
			if tc.version == 2 && !bytes.HasPrefix(b, []byte("\r\n\r\n\x00\r\nQUIT\n")) {
				t.Errorf("v2 header % x lacks the v2 signature", b)
			}
			h, err := proxyproto.Read(bufio.NewReader(bytes.NewReader(append(b, "data"...))))
			if err != nil {
				t.Fatalf("go-proxyproto cannot read % x: %v", b, err)
			}
			if int(h.Version) != tc.version || h.Command != proxyproto.PROXY || h.TransportProtocol != tc.wantProto {
				t.Errorf("read version %d command %v protocol %v, want %d PROXY %v", h.Version, h.Command, h.TransportProtocol, tc.version, tc.wantProto)
			}
			if h.SourceAddr.String() != tc.wantSrc || h.DestinationAddr.String() != tc.wantDst {
				t.Errorf("read %s -> %s, want %s -> %s", h.SourceAddr, h.DestinationAddr, tc.wantSrc, tc.wantDst)
			}
		})
	}
}

// TestProxyHeaderBeforeClientBytes: on a listener served without kernel
// rules (the bind portal), the endpoint reads the header, naming the
// client and the listener's address, before the client's first byte; with
// ProxyProtocol 0 it reads the client's bytes alone.
func TestProxyHeaderBeforeClientBytes(t *testing.T) {
	for _, version := range []int{0, 1, 2} {
		endpoint, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer endpoint.Close()
		got := make(chan []byte, 1)
		go func() {
			c, err := endpoint.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			b, _ := io.ReadAll(c)
			got <- b
		}()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		p := &TCPProxy{Picker: PickerFunc(func(string, []string, bool) (string, error) { return endpoint.Addr().String(), nil }),
			ProxyProtocol: version}
		go p.Serve(ln.(*net.TCPListener), nil)
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("hello"))
		c.(*net.TCPConn).CloseWrite()
		var b []byte
		select {
		case b = <-got:
		case <-time.After(5 * time.Second):
			t.Fatalf("v%d: endpoint read nothing in 5 s", version)
		}
		c.Close()
		if version == 0 {
			if string(b) != "hello" {
				t.Errorf("no PROXY protocol: endpoint read %q, want the client's bytes alone", b)
			}
			continue
		}
		r := bufio.NewReader(bytes.NewReader(b))
		h, err := proxyproto.Read(r)
		if err != nil {
			t.Fatalf("v%d: endpoint read %q, no PROXY header: %v", version, b, err)
		}
		rest, _ := io.ReadAll(r)
		if int(h.Version) != version || h.SourceAddr.String() != c.LocalAddr().String() || h.DestinationAddr.String() != ln.Addr().String() || string(rest) != "hello" {
			t.Errorf("v%d: endpoint read header v%d %s -> %s then %q, want v%d %s -> %s then \"hello\"",
				version, h.Version, h.SourceAddr, h.DestinationAddr, rest, version, c.LocalAddr(), ln.Addr())
		}
		if n := ProxyHeadersSent(version); n < 1 {
			t.Errorf("ProxyHeadersSent(%d) = %d after a connection with the header", version, n)
		}
	}
}

func tcpAddr(ip string, port int) *net.TCPAddr {
	return &net.TCPAddr{IP: net.ParseIP(strings.TrimSpace(ip)), Port: port}
}
