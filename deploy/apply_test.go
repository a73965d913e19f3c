package deploy_test

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/utils/ptr"

	"github.com/kproxy/kproxy/test/kubetest"
)

// applier applies manifest documents to a real API server as
// `kubectl apply --server-side` does: any kind the server serves, strict
// field validation (an unknown or misspelt field is a rejection, not
// silently dropped).
type applier struct {
	mapper *restmapper.DeferredDiscoveryRESTMapper
	dyn    dynamic.Interface
}

func newApplier(t *testing.T, s *kubetest.Server) *applier {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(s.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(s.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), dyn: dyn}
}

func (a *applier) resource(obj *unstructured.Unstructured) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() != "namespace" {
		return a.dyn.Resource(m.Resource), nil
	}
	// Explicit, so `kubectl apply -f deploy/` does not depend on the
	// current context's namespace (rbac.yaml binds kube-system's account).
	if obj.GetNamespace() == "" {
		return nil, errors.New("namespaced but no metadata.namespace")
	}
	return a.dyn.Resource(m.Resource).Namespace(obj.GetNamespace()), nil
}

func (a *applier) apply(ctx context.Context, obj *unstructured.Unstructured) error {
	ri, err := a.resource(obj)
	if err != nil {
		return err
	}
	body, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	_, err = ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{
		FieldManager: "kproxy-deploy-test", Force: ptr.To(true), FieldValidation: "Strict"})
	return err
}
