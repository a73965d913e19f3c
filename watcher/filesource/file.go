package filesource

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/kproxy/kproxy/watcher"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/kproxy/kproxy/messages"
)

// Result is the desired state a file source read, plus what it could not
// use. One bad object does not hide the others: it lands in Errors and the
// remaining services still produce their ports.
type Result struct {
	// ServicePorts is sorted by key ID ("namespace/name:port/PROTOCOL").
	ServicePorts []*messages.ServicePortEndpoints
	// Errors name the file, the document and the field at fault.
	Errors []error
	// Skipped explains objects deliberately not used: services Skip
	// rejects, kinds kproxy does not read, slices no service uses.
	Skipped []string
	// InvalidCIDRs are entries of services' loadBalancerSourceRanges that
	// do not parse: ignored, as kube-proxy ignores them, the service used
	// with the rest.
	InvalidCIDRs []error
	// AnnotationErrors are kproxy.io annotations with values kproxy does
	// not know: the service serves without them.
	AnnotationErrors []error

	// Retain lists the services ("namespace/name") whose input had errors
	// (the Service itself or one of its EndpointSlices). Their ports are
	// absent or incomplete in ServicePorts; the consumer should keep their
	// previous state rather than delete or change what is serving.
	Retain []string
	// RetainMissing is set when some input failed before the service it
	// concerns could be identified (a YAML syntax error, a document without
	// kind or name): the consumer should keep every previously known
	// service port that is missing from ServicePorts.
	RetainMissing bool
}

// LoadPath reads Services and EndpointSlices from a YAML or JSON file, or
// from the *.yaml, *.yml and *.json files of a directory (not recursive,
// in name order), written as a user would kubectl apply them. An error is
// returned only when the path itself cannot be read; problems inside
// documents are reported in Result.Errors.
func LoadPath(path string, opts watcher.Options) (*Result, error) {
	inputs, err := readInputs(path)
	if err != nil {
		return nil, err
	}
	return buildResult(inputs, opts), nil
}

// input is one file's content, read once so that the poller hashes exactly
// the bytes it parses.
type input struct {
	name string
	data []byte
}

func readInputs(path string) ([]input, error) {
	files, err := inputFiles(path)
	if err != nil {
		return nil, err
	}
	inputs := make([]input, 0, len(files))
	for _, f := range files {
		data, err := readManifest(f)
		if err != nil {
			return nil, fmt.Errorf("read manifests: %w", err)
		}
		inputs = append(inputs, input{name: f, data: data})
	}
	return inputs, nil
}

// MaxManifestBytes bounds one manifest file. Decoding costs about ten
// times a file's size in memory, and 10,000 service ports fit in well
// under 16 MiB.
const MaxManifestBytes = 16 << 20

// readManifest reads a file of at most MaxManifestBytes.
func readManifest(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, name)
}

// readLimited reads the open file name, refusing more than MaxManifestBytes.
func readLimited(f *os.File, name string) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(f, MaxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxManifestBytes {
		return nil, fmt.Errorf("%s is larger than %d MiB: split it into several files of a directory", name, MaxManifestBytes>>20)
	}
	return data, nil
}

// inputFiles lists the files path stands for: itself, or the manifest files
// of a directory. Hidden files are left out because editors keep their
// swap and lock files there (Emacs' ".#x.yaml" is even a dangling link).
func inputFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read manifests: %w", err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path) // sorted by name
	if err != nil {
		return nil, fmt.Errorf("read manifests: %w", err)
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !isManifestName(name) {
			continue
		}
		full := filepath.Join(path, name)
		// Follow symlinks (ConfigMap volumes are made of them) but skip
		// anything that resolves to a directory.
		if info, err := os.Stat(full); err != nil {
			return nil, fmt.Errorf("read manifests: %w", err)
		} else if info.IsDir() {
			continue
		}
		files = append(files, full)
	}
	return files, nil
}

func isManifestName(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// buildResult decodes all inputs, then builds each service from the slices
// of all files, so a service and its slices may live in different files.
func buildResult(inputs []input, opts watcher.Options) *Result {
	return decodeInputs(inputs).result(opts)
}

// decodedSet is what the inputs hold, decoded once and not yet built for
// any node: a core serving many nodes builds each node's Result from it.
type decodedSet struct {
	services        []located[*serviceDoc]
	slicesByService map[string][]located[*sliceDoc]
	findings        findings // of decoding; result adds its own to a copy
}

// decodeInputs decodes all inputs and groups the slices by service.
func decodeInputs(inputs []input) *decodedSet {
	return setOf(decodeAll(inputs), nil)
}

// setOf checks the joined documents of all files for duplicates and groups
// the slices by service. memo, when set, keeps each slice's validation.
func setOf(d decoded, memo *buildMemo) *decodedSet {
	services := uniqueServices(d.services, &d.findings)
	validate := validateSliceDoc
	if memo != nil {
		validate = memo.validate
	}
	groups := groupSlices(d.slices, &d.findings, validate)
	return &decodedSet{services: services, slicesByService: groups, findings: d.findings}
}

// result builds the node-local Result for opts (its node name and zone).
func (ds *decodedSet) result(opts watcher.Options) *Result { return ds.build(opts, nil) }

// build is result, reusing what memo kept of services whose decoded
// objects are the very ones of the last build (memo must be used with one
// opts only).
func (ds *decodedSet) build(opts watcher.Options, memo *buildMemo) *Result {
	f := ds.findings.clone()
	var built map[string]*builtService
	if memo != nil {
		built = make(map[string]*builtService, len(memo.services))
		defer func() { memo.services = built }()
	}
	services, slicesByService := ds.services, ds.slicesByService

	res := &Result{}
	bs := make([]*builtService, len(services))
	var todo []int // services to build: not the memo's
	for i, s := range services {
		key := serviceKey(s.obj.namespace, s.obj.name)
		var own []*sliceDoc
		for _, slice := range slicesByService[key] {
			own = append(own, slice.obj)
		}
		if memo != nil {
			if old := memo.services[key]; old != nil && old.svc == s.obj && slices.Equal(old.slices, own) {
				bs[i] = old
				continue
			}
		}
		bs[i] = &builtService{svc: s.obj, slices: own}
		todo = append(todo, i)
	}
	buildAll(todo, func(i int) { buildService(bs[i], opts) })
	for i, s := range services {
		key := serviceKey(s.obj.namespace, s.obj.name)
		b := bs[i]
		if built != nil {
			built[key] = b
		}
		if b.skip != "" {
			f.skip(s.seq, s.where()+": "+b.skip)
			continue
		}
		if b.err != nil {
			f.failService(s.seq, s.obj.namespace, s.obj.name, fmt.Errorf("%s: %w", s.where(), b.err))
			continue
		}
		for _, err := range b.ranges {
			f.ignore(s.seq, fmt.Errorf("%s: %w", s.where(), err))
		}
		for _, err := range b.annotations {
			f.annotation(s.seq, fmt.Errorf("%s: %w", s.where(), err))
		}
		res.ServicePorts = append(res.ServicePorts, b.ports...)
	}

	// Slices whose service is missing are most likely a typo in the
	// kubernetes.io/service-name label; say so instead of ignoring them.
	known := make(map[string]bool, len(services))
	for _, s := range services {
		known[serviceKey(s.obj.namespace, s.obj.name)] = true
	}
	for key, group := range slicesByService {
		if known[key] {
			continue
		}
		for _, s := range group {
			f.skip(s.seq, fmt.Sprintf("%s: no Service %s was loaded for it", s.where(), key))
		}
	}

	slices.SortFunc(res.ServicePorts, func(a, b *messages.ServicePortEndpoints) int {
		return cmp.Compare(a.GetServicePort().GetKey().ID(), b.GetServicePort().GetKey().ID())
	})
	f.fill(res)
	return res
}

// buildMemo keeps what the last build made of each service and each
// slice's validation, so that after one file changed only the services
// whose documents changed are built again: an unchanged file keeps its
// documents, so the same pointers are the same input.
type buildMemo struct {
	services map[string]*builtService // by "namespace/name"
	valid    map[*sliceDoc]error
	nextOK   map[*sliceDoc]error
}

// builtService is one service's ports built from exactly these documents.
type builtService struct {
	svc         *serviceDoc
	slices      []*sliceDoc
	skip        string // why Skip left the service out, or ""
	ports       []*messages.ServicePortEndpoints
	err         error
	ranges      []error // SourceRangeErrors
	annotations []error // AnnotationErrors
}

// buildService builds one service from its documents (b.svc, b.slices),
// decoding again those that were cooled.
func buildService(b *builtService, opts watcher.Options) {
	obj, err := loadService(b.svc)
	if err != nil {
		b.err = err
		return
	}
	if reason, skip := watcher.Skip(obj, opts); skip {
		b.skip = reason
		return
	}
	objs := make([]*discoveryv1.EndpointSlice, 0, len(b.slices))
	for _, d := range b.slices {
		o, err := loadSlice(d)
		if err != nil {
			b.err = err
			return
		}
		objs = append(objs, o)
	}
	b.ports, b.err = watcher.BuildServicePorts(obj, objs, opts)
	b.ranges = watcher.SourceRangeErrors(obj)
	b.annotations = watcher.AnnotationErrors(obj)
}

// buildPerWorker is how many services a build goroutine takes at least:
// fewer are built in place (tests change it).
var buildPerWorker = 256

// buildAll calls build for each of todo, on GOMAXPROCS goroutines when
// there are many: built one by one, they would be the one part of a start
// between decoding the files and opening the sockets that uses one core.
func buildAll(todo []int, build func(i int)) {
	workers := min(goruntime.GOMAXPROCS(0), len(todo)/buildPerWorker)
	if workers < 2 {
		for _, i := range todo {
			build(i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				n := int(next.Add(1)) - 1
				if n >= len(todo) {
					return
				}
				build(todo[n])
			}
		})
	}
	wg.Wait()
}

// validateSliceDoc is validateEndpointSlice of a document's slice.
func validateSliceDoc(d *sliceDoc) error {
	s, err := loadSlice(d)
	if err != nil {
		return err
	}
	return watcher.ValidateEndpointSlice(s)
}

// validate is validateSliceDoc, remembered per slice for the next set
// (only the slices of this one are kept).
func (m *buildMemo) validate(s *sliceDoc) error {
	err, ok := m.valid[s]
	if !ok {
		err = validateSliceDoc(s)
	}
	if m.nextOK == nil {
		m.nextOK = make(map[*sliceDoc]error, len(m.valid))
	}
	m.nextOK[s] = err
	return err
}

// turn makes the validations of the set just made the ones to reuse.
func (m *buildMemo) turn() { m.valid, m.nextOK = m.nextOK, nil }

// uniqueServices keeps the first definition of each namespace/name; a
// second one is an error, since silently picking one would surprise.
func uniqueServices(all []located[*serviceDoc], f *findings) []located[*serviceDoc] {
	first := make(map[string]located[*serviceDoc])
	var out []located[*serviceDoc]
	for _, s := range all {
		key := serviceKey(s.obj.namespace, s.obj.name)
		if at, dup := first[key]; dup && s.obj.name != "" {
			f.failService(s.seq, s.obj.namespace, s.obj.name, fmt.Errorf("%s: duplicate of %s, ignored", s.where(), at.where()))
			continue
		}
		first[key] = s
		out = append(out, s)
	}
	return out
}

// groupSlices validates slices, drops duplicates and unlabelled ones, and
// indexes the rest by the service ("namespace/name") they belong to.
func groupSlices(all []located[*sliceDoc], f *findings, validate func(*sliceDoc) error) map[string][]located[*sliceDoc] {
	first := make(map[string]located[*sliceDoc])
	groups := make(map[string][]located[*sliceDoc])
	for _, s := range all {
		service := s.obj.service
		if err := validate(s.obj); err != nil {
			f.failSlice(s.seq, s.obj.namespace, service, fmt.Errorf("%s: %w", s.where(), err))
			continue
		}
		id := serviceKey(s.obj.namespace, s.obj.name)
		if at, dup := first[id]; dup {
			f.failSlice(s.seq, s.obj.namespace, service, fmt.Errorf("%s: duplicate of %s, ignored", s.where(), at.where()))
			continue
		}
		first[id] = s
		if service == "" {
			f.skip(s.seq, fmt.Sprintf("%s: no %s label, so no service uses it", s.where(), discoveryv1.LabelServiceName))
			continue
		}
		if s.obj.fqdn {
			f.skip(s.seq, s.where()+": FQDN endpoints are not proxied")
			continue
		}
		key := serviceKey(s.obj.namespace, service)
		groups[key] = append(groups[key], s)
	}
	return groups
}

// serviceKey names an object as "namespace/name", the form Result.Retain
// uses for services.
func serviceKey(namespace, name string) string { return namespace + "/" + name }
