package filesource

import (
	"cmp"
	"maps"
	"slices"

	"github.com/kproxy/kproxy/watcher"
)

// findings collects what went wrong or was left out while loading, as it
// is found (decoding first, building later), and which services the
// consumer must therefore keep as they were.
type findings struct {
	errors  []located[error]
	skipped []located[string]
	ignored []located[error]
	// annotations are kproxy.io annotations left unapplied.
	annotations []located[error]
	// retain and retainMissing feed Result.Retain and Result.RetainMissing.
	retain        map[string]bool
	retainMissing bool
}

// failService records an error about one service's input. The service keeps
// its previous state; when its name is unknown, every missing service does.
func (f *findings) failService(seq int, namespace, name string, err error) {
	f.fail(seq, err)
	f.retainService(namespace, name)
}

// failSlice records an error about an EndpointSlice: the service it feeds
// (named by its kubernetes.io/service-name label) keeps its previous
// endpoints rather than losing this slice's. A slice without the label
// feeds no service.
func (f *findings) failSlice(seq int, namespace, service string, err error) {
	f.fail(seq, err)
	if service != "" {
		f.retainService(namespace, service)
	}
}

// failUnknown records an error about input that could not be identified,
// which might have been any service.
func (f *findings) failUnknown(seq int, err error) {
	f.fail(seq, err)
	f.retainMissing = true
}

// clone copies f, so building for one node adds nothing to another's.
func (f *findings) clone() findings {
	return findings{errors: slices.Clone(f.errors), skipped: slices.Clone(f.skipped), ignored: slices.Clone(f.ignored),
		annotations: slices.Clone(f.annotations),
		retain:      maps.Clone(f.retain), retainMissing: f.retainMissing}
}

func (f *findings) retainService(namespace, name string) {
	if name == "" {
		f.retainMissing = true
		return
	}
	if f.retain == nil {
		f.retain = make(map[string]bool)
	}
	f.retain[serviceKey(watcher.NamespaceOf(namespace), name)] = true
}

func (f *findings) fail(seq int, err error) {
	f.errors = append(f.errors, located[error]{seq: seq, obj: err})
}

// ignore records a part of an object left out while the rest is used.
func (f *findings) ignore(seq int, err error) {
	f.ignored = append(f.ignored, located[error]{seq: seq, obj: err})
}

// annotation records a service annotation left unapplied while the
// service serves without it.
func (f *findings) annotation(seq int, err error) {
	f.annotations = append(f.annotations, located[error]{seq: seq, obj: err})
}

func (f *findings) skip(seq int, msg string) {
	f.skipped = append(f.skipped, located[string]{seq: seq, obj: msg})
}

// fill copies the findings into res, errors and skips in the order of the
// documents they concern, which is how a user reads the files.
func (f *findings) fill(res *Result) {
	res.Errors = inOrder(f.errors)
	res.Skipped = inOrder(f.skipped)
	res.InvalidCIDRs = inOrder(f.ignored)
	res.AnnotationErrors = inOrder(f.annotations)
	res.Retain = slices.Sorted(maps.Keys(f.retain))
	res.RetainMissing = f.retainMissing
}

func inOrder[T any](items []located[T]) []T {
	slices.SortStableFunc(items, func(a, b located[T]) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]T, 0, len(items))
	for _, it := range items {
		out = append(out, it.obj)
	}
	return out
}
