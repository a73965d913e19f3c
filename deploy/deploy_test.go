// Package deploy_test proves the manifests beside it: every document is
// accepted by a real kube-apiserver (with strict field validation, and the
// Pods the DaemonSets would create pass admission: priority class, service
// account), and the documents agree with one another (the service account
// is the one deploy/rbac.yaml binds, the ConfigMap holds the files the
// DaemonSets read, a kube-proxy KubeProxyConfiguration whose health port
// is the one probed), and that the DaemonSets place and roll out as they
// promise with the real kube-scheduler and DaemonSet controller on kwok's
// simulated nodes (rollout_linux_test.go). It lives here, a package of tests only, so that
// `go test ./...` (make test) runs it and a change to deploy/ finds it
// beside the YAML.
package deploy_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	kubeproxyv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/kproxy/kproxy/test/kubetest"
)

// document is one YAML document of a deploy/ file.
type document struct {
	where string // "file.yaml#2" (1-based)
	obj   *unstructured.Unstructured
}

// readManifests reads every document of every deploy/*.yaml, as
// `kubectl apply -f deploy/` would (comment-only documents skipped).
func readManifests(t *testing.T) []document {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var docs []document
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for n := 1; ; n++ {
			raw, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if onlyComments(raw) {
				continue
			}
			where := file + "#" + strconv.Itoa(n)
			// Strict: a duplicated key is an error, as kubectl makes it.
			js, err := yaml.YAMLToJSONStrict(raw)
			if err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			obj := &unstructured.Unstructured{}
			if err := obj.UnmarshalJSON(js); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			if obj.GetName() == "" {
				t.Fatalf("%s: %s without a name", where, obj.GetKind())
			}
			docs = append(docs, document{where: where, obj: obj})
		}
	}
	// Guards against a glob or split that silently finds nothing.
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet"} {
		if !slices.ContainsFunc(docs, func(d document) bool { return d.obj.GetKind() == kind }) {
			t.Fatalf("deploy/ has no %s (read %d documents from %v)", kind, len(docs), files)
		}
	}
	return docs
}

func onlyComments(doc []byte) bool {
	for _, line := range strings.Split(string(doc), "\n") {
		if line = strings.TrimSpace(line); line != "" && line != "---" && !strings.HasPrefix(line, "#") {
			return false
		}
	}
	return true
}

// TestManifestsAccepted applies every deploy/ document to a real
// kube-apiserver with server-side apply (strict: an unknown or misspelt
// field is a rejection, not silently dropped), then has the apiserver admit,
// in a dry run, the Pod each DaemonSet would create: only Pods go through
// the Priority and ServiceAccount admission plugins, which reject a
// priority class or service account that does not exist.
func TestManifestsAccepted(t *testing.T) {
	docs := readManifests(t)
	s := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	a := newApplier(t, s)
	dyn := a.dyn
	// A real apiserver makes kube-system itself; creating it only if
	// missing keeps the test independent of the harness.
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: metav1.NamespaceSystem}}
	if _, err := s.Admin.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	apply := func(obj *unstructured.Unstructured) error { return a.apply(ctx, obj) }
	admitPod := func(d document, mutate func(*unstructured.Unstructured)) error {
		pod, err := templatePod(d.obj)
		if err != nil {
			return err
		}
		if mutate != nil {
			mutate(pod)
		}
		body := pod.UnstructuredContent()
		_, err = dyn.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace(pod.GetNamespace()).Create(ctx,
			&unstructured.Unstructured{Object: body}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
		return err
	}

	var workloads []document
	for _, d := range docs {
		if err := apply(d.obj); err != nil {
			t.Errorf("%s (%s %s): rejected: %v", d.where, d.obj.GetKind(), d.obj.GetName(), err)
		}
		if _, found, _ := unstructured.NestedMap(d.obj.Object, "spec", "template", "spec"); found {
			workloads = append(workloads, d)
		}
	}
	if len(workloads) == 0 {
		t.Fatal("no document with a pod template")
	}
	for _, d := range workloads {
		if err := admitPod(d, nil); err != nil {
			t.Errorf("%s (%s %s): its Pod is not admitted: %v", d.where, d.obj.GetKind(), d.obj.GetName(), err)
		}
	}

	// The checks above can fail: the same documents, broken as a typo
	// would break them, are rejected.
	ds := workloads[0]
	for _, c := range []struct {
		name   string
		err    func() error
		reason string
	}{
		{"misspelt priority class", func() error {
			return admitPod(ds, func(p *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(p.Object, "system-node-critcal", "spec", "priorityClassName")
			})
		}, "system-node-critcal"},
		{"service account not in rbac.yaml", func() error {
			return admitPod(ds, func(p *unstructured.Unstructured) {
				_ = unstructured.SetNestedField(p.Object, "kproxy-absent", "spec", "serviceAccountName")
			})
		}, "kproxy-absent"},
		{"misspelt field", func() error {
			broken := ds.obj.DeepCopy()
			_ = unstructured.SetNestedSlice(broken.Object, []any{map[string]any{"operator": "Exists"}}, "spec", "template", "spec", "tolerration")
			return apply(broken)
		}, "tolerration"},
	} {
		if err := c.err(); err == nil || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s (%s): %v, want a rejection naming %q", c.name, ds.where, err, c.reason)
		}
	}
}

// templatePod is the Pod a DaemonSet (or any workload) would create from
// its template.
func templatePod(obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	tmpl, found, err := unstructured.NestedMap(obj.Object, "spec", "template")
	if err != nil || !found {
		return nil, errors.New("no spec.template")
	}
	meta, _, _ := unstructured.NestedMap(tmpl, "metadata")
	if meta == nil {
		meta = map[string]any{}
	}
	meta["generateName"] = obj.GetName() + "-"
	meta["namespace"] = obj.GetNamespace()
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tmpl["spec"],
	}}, nil
}

// TestManifestsAgree checks what no apiserver checks: that the documents
// refer to one another correctly, and that the ConfigMap's files are what
// the DaemonSets expect.
func TestManifestsAgree(t *testing.T) {
	docs := readManifests(t)
	var (
		accounts   = map[string]bool{} // "ns/name"
		bound      = map[string]bool{} // "ns/name" of ServiceAccount subjects
		roles      = map[string]bool{}
		roleRefs   = map[string]rbacv1.RoleRef{} // by where
		nsRoles    = map[string]bool{}           // "ns/name" of Roles
		nsRoleRefs = map[string]string{}         // by where: the "ns/name" of the Role a RoleBinding binds
		configMaps = map[string]*corev1.ConfigMap{}
		daemonSets []*appsv1.DaemonSet
	)
	for _, d := range docs {
		typed := func(into any) {
			t.Helper()
			// Unknown fields are errors here too, without an apiserver.
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(d.obj.Object, into, true); err != nil {
				t.Fatalf("%s: %v", d.where, err)
			}
		}
		switch d.obj.GetKind() {
		case "ServiceAccount":
			accounts[d.obj.GetNamespace()+"/"+d.obj.GetName()] = true
		case "ClusterRole":
			roles[d.obj.GetName()] = true
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			typed(&b)
			roleRefs[d.where] = b.RoleRef
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind {
					bound[s.Namespace+"/"+s.Name] = true
				}
			}
		case "Role":
			nsRoles[d.obj.GetNamespace()+"/"+d.obj.GetName()] = true
		case "RoleBinding":
			var b rbacv1.RoleBinding
			typed(&b)
			if b.RoleRef.Kind != "Role" {
				t.Errorf("%s: binds %s %q, want a Role of its namespace", d.where, b.RoleRef.Kind, b.RoleRef.Name)
			}
			nsRoleRefs[d.where] = b.Namespace + "/" + b.RoleRef.Name
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind && !accounts[s.Namespace+"/"+s.Name] {
					t.Errorf("%s: binds service account %s/%s, not one of deploy/ (or not before it)", d.where, s.Namespace, s.Name)
				}
			}
		case "ConfigMap":
			var cm corev1.ConfigMap
			typed(&cm)
			configMaps[cm.Namespace+"/"+cm.Name] = &cm
		case "DaemonSet":
			var ds appsv1.DaemonSet
			typed(&ds)
			daemonSets = append(daemonSets, &ds)
		}
	}

	for where, ref := range nsRoleRefs {
		if !nsRoles[ref] {
			t.Errorf("%s: binds Role %s, not a Role of deploy/", where, ref)
		}
	}
	for where, ref := range roleRefs {
		if ref.Kind != "ClusterRole" || !roles[ref.Name] {
			t.Errorf("%s: binds %s %q, not a ClusterRole of deploy/", where, ref.Kind, ref.Name)
		}
	}

	var healthzPort string
	checkedConfig := false
	for _, cm := range configMaps {
		for key, data := range cm.Data {
			switch key {
			case "config.conf":
				cfg := decodeKubeProxyConfig(t, cm.Name+"/"+key, data)
				if cfg.Mode != "nftables" {
					t.Errorf("%s/%s: mode %q, want nftables (the Linux portal)", cm.Name, key, cfg.Mode)
				}
				var err error
				if _, healthzPort, err = net.SplitHostPort(cfg.HealthzBindAddress); err != nil {
					t.Errorf("%s/%s: healthzBindAddress %q: %v", cm.Name, key, cfg.HealthzBindAddress, err)
				}
				if kc := cfg.ClientConnection.Kubeconfig; kc != "" && !strings.HasPrefix(kc, "/var/lib/kproxy/") {
					t.Errorf("%s/%s: clientConnection.kubeconfig %q is not in the ConfigMap's mount", cm.Name, key, kc)
				} else if kc != "" {
					if _, ok := cm.Data[path.Base(kc)]; !ok {
						t.Errorf("%s/%s: clientConnection.kubeconfig %q: no key %q in the ConfigMap", cm.Name, key, kc, path.Base(kc))
					}
				}
				checkedConfig = true
			case "kubeconfig.conf":
				kc, err := clientcmd.Load([]byte(data))
				if err != nil {
					t.Errorf("%s/%s: %v", cm.Name, key, err)
					continue
				}
				// Validate would open the files, which exist only in a pod.
				ctx := kc.Contexts[kc.CurrentContext]
				if ctx == nil || kc.Clusters[ctx.Cluster] == nil || kc.AuthInfos[ctx.AuthInfo] == nil {
					t.Errorf("%s/%s: current-context %q does not name a context with a cluster and a user", cm.Name, key, kc.CurrentContext)
					continue
				}
				// The pod's own service account, the one RBAC binds.
				const sa = "/var/run/secrets/kubernetes.io/serviceaccount/"
				if c := kc.Clusters[ctx.Cluster]; c.Server == "" || c.CertificateAuthority != sa+"ca.crt" {
					t.Errorf("%s/%s: cluster %s: server %q, certificate-authority %q; want a server and %s", cm.Name, key, ctx.Cluster, c.Server, c.CertificateAuthority, sa+"ca.crt")
				}
				if u := kc.AuthInfos[ctx.AuthInfo]; u.TokenFile != sa+"token" {
					t.Errorf("%s/%s: user %s: tokenFile %q, want %s", cm.Name, key, ctx.AuthInfo, u.TokenFile, sa+"token")
				}
			}
		}
	}
	if !checkedConfig {
		t.Fatal("no ConfigMap with a config.conf")
	}

	for _, ds := range daemonSets {
		where := "DaemonSet " + ds.Name
		spec := ds.Spec.Template.Spec
		if sa := ds.Namespace + "/" + spec.ServiceAccountName; !accounts[sa] || !bound[sa] {
			t.Errorf("%s: service account %s: defined %v, bound by a ClusterRoleBinding %v; want both (deploy/rbac.yaml)", where, sa, accounts[sa], bound[sa])
		}
		if spec.PriorityClassName != "system-node-critical" || !spec.HostNetwork {
			t.Errorf("%s: priorityClassName %q, hostNetwork %v; want system-node-critical, true", where, spec.PriorityClassName, spec.HostNetwork)
		}
		if !slices.ContainsFunc(spec.Tolerations, func(tol corev1.Toleration) bool {
			return tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == ""
		}) {
			t.Errorf("%s: does not tolerate every taint (operator Exists), as kube-proxy's DaemonSet does", where)
		}
		if u := ds.Spec.UpdateStrategy; u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil || u.RollingUpdate.MaxUnavailable == nil {
			t.Errorf("%s: update strategy %+v, want RollingUpdate with maxUnavailable", where, u)
		}
		// A surge pod starts beside the old one on the same node. For a
		// host-network pod the API server makes every containerPort a
		// hostPort, and the scheduler places no pod where its host ports
		// are taken: the surge pod would stay Pending and the rollout
		// never start (TestDaemonSetRollout shows it with the real
		// scheduler). kproxy's own sockets are shared (SO_REUSEPORT).
		if u := ds.Spec.UpdateStrategy.RollingUpdate; spec.HostNetwork && u != nil && u.MaxSurge != nil && u.MaxSurge.String() != "0" && u.MaxSurge.String() != "0%" {
			for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
				for _, p := range c.Ports {
					t.Errorf("%s: container %s declares port %d: with hostNetwork it is a hostPort, and a surge pod (maxSurge %s) cannot be scheduled beside the old one", where, c.Name, p.ContainerPort, u.MaxSurge.String())
				}
			}
		}
		// On Linux, the node's sysctls (the hand-over's
		// net.ipv4.tcp_migrate_req, kube-proxy's conntrack settings) are
		// set by a privileged init container running only `kproxy
		// setup-node` (with kproxy's config) from kproxy's own image (a host-network pod may not
		// set net.* sysctls, and /proc/sys is read-only in any container
		// that is not privileged); kproxy itself stays unprivileged.
		if spec.NodeSelector[corev1.LabelOSStable] == "linux" {
			var inits []corev1.Container
			for _, c := range spec.InitContainers {
				if c.RestartPolicy == nil { // not a sidecar (the socket keeper)
					inits = append(inits, c)
				}
			}
			checkSocketKeeper(t, where, spec)
			if len(inits) != 1 || !slices.Equal(slices.Concat(inits[0].Command, inits[0].Args), []string{"kproxy", "setup-node", "--config", "/var/lib/kproxy/config.conf"}) ||
				inits[0].SecurityContext == nil || !ptr.Deref(inits[0].SecurityContext.Privileged, false) ||
				len(spec.Containers) == 0 || inits[0].Image != spec.Containers[0].Image {
				t.Errorf("%s: want one init container, privileged, running kproxy setup-node from the kproxy container's image; have %+v", where, inits)
			}
		}
		for _, c := range spec.Containers {
			if c.SecurityContext != nil && ptr.Deref(c.SecurityContext.Privileged, false) {
				t.Errorf("%s: container %s is privileged", where, c.Name)
			}
		}
		mounts := map[string]string{} // mount path -> ConfigMap "ns/name"
		for _, v := range spec.Volumes {
			if v.ConfigMap == nil {
				continue
			}
			ref := ds.Namespace + "/" + v.ConfigMap.Name
			if configMaps[ref] == nil {
				t.Errorf("%s: volume %s: ConfigMap %s is not in deploy/", where, v.Name, ref)
			}
			for _, c := range spec.Containers {
				for _, m := range c.VolumeMounts {
					if m.Name == v.Name {
						mounts[m.MountPath] = ref
					}
				}
			}
		}
		for _, c := range spec.Containers {
			if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
				return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
			}) {
				t.Errorf("%s: container %s: no NODE_NAME from spec.nodeName", where, c.Name)
			}
			checkHTTPProbe(t, where, c.Name, "liveness", c.LivenessProbe, "/livez", healthzPort)
			checkReadinessProbe(t, where, ds, c, healthzPort)
			// --config FILE must be a key of a ConfigMap mounted where it is read.
			args := append(slices.Clone(c.Command), c.Args...)
			if i := slices.Index(args, "--config"); i >= 0 && i+1 < len(args) {
				file := args[i+1]
				cm := configMaps[mounts[path.Dir(file)]]
				if cm == nil {
					t.Errorf("%s: container %s: --config %s: no ConfigMap mounted at %s", where, c.Name, file, path.Dir(file))
				} else if _, ok := cm.Data[path.Base(file)]; !ok {
					t.Errorf("%s: container %s: --config %s: ConfigMap %s has no key %s", where, c.Name, file, cm.Name, path.Base(file))
				}
			}
		}
	}
}

// decodeKubeProxyConfig decodes a config file's documents: each has an
// apiVersion and kind, and kube-proxy's is decoded strictly with its own
// types (k8s.io/kube-proxy), so a field kube-proxy would not know fails.
func decodeKubeProxyConfig(t *testing.T, where, data string) *kubeproxyv1alpha1.KubeProxyConfiguration {
	t.Helper()
	var cfg *kubeproxyv1alpha1.KubeProxyConfiguration
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(data)))
	for {
		raw, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", where, err)
		}
		if onlyComments(raw) {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(raw, &tm); err != nil || tm.APIVersion == "" || tm.Kind == "" {
			t.Fatalf("%s: a document without apiVersion and kind (%v):\n%s", where, err, raw)
		}
		if tm.Kind != "KubeProxyConfiguration" {
			continue // kproxy's own section: read by kproxy, not kube-proxy
		}
		if gv := kubeproxyv1alpha1.SchemeGroupVersion.String(); tm.APIVersion != gv {
			t.Fatalf("%s: KubeProxyConfiguration apiVersion %q, want %q", where, tm.APIVersion, gv)
		}
		cfg = &kubeproxyv1alpha1.KubeProxyConfiguration{}
		if err := yaml.UnmarshalStrict(raw, cfg); err != nil {
			t.Fatalf("%s: not a kube-proxy KubeProxyConfiguration: %v", where, err)
		}
	}
	if cfg == nil {
		t.Fatalf("%s: no KubeProxyConfiguration document", where)
	}
	return cfg
}

func checkHTTPProbe(t *testing.T, where, container, name string, p *corev1.Probe, path, port string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != path || p.HTTPGet.Port.String() != port {
		got := "none"
		if p != nil && p.HTTPGet != nil {
			got = "GET " + p.HTTPGet.Path + " on " + p.HTTPGet.Port.String()
		} else if p != nil && p.Exec != nil {
			got = "exec " + strings.Join(p.Exec.Command, " ")
		}
		t.Errorf("%s: container %s: %s probe %s, want GET %s on the configured health port %s", where, container, name, got, path, port)
	}
}

// checkReadinessProbe: a pod is Ready once its own process serves its
// first state, never on kube-proxy's /healthz (healthy from the start,
// so a rollout would stop the old pod before the new one listens). Where
// an update overlaps the old and new pods (maxSurge), both processes share
// the health port and an HTTP probe may be answered by the old one: the
// probe runs kproxy check-ready on the --ready-file the container's kproxy
// run keeps, in a volume of the pod's own (emptyDir). Without overlap,
// GET /readyz on the health port.
func checkReadinessProbe(t *testing.T, where string, ds *appsv1.DaemonSet, c corev1.Container, healthzPort string) {
	t.Helper()
	ru := ds.Spec.UpdateStrategy.RollingUpdate
	if ru == nil || ru.MaxSurge == nil || ru.MaxSurge.IntValue() == 0 && ru.MaxSurge.String() == "0" {
		checkHTTPProbe(t, where, c.Name, "readiness", c.ReadinessProbe, "/readyz", healthzPort)
		return
	}
	p := c.ReadinessProbe
	args := append(slices.Clone(c.Command), c.Args...)
	i := slices.Index(args, "--ready-file")
	if i < 0 || i+1 >= len(args) {
		t.Errorf("%s: container %s: updates overlap (maxSurge) but kproxy run has no --ready-file", where, c.Name)
		return
	}
	file := args[i+1]
	want := []string{"kproxy", "check-ready", "--ready-file", file}
	if p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, want) {
		t.Errorf("%s: container %s: readiness probe %+v, want exec %q (an HTTP probe may reach the other pod's process)", where, c.Name, p, want)
	}
	var vol string
	for _, m := range c.VolumeMounts {
		if m.MountPath == path.Dir(file) {
			vol = m.Name
		}
	}
	ok := false
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name == vol && v.EmptyDir != nil {
			ok = true
		}
	}
	if !ok {
		t.Errorf("%s: container %s: --ready-file %s is not in an emptyDir volume of the pod's own (mounted at %s)", where, c.Name, file, path.Dir(file))
	}
}

// checkSocketKeeper: a Linux kproxy that reaches a socket keeper
// (--socket-keeper) has it as a sidecar of its pod (an init container
// that keeps running: started before kproxy, stopped after it), from the
// same image, unprivileged with no capability, its socket in a volume of
// the pod's own (a node's path would be shared with the surge pod's
// keeper, and the old pod's sockets handed to the new pod's process).
func checkSocketKeeper(t *testing.T, where string, spec corev1.PodSpec) {
	t.Helper()
	for _, c := range spec.Containers {
		args := append(slices.Clone(c.Command), c.Args...)
		i := slices.Index(args, "--socket-keeper")
		if i < 0 || i+1 >= len(args) {
			continue
		}
		sock := args[i+1]
		found := false
		for _, k := range spec.InitContainers {
			if !slices.Equal(slices.Concat(k.Command, k.Args), []string{"kproxy", "keep-sockets", "--socket", sock}) {
				continue
			}
			found = true
			if k.RestartPolicy == nil || *k.RestartPolicy != corev1.ContainerRestartPolicyAlways {
				t.Errorf("%s: socket keeper %s is not a sidecar (restartPolicy: Always): it would have to exit before kproxy starts", where, k.Name)
			}
			if k.Image != c.Image {
				t.Errorf("%s: socket keeper %s runs image %s, kproxy %s", where, k.Name, k.Image, c.Image)
			}
			if sc := k.SecurityContext; sc == nil || ptr.Deref(sc.Privileged, false) || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
				t.Errorf("%s: socket keeper %s must drop every capability and add none", where, k.Name)
			}
		}
		if !found {
			t.Errorf("%s: container %s: --socket-keeper %s but no sidecar runs kproxy keep-sockets --socket %s", where, c.Name, sock, sock)
		}
		var vol string
		for _, m := range c.VolumeMounts {
			if m.MountPath == path.Dir(sock) {
				vol = m.Name
			}
		}
		if !slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == vol && v.EmptyDir != nil }) {
			t.Errorf("%s: --socket-keeper %s is not in an emptyDir volume of the pod's own", where, sock)
		}
	}
}
