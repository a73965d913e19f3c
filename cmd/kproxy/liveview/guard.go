package liveview

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// tokenHeader carries the per-process token the page was served with.
const tokenHeader = "X-Kproxy-Token"

// maxBody bounds a POST body.
const maxBody = 64 << 10

// guard holds the checks every request passes. Host: a name other than
// localhost or the configured host is refused, as a DNS rebinding page
// would send (an IP literal cannot be rebound). Origin: a browser request
// from another origin is refused, GETs included (the stream, the state).
// POSTs, which drive faults, also need fault injection on, a loopback
// peer, a JSON body (a form or text/plain POST, which needs no CORS
// preflight, is refused) and the token only a loopback page load gets.
type guard struct {
	port       string // "" for any
	configured string // the configured host, lower case
	token      string
}

// hostOK says whether a Host header (or an Origin's host) names this
// server.
func (g *guard) hostOK(hostport string) bool {
	host, port, err := net.SplitHostPort(strings.ToLower(hostport))
	if err != nil || g.port != "" && port != g.port {
		return false
	}
	return host == "localhost" || host == g.configured || net.ParseIP(strings.Trim(host, "[]")) != nil
}

func (g *guard) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !g.hostOK(r.Host) {
			httpError(w, http.StatusForbidden, fmt.Errorf("host %q is not this live view (DNS rebinding?)", r.Host))
			return
		}
		if origin := r.Header.Get("Origin"); origin != "" {
			u, err := url.Parse(origin)
			if err != nil || u.Scheme != "http" || !strings.EqualFold(u.Host, r.Host) {
				httpError(w, http.StatusForbidden, fmt.Errorf("origin %q may not use the live view", origin))
				return
			}
		}
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		// Nothing but this server; never in a frame (a foreign page could
		// otherwise trick a click on a crash button).
		w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
		w.Header().Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// loopbackPeer says whether the request came from this host.
func loopbackPeer(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}

// checkFaultRequest answers and returns false unless r may drive faults.
func (g *guard) checkFaultRequest(w http.ResponseWriter, r *http.Request, faultsOn bool) bool {
	switch {
	case !faultsOn:
		httpError(w, http.StatusForbidden, errors.New("fault injection is off (kproxy run --enable-fault-injection)"))
	case !loopbackPeer(r):
		httpError(w, http.StatusForbidden, errors.New("faults are driven from this host only"))
	case subtle.ConstantTimeCompare([]byte(r.Header.Get(tokenHeader)), []byte(g.token)) != 1:
		httpError(w, http.StatusUnauthorized, errors.New("missing or wrong "+tokenHeader+" (the page served by this process carries it)"))
	default:
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			httpError(w, http.StatusUnsupportedMediaType, errors.New("POST bodies must be application/json"))
			return false
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		return true
	}
	return false
}
