package kubetest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	// EnvAPIServer names the kube-apiserver-etcd binary.
	EnvAPIServer = "KPROXY_APISERVER"
	// KproxyUser is the identity of KproxyKubeconfig, bound by deploy/rbac.yaml.
	KproxyUser = "system:serviceaccount:kube-system:kproxy"

	readyTimeout = 2 * time.Minute
	// Open watches (a running kproxy) hold a graceful shutdown up to its
	// 60 s limit; tests do not need one, so a stop waits briefly, then kills.
	stopTimeout = 3 * time.Second
)

// Server is a running (or stopped) kube-apiserver with its etcd.
type Server struct {
	// URL is https://127.0.0.1:<port>.
	URL string
	// AdminConfig authenticates in group system:masters (no rate limit).
	AdminConfig *rest.Config
	Admin       kubernetes.Interface
	// KproxyConfig and KproxyKubeconfig (a file with the CA and a static
	// token) authenticate as KproxyUser, with the groups a service account
	// has, so RBAC applies as it would to kproxy in a cluster.
	KproxyConfig     *rest.Config
	KproxyKubeconfig string
	// AdminKubeconfig is a kubeconfig file for the admin identity.
	AdminKubeconfig string
	// ServiceCIDR is the apiserver's --service-cluster-ip-range: a /16 in
	// 127.0.0.0/8 picked at random per Server (127.100.0.0/16 to
	// 127.254.0.0/16), so that apiservers of tests running in parallel
	// hand out different clusterIPs. On Linux all of 127.0.0.0/8 is local:
	// kproxy's bind portal can listen on any clusterIP without root or
	// extra addresses. The "kubernetes" Service in "default" takes its first
	// address (ServiceIP(1)), port 443, and has no endpoints.
	ServiceCIDR netip.Prefix
	// DataDir holds etcd's data, the serving certificate (certs/apiserver.crt,
	// which is also the CA to trust) and the service-account keys.
	DataDir string

	bin, logPath string
	args         []string
	adminToken   string

	mu      sync.Mutex
	running *process
}

type process struct {
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when the process has exited; err is set before
	err  error
}

// Start runs a new apiserver and waits until it is ready, with deploy/rbac.yaml
// applied. It is stopped and its files removed when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv(EnvAPIServer)
	if bin == "" {
		t.Fatalf("kubetest: $%s is not set: run `make test`, which builds it (or `make apiserver`; the path is printed by test/build-apiserver.sh)", EnvAPIServer)
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		t.Fatalf("kubetest: $%s=%s: not a file (%v): run `make test`, which builds it", EnvAPIServer, bin, err)
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	rbac, err := os.ReadFile(filepath.Join(root, "deploy", "rbac.yaml"))
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}

	dir := t.TempDir()
	s := &Server{
		bin:              bin,
		DataDir:          filepath.Join(dir, "data"),
		logPath:          filepath.Join(dir, "apiserver.log"),
		KproxyKubeconfig: filepath.Join(dir, "kproxy.kubeconfig"),
		AdminKubeconfig:  filepath.Join(dir, "admin.kubeconfig"),
		adminToken:       randomToken(t),
	}
	kproxyToken := randomToken(t)
	tokenFile := filepath.Join(dir, "tokens.csv")
	tokens := fmt.Sprintf("%s,kubetest-admin,kubetest-admin,\"system:masters\"\n", s.adminToken) +
		fmt.Sprintf("%s,%s,kubetest-kproxy,\"system:serviceaccounts,system:serviceaccounts:kube-system,system:authenticated\"\n", kproxyToken, KproxyUser)
	if err := os.WriteFile(tokenFile, []byte(tokens), 0o600); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	s.ServiceCIDR = pickServiceCIDR(t)
	ports := freePorts(t, 3)
	s.URL = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	s.args = []string{
		"--data-dir=" + s.DataDir,
		"--secure-port=" + strconv.Itoa(ports[0]),
		"--etcd-client-port=" + strconv.Itoa(ports[1]),
		"--etcd-peer-port=" + strconv.Itoa(ports[2]),
		"--token-auth-file=" + tokenFile,
		"--service-cluster-ip-range=" + s.ServiceCIDR.String(),
		// kube-apiserver's own flags: privileged and HostProcess pods
		// allowed, as in clusters kubeadm sets up (node agents need them).
		"--", "--allow-privileged=true",
	}
	t.Cleanup(func() {
		s.stop(t)
		if t.Failed() {
			s.logTail(t)
		}
	})

	began := time.Now()
	s.start(t)

	ca, err := os.ReadFile(filepath.Join(s.DataDir, "certs", "apiserver.crt"))
	if err != nil {
		t.Fatalf("kubetest: serving certificate: %v", err)
	}
	s.AdminConfig = s.config(ca, s.adminToken)
	s.KproxyConfig = s.config(ca, kproxyToken)
	s.KproxyConfig.QPS, s.KproxyConfig.Burst = 0, 0 // client-go defaults, as kproxy would have
	if s.Admin, err = kubernetes.NewForConfig(s.AdminConfig); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	if err := writeKubeconfig(s.KproxyKubeconfig, s.URL, ca, "kproxy", kproxyToken); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	if err := writeKubeconfig(s.AdminKubeconfig, s.URL, ca, "admin", s.adminToken); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := apply(ctx, s.Admin, rbac); err != nil {
		t.Fatalf("kubetest: applying deploy/rbac.yaml: %v", err)
	}
	if err := waitAuthorized(ctx, s.Admin); err != nil {
		t.Fatalf("kubetest: deploy/rbac.yaml applied but not in effect: %v", err)
	}
	t.Logf("kubetest: kube-apiserver %s ready in %v", s.URL, time.Since(began).Round(time.Millisecond))
	return s
}

// ServiceIP returns the n-th address of ServiceCIDR, a clusterIP that a
// Service may ask for (n from 2 to 65534; 1 is the "kubernetes" Service's).
func (s *Server) ServiceIP(n uint16) netip.Addr {
	b := s.ServiceCIDR.Addr().As4()
	b[2], b[3] = byte(n>>8), byte(n)
	return netip.AddrFrom4(b)
}

// PID is the running kube-apiserver-etcd process's id (0 when stopped):
// a benchmark reads its CPU time from /proc.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		return 0
	}
	return s.running.cmd.Process.Pid
}

// Stop stops the apiserver and etcd (SIGTERM, SIGKILL after 3 s). The data
// directory and ports are kept for Restart.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if !s.stop(t) {
		t.Fatalf("kubetest: Stop: not running")
	}
}

// Restart starts the apiserver again on the same ports and data, and waits
// until it is ready. Clients made before keep working (they reconnect).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	running := s.running != nil
	s.mu.Unlock()
	if running {
		s.stop(t)
	}
	began := time.Now()
	s.start(t)
	t.Logf("kubetest: kube-apiserver restarted, ready in %v", time.Since(began).Round(time.Millisecond))
}

func (s *Server) config(ca []byte, token string) *rest.Config {
	return &rest.Config{
		Host:            s.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		QPS:             -1, // no client-side rate limit
	}
}

// start runs the process and waits for /readyz; it fails the test (with the
// log's tail) if the process exits or is not ready in time.
func (s *Server) start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running != nil {
		t.Fatalf("kubetest: already running")
	}
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	fmt.Fprintf(log, "==== kubetest: starting %s at %s\n", filepath.Base(s.bin), time.Now().Format(time.RFC3339Nano))
	p := &process{log: log, done: make(chan struct{})}
	p.cmd = exec.Command(s.bin, s.args...)
	p.cmd.Stdout, p.cmd.Stderr = log, log
	p.cmd.Env = os.Environ()
	if err := startProcess(p); err != nil {
		log.Close()
		t.Fatalf("kubetest: starting %s: %v", s.bin, err)
	}
	s.running = p

	if err := s.waitReady(p); err != nil {
		s.stopLocked(t)
		// The Cleanup of Start prints the log's tail of a failed test.
		t.Fatalf("kubetest: kube-apiserver not ready: %v", err)
	}
}

// startProcess starts p.cmd and reaps it; on Linux the process is killed if
// the test binary dies without cleaning up (a -timeout panic, a signal).
func startProcess(p *process) error {
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child exits:
		// keep this goroutine on its thread for the child's lifetime.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		p.cmd.SysProcAttr = sysProcAttr()
		if err := p.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	return <-started
}

func (s *Server) waitReady(p *process) error {
	client := &http.Client{
		Timeout: 5 * time.Second,
		// The certificate is made by the apiserver as it starts; checking
		// it is the clients' job (they use certs/apiserver.crt as CA).
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
	}
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(readyTimeout)
	last := "no answer"
	for {
		req, _ := http.NewRequest(http.MethodGet, s.URL+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+s.adminToken)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("/readyz: %s: %s", resp.Status, failedChecks(body))
		} else {
			last = err.Error()
		}
		select {
		case <-p.done:
			return fmt.Errorf("process exited: %v", p.err)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v (last: %s)", readyTimeout, last)
		}
	}
}

// failedChecks keeps the "[-]..." lines of a /readyz answer.
func failedChecks(body []byte) string {
	var failed []string
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "[-]") {
			failed = append(failed, line)
		}
	}
	if len(failed) == 0 {
		return strings.TrimSpace(string(body))
	}
	return strings.Join(failed, "; ")
}

// stop stops the process if it runs and reports whether it did.
func (s *Server) stop(t testing.TB) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(t)
}

func (s *Server) stopLocked(t testing.TB) bool {
	p := s.running
	if p == nil {
		return false
	}
	s.running = nil
	defer p.log.Close()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		if p.err != nil {
			t.Logf("kubetest: kube-apiserver exited after SIGTERM: %v", p.err)
		}
	case <-time.After(stopTimeout):
		t.Logf("kubetest: kube-apiserver still running %v after SIGTERM: killing it", stopTimeout)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	return true
}

// logTail prints the last lines of the apiserver's output (used on failure).
func (s *Server) logTail(t testing.TB) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.logTailLocked(t)
}

func (s *Server) logTailLocked(t testing.TB) {
	const lines = 80
	f, err := os.Open(s.logPath)
	if err != nil {
		return
	}
	defer f.Close()
	var ring [lines]string
	n := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		ring[n%lines] = sc.Text()
		n++
	}
	var b strings.Builder
	for i := max(0, n-lines); i < n; i++ {
		b.WriteString(ring[i%lines])
		b.WriteByte('\n')
	}
	t.Logf("kubetest: last %d lines of %s:\n%s", min(n, lines), s.logPath, b.String())
}

// apply creates (or updates) every object of a multi-document manifest. It
// knows the kinds deploy/rbac.yaml uses.
func apply(ctx context.Context, c kubernetes.Interface, manifest []byte) error {
	decoder := serializer.NewCodecFactory(scheme.Scheme).UniversalDeserializer()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(manifest)))
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if len(bytes.TrimSpace(doc)) == 0 || isOnlyComments(doc) {
			continue
		}
		obj, gvk, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			return fmt.Errorf("document %d: %w", i, err)
		}
		switch o := obj.(type) {
		case *corev1.ServiceAccount:
			err = createOrUpdate(ctx, c.CoreV1().ServiceAccounts(o.Namespace), o)
		case *rbacv1.ClusterRole:
			err = createOrUpdate(ctx, c.RbacV1().ClusterRoles(), o)
		case *rbacv1.ClusterRoleBinding:
			err = createOrUpdate(ctx, c.RbacV1().ClusterRoleBindings(), o)
		case *rbacv1.Role:
			err = createOrUpdate(ctx, c.RbacV1().Roles(o.Namespace), o)
		case *rbacv1.RoleBinding:
			err = createOrUpdate(ctx, c.RbacV1().RoleBindings(o.Namespace), o)
		default:
			err = fmt.Errorf("kind %s not supported by kubetest", gvk.Kind)
		}
		if err != nil {
			return fmt.Errorf("document %d (%s): %w", i, gvk.Kind, err)
		}
	}
}

// waitAuthorized waits until the authorizer, which learns of new bindings
// through a watch, lets KproxyUser list EndpointSlices.
func waitAuthorized(ctx context.Context, c kubernetes.Interface) error {
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   KproxyUser,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: "list", Group: "discovery.k8s.io", Resource: "endpointslices",
		},
	}}
	for {
		r, err := c.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if r.Status.Allowed {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s may not list endpointslices: %s", KproxyUser, r.Status.Reason)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func isOnlyComments(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") && line != "---" {
			return false
		}
	}
	return true
}

type object interface {
	GetName() string
	GetResourceVersion() string
	SetResourceVersion(string)
}

type createUpdater[T object] interface {
	Create(context.Context, T, metav1.CreateOptions) (T, error)
	Update(context.Context, T, metav1.UpdateOptions) (T, error)
	Get(context.Context, string, metav1.GetOptions) (T, error)
}

func createOrUpdate[T object](ctx context.Context, c createUpdater[T], o T) error {
	_, err := c.Create(ctx, o, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		return err
	}
	cur, err := c.Get(ctx, o.GetName(), metav1.GetOptions{})
	if err != nil {
		return err
	}
	o.SetResourceVersion(cur.GetResourceVersion())
	_, err = c.Update(ctx, o, metav1.UpdateOptions{})
	return err
}

func writeKubeconfig(path, server string, ca []byte, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: user}
	cfg.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*cfg, path) // mode 0600
}

// repoRoot finds the kproxy module root from the working directory (a test
// runs in its package's directory), or else from this file's location.
func repoRoot() (string, error) {
	isRoot := func(dir string) bool {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		return err == nil && string(modulePath(b)) == "github.com/kproxy/kproxy"
	}
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for d := dir; ; d = filepath.Dir(d) {
			if isRoot(d) {
				return d, nil
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "", errors.New("cannot find the github.com/kproxy/kproxy module root (for deploy/rbac.yaml)")
}

func modulePath(gomod []byte) []byte {
	for _, line := range bytes.Split(gomod, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("module ")); ok {
			return bytes.Trim(bytes.TrimSpace(rest), `"`)
		}
	}
	return nil
}

var usedCIDRs = struct {
	sync.Mutex
	m map[byte]bool
}{m: map[byte]bool{}}

// pickServiceCIDR picks 127.X.0.0/16, X in [100, 254], not used by another
// Server of this process (parallel test processes: by chance).
func pickServiceCIDR(t testing.TB) netip.Prefix {
	usedCIDRs.Lock()
	defer usedCIDRs.Unlock()
	var b [1]byte
	for range 1000 {
		if _, err := rand.Read(b[:]); err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		x := 100 + b[0]%155
		if !usedCIDRs.m[x] {
			usedCIDRs.m[x] = true
			return netip.PrefixFrom(netip.AddrFrom4([4]byte{127, x, 0, 0}), 16)
		}
	}
	t.Fatalf("kubetest: no free service CIDR left")
	return netip.Prefix{}
}

func randomToken(t testing.TB) string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return hex.EncodeToString(b)
}

// freePorts returns n distinct free TCP ports on 127.0.0.1, below the
// kernel's ephemeral range when it starts above them: a port the kernel handed out (and
// that is closed again before the API server binds it) can go to any
// outgoing connection of the tests running beside this one meanwhile.
func freePorts(t testing.TB, n int) []int {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	// 20000-29999: clear of the tests' fixed ports (10249, 10256, 10260,
	// 18080...) and of node ports (30000-32767).
	const from, to = 20000, 30000
	for try := 0; len(ports) < n && try < 1000 && ephemeralLow() >= to; try++ {
		port := from + mathrand.IntN(to-from)
		if slices.Contains(ports, port) {
			continue
		}
		if l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			ls = append(ls, l)
			ports = append(ports, port)
		}
	}
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// ephemeralLow is the first port of net.ipv4.ip_local_port_range (0 if
// unknown).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0
	}
	low, _ := strconv.Atoi(f[0])
	return low
}
