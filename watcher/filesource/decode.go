package filesource

import (
	"errors"
	"fmt"
	"io"
	goruntime "runtime"
	"sync"

	"github.com/kproxy/kproxy/watcher"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// deserializer decodes exactly the kinds the file source reads, strictly:
// an unknown or duplicated field is an error rather than silently dropped,
// so a typo such as "targetport" cannot quietly change what is proxied.
var deserializer = serializer.NewCodecFactory(newScheme(), serializer.EnableStrict).UniversalDeserializer()

func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(discoveryv1.AddToScheme(s))
	return s
}

// located is a decoded object and where it came from: at names it for
// messages ("services.yaml document 3 (Service default/web)") and seq
// numbers documents across all files so findings can be listed in file
// order.
type located[T any] struct {
	at  string
	seq int
	obj T
}

// objectDoc is a decoded Service or EndpointSlice with what the file
// source groups it by. A FileSource keeps each file's documents between
// polls without their decoded objects (cool): 2 KiB of Kubernetes objects
// per service port against the few hundred bytes of their documents. A
// build that needs an object again (its service or one of its slices
// changed in another file) decodes its document again (load).
type objectDoc[T any] struct {
	namespace, name string
	service         string // an EndpointSlice's kubernetes.io/service-name label
	fqdn            bool   // an EndpointSlice of addressType FQDN
	obj             T      // nil once cooled
	raw             []byte // the document obj was decoded from
	// file and doc name where it is for messages, when its located's at
	// is empty: not a string of its own per document, which every service
	// port would hold and only messages read.
	file *string
	doc  int
}

// where names the document for messages, as decodeFast's at does:
// "services.yaml document 3 (Service default/web)".
func (d *objectDoc[T]) where() string {
	var kind string
	switch any(d.obj).(type) {
	case *corev1.Service:
		kind = "Service"
	case *discoveryv1.EndpointSlice:
		kind = "EndpointSlice"
	}
	return fmt.Sprintf("%s document %d", *d.file, d.doc) + header{kind: kind, namespace: d.namespace, name: d.name}.describe()
}

// where is l.at, or its document's where when at was left empty.
func (l located[T]) where() string {
	if l.at == "" {
		if d, ok := any(l.obj).(interface{ where() string }); ok {
			return d.where()
		}
	}
	return l.at
}

type (
	serviceDoc = objectDoc[*corev1.Service]
	sliceDoc   = objectDoc[*discoveryv1.EndpointSlice]
)

// loadService is d's Service, decoded again from its document if cooled.
func loadService(d *serviceDoc) (*corev1.Service, error) {
	if d.obj != nil {
		return d.obj, nil
	}
	var out decoded
	decodeDocument("", d.raw, &out)
	if len(out.services) != 1 {
		return nil, fmt.Errorf("decoding Service %s/%s again gave %d services", d.namespace, d.name, len(out.services))
	}
	return out.services[0].obj.obj, nil
}

// loadSlice is d's EndpointSlice, decoded again from its document if
// cooled.
func loadSlice(d *sliceDoc) (*discoveryv1.EndpointSlice, error) {
	if d.obj != nil {
		return d.obj, nil
	}
	var out decoded
	decodeDocument("", d.raw, &out)
	if len(out.slices) != 1 {
		return nil, fmt.Errorf("decoding EndpointSlice %s/%s again gave %d slices", d.namespace, d.name, len(out.slices))
	}
	return out.slices[0].obj.obj, nil
}

func newServiceDoc(o *corev1.Service, raw []byte) *serviceDoc {
	return &serviceDoc{namespace: o.Namespace, name: o.Name, obj: o, raw: raw}
}

func newSliceDoc(o *discoveryv1.EndpointSlice, raw []byte) *sliceDoc {
	return &sliceDoc{namespace: o.Namespace, name: o.Name, service: o.Labels[discoveryv1.LabelServiceName],
		fqdn: o.AddressType == discoveryv1.AddressTypeFQDN, obj: o, raw: raw}
}

// cool drops the decoded objects of d's documents, which keep their
// document to be decoded again.
func (d *decoded) cool() {
	for _, s := range d.services {
		s.obj.obj = nil
	}
	for _, s := range d.slices {
		s.obj.obj = nil
	}
}

// pack copies the documents of d into one buffer: one allocation per
// file, where each document was one of its own, of mixed sizes and kept
// among the decoding's garbage.
func (d *decoded) pack() {
	n := 0
	for _, s := range d.services {
		n += len(s.obj.raw)
	}
	for _, s := range d.slices {
		n += len(s.obj.raw)
	}
	buf := make([]byte, 0, n)
	keep := func(raw []byte) []byte {
		at := len(buf)
		buf = append(buf, raw...)
		return buf[at:len(buf):len(buf)]
	}
	for _, s := range d.services {
		s.obj.raw = keep(s.obj.raw)
	}
	for _, s := range d.slices {
		s.obj.raw = keep(s.obj.raw)
	}
}

// locate places d, decoded by decodeFast as at with header h: a document
// of a file keeps no at of its own (objectDoc.where renders it).
func locate[T any](out *decoded, at string, seq int, h header, d *objectDoc[T]) located[*objectDoc[T]] {
	if out.doc > 0 && out.file != nil {
		d.file, d.doc = out.file, out.doc
		return located[*objectDoc[T]]{seq: seq, obj: d}
	}
	return located[*objectDoc[T]]{at + h.describe(), seq, d}
}

// appendAfter appends a later file's items to dst, numbered after the
// off documents of the files before it.
func appendAfter[T any](dst, src []located[T], off int) []located[T] {
	for _, x := range src {
		x.seq += off
		dst = append(dst, x)
	}
	return dst
}

// decoded collects what the documents of all input files contained.
type decoded struct {
	services []located[*serviceDoc]
	slices   []located[*sliceDoc]
	findings
	seq int // of the last document read

	// file and doc are the file and document number decodeFile is
	// decoding, doc 0 in a List's items (their at says which).
	file *string
	doc  int
}

// decodeFile splits a file into YAML documents ("---"; a JSON file is one
// document) and decodes each. Documents are numbered from 1 as a user
// counts them in an editor.
func decodeFile(name string, data []byte, out *decoded) {
	out.file = &name
	defer func() { out.file, out.doc = nil, 0 }()
	r := newDocumentReader(data)
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			out.pack()
			return
		}
		if err != nil {
			// The reader cannot resynchronise after a bad separator.
			out.seq++
			out.failUnknown(out.seq, fmt.Errorf("%s document %d: %w", name, n, err))
			out.pack()
			return
		}
		out.doc = n
		decodeDocument(fmt.Sprintf("%s document %d", name, n), doc, out)
	}
}

// decodeAll decodes the files, several at once (decoding is most of the
// cost of loading thousands of services), and joins what they held in
// file order: documents are numbered across all files, as one by one.
func decodeAll(inputs []input) decoded {
	return joinDecoded(decodeFiles(inputs, nil))
}

// decodeFiles decodes each input on its own, several at once, each part
// numbering its documents from 1. done, when set, is called with each
// file's name (from the decoding goroutines).
func decodeFiles(inputs []input, done func(string)) []decoded {
	parts := make([]decoded, len(inputs))
	next := make(chan int, len(inputs))
	for i := range inputs {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range min(len(inputs), goruntime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				decodeFile(inputs[i].name, inputs[i].data, &parts[i])
				if done != nil {
					done(inputs[i].name)
				}
			}
		}()
	}
	wg.Wait()
	return parts
}

// joinDecoded joins files' parts in order, numbering documents after
// those of the files before. It copies, so the parts can be kept and
// joined again after one of them changed.
func joinDecoded(parts []decoded) decoded {
	var d decoded
	for _, p := range parts {
		off := d.seq
		d.services = appendAfter(d.services, p.services, off)
		d.slices = appendAfter(d.slices, p.slices, off)
		d.errors = appendAfter(d.errors, p.errors, off)
		d.skipped = appendAfter(d.skipped, p.skipped, off)
		d.ignored = appendAfter(d.ignored, p.ignored, off)
		for key := range p.retain {
			if d.retain == nil {
				d.retain = make(map[string]bool)
			}
			d.retain[key] = true
		}
		d.retainMissing = d.retainMissing || p.retainMissing
		d.seq += p.seq
	}
	return d
}

// decodeDocument decodes one document, or each item of a kind: List.
// Kinds kproxy does not use (Deployment, ConfigMap...) are noted in
// skipped rather than reported as errors, so users can keep a whole
// application in one file.
func decodeDocument(at string, doc []byte, out *decoded) {
	out.seq++
	seq := out.seq
	if decodeFast(at, seq, doc, out) {
		return
	}
	// A lenient first look gives kind and name for messages even when the
	// strict decode below fails.
	var head map[string]any
	if err := yaml.Unmarshal(doc, &head); err != nil {
		out.failUnknown(seq, fmt.Errorf("%s: not a Kubernetes object: %w", at, err))
		return
	}
	if head == nil {
		return // empty, or only comments
	}
	h := headerOf(head)
	where := at + h.describe()

	switch {
	case h.apiVersion == "" || h.kind == "":
		out.failUnknown(seq, fmt.Errorf("%s: apiVersion and kind are required", where))
		return
	case h.apiVersion == "v1" && (h.kind == "Service" || h.kind == "List"):
	case h.apiVersion == discoveryv1.SchemeGroupVersion.String() && h.kind == "EndpointSlice":
	default:
		out.skip(seq, fmt.Sprintf("%s: %s %s is not used by kproxy", where, h.apiVersion, h.kind))
		return
	}

	obj, _, err := deserializer.Decode(doc, nil, nil)
	if err != nil {
		err = fmt.Errorf("%s: %w", where, err)
		switch h.kind {
		case "Service":
			out.failService(seq, h.namespace, h.name, err)
		case "EndpointSlice":
			out.failSlice(seq, h.namespace, h.serviceName, err)
		default:
			out.failUnknown(seq, err) // a List's items are unknown
		}
		return
	}
	switch o := obj.(type) {
	case *corev1.Service:
		o.Namespace = watcher.NamespaceOf(o.Namespace)
		out.services = append(out.services, located[*serviceDoc]{where, seq, newServiceDoc(o, doc)})
	case *discoveryv1.EndpointSlice:
		o.Namespace = watcher.NamespaceOf(o.Namespace)
		out.slices = append(out.slices, located[*sliceDoc]{where, seq, newSliceDoc(o, doc)})
	case *corev1.List:
		doc := out.doc
		out.doc = 0 // items are named by their at
		for i, item := range o.Items {
			decodeDocument(fmt.Sprintf("%s item %d", at, i+1), item.Raw, out)
		}
		out.doc = doc
	}
}

// decodeFast decodes a well-formed Service, EndpointSlice or List with one
// YAML parse (YAMLToJSONStrict, which also refuses duplicate keys, or
// simpleYAMLToJSON where it can) and one strict JSON decode, where decodeDocument's general path parses the YAML
// three times (its lenient look at the header, and the YAML serializer's
// two conversions), and decoding is most of the cost of loading thousands
// of services. Anything else (an error, another kind, an empty document)
// returns false and takes the general path, so its findings and messages
// are exactly those of the general path.
func decodeFast(at string, seq int, doc []byte, out *decoded) bool {
	// Most manifests are plain YAML that converts without the parser
	// (simpleYAMLToJSON: a tenth of its CPU); the rest takes it.
	js, t, ok := simpleYAMLDocument(doc)
	if !ok {
		var err error
		if js, err = yaml.YAMLToJSONStrict(doc); err != nil {
			return false
		}
	}
	obj, known, err := decodeKnown(js, t)
	var h header
	if known {
		if err != nil {
			return false
		}
		h = header{apiVersion: t.apiVersion, kind: t.kind}
	} else {
		var gvk *schema.GroupVersionKind
		obj, gvk, err = deserializer.Decode(js, nil, nil)
		if err != nil || gvk == nil {
			return false
		}
		h = header{apiVersion: gvk.GroupVersion().String(), kind: gvk.Kind}
	}
	switch o := obj.(type) {
	case *corev1.Service:
		if h.apiVersion != "v1" || h.kind != "Service" {
			return false
		}
		h.namespace, h.name = o.Namespace, o.Name
		o.Namespace = watcher.NamespaceOf(o.Namespace)
		out.services = append(out.services, locate(out, at, seq, h, newServiceDoc(o, doc)))
	case *discoveryv1.EndpointSlice:
		if h.apiVersion != discoveryv1.SchemeGroupVersion.String() || h.kind != "EndpointSlice" {
			return false
		}
		h.namespace, h.name = o.Namespace, o.Name
		o.Namespace = watcher.NamespaceOf(o.Namespace)
		out.slices = append(out.slices, locate(out, at, seq, h, newSliceDoc(o, doc)))
	case *corev1.List:
		if h.apiVersion != "v1" || h.kind != "List" {
			return false
		}
		doc := out.doc
		out.doc = 0 // items are named by their at
		for i, item := range o.Items {
			decodeDocument(fmt.Sprintf("%s item %d", at, i+1), item.Raw, out)
		}
		out.doc = doc
	default:
		return false
	}
	return true
}

// decodeKnown decodes a Service or EndpointSlice whose apiVersion and
// kind were read with its conversion to JSON (known), as the deserializer
// would (a strict decode into the kind's type), without the deserializer's
// own look at apiVersion and kind first, which is a whole extra JSON
// decode of every document. Any other document is left to the
// deserializer.
func decodeKnown(js []byte, t typeOf) (obj runtime.Object, known bool, err error) {
	switch t {
	case typeOf{"v1", "Service"}:
		obj = &corev1.Service{}
	case typeOf{discoveryv1.SchemeGroupVersion.String(), "EndpointSlice"}:
		obj = &discoveryv1.EndpointSlice{}
	default:
		return nil, false, nil
	}
	strict, err := kjson.UnmarshalStrict(js, obj)
	if err == nil && len(strict) > 0 {
		err = runtime.NewStrictDecodingError(strict)
	}
	return obj, true, err
}

// header is the identifying part of a document, read without a schema.
type header struct {
	apiVersion, kind, namespace, name string
	serviceName                       string // an EndpointSlice's kubernetes.io/service-name label
}

func headerOf(m map[string]any) header {
	str := func(m map[string]any, key string) string {
		s, _ := m[key].(string)
		return s
	}
	h := header{apiVersion: str(m, "apiVersion"), kind: str(m, "kind")}
	if meta, ok := m["metadata"].(map[string]any); ok {
		h.namespace, h.name = str(meta, "namespace"), str(meta, "name")
		if labels, ok := meta["labels"].(map[string]any); ok {
			h.serviceName = str(labels, discoveryv1.LabelServiceName)
		}
	}
	return h
}

// describe renders " (Service default/web)", or less when the document
// lacks those fields.
func (h header) describe() string {
	switch {
	case h.kind == "":
		return ""
	case h.name == "" || h.kind == "List":
		return " (" + h.kind + ")"
	}
	return " (" + h.kind + " " + watcher.NamespaceOf(h.namespace) + "/" + h.name + ")"
}
