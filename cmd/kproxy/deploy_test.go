package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/kproxy/kproxy/watcher/kubetest"
)

// deployDocuments reads every document of every deploy/*.yaml.
func deployDocuments(t *testing.T) map[string][]*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob("../../deploy/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no deploy/*.yaml: %v", err)
	}
	out := map[string][]*unstructured.Unstructured{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
		for {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			obj := &unstructured.Unstructured{}
			if err := obj.UnmarshalJSON(mustJSON(t, f, doc)); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if obj.Object == nil || obj.GetKind() == "" {
				continue // comments only
			}
			out[filepath.Base(f)] = append(out[filepath.Base(f)], obj)
		}
	}
	return out
}

func mustJSON(t *testing.T, file string, doc []byte) []byte {
	t.Helper()
	js, err := utilyaml.ToJSON(doc)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if string(bytes.TrimSpace(js)) == "null" {
		return []byte("{}")
	}
	return js
}

// Every deploy/ document is accepted by a real API server: created with a
// server-side dry run, so admission and validation run in full (the
// DaemonSets' host network, capabilities, probes, priority class,
// HostProcess options).
func TestDeployManifestsAcceptedByAPIServer(t *testing.T) {
	s := kubetest.Start(t)
	dc, err := discovery.NewDiscoveryClientForConfig(s.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(s.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for file, objs := range deployDocuments(t) {
		for _, obj := range objs {
			gvk := obj.GroupVersionKind()
			m, err := mapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version)
			if err != nil {
				t.Errorf("%s: %s %s: %v", file, gvk.Kind, obj.GetName(), err)
				continue
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if obj.GetNamespace() != "" {
				ri = dyn.Resource(m.Resource).Namespace(obj.GetNamespace())
			}
			// Dry run: rbac.yaml's objects exist already (kubetest applied them).
			_, err = ri.Create(context.Background(), obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil && !isAlreadyExists(err) {
				t.Errorf("%s: %s %s/%s rejected: %v", file, gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
				continue
			}
			n++
		}
	}
	t.Logf("%d deploy/ documents accepted", n)
}

// The ConfigMap's config is what kproxy run --config reads, and with it
// (and nothing else) the run options validate.
func TestDeployConfigMapConfigLoads(t *testing.T) {
	var found bool
	for _, obj := range deployDocuments(t)["configmap.yaml"] {
		conf, ok, _ := unstructured.NestedString(obj.Object, "data", "config.conf")
		if !ok {
			continue
		}
		found = true
		path := writeFile(t, conf)
		var o runOptions
		fs := runFlags(&o)
		if err := fs.Parse([]string{"--config", path}); err != nil {
			t.Fatal(err)
		}
		values, ignored, err := loadConfig(path)
		if err != nil {
			t.Fatalf("deploy/configmap.yaml config.conf: %v", err)
		}
		if err := applyConfig(fs, values); err != nil {
			t.Fatal(err)
		}
		if err := o.validate(); err != nil {
			t.Fatalf("deploy/configmap.yaml config.conf does not validate: %v", err)
		}
		if len(ignored) > 0 || o.portalMode != "nftables" || o.source != "kube" || o.healthzBindAddress != "0.0.0.0:10256" {
			t.Errorf("config.conf: ignored %v, portal %q, source %q, healthz %q", ignored, o.portalMode, o.source, o.healthzBindAddress)
		}
	}
	if !found {
		t.Fatal("no ConfigMap with config.conf in deploy/")
	}
}

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }
