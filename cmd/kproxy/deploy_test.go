package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
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

// The ConfigMap's config is what kproxy run --config reads: with it and
// the DaemonSet's --source kube the run options validate, and nothing in
// it is ignored. (deploy/deploy_test.go proves the manifests against the
// real API server.)
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
		if err := fs.Parse([]string{"--source", "kube", "--config", path}); err != nil {
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
