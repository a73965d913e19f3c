// Command kproxy-image builds kproxy's Linux container image without a
// container daemon: an OCI image layout, tarred (skopeo's oci-archive), on
// an empty base. Two layers: the tools root stage-tools.sh staged (nft,
// iptables-nft and the libraries they load) and the static kproxy binary at
// /usr/local/bin/kproxy, the entrypoint. `make image` runs both.
//
// It is a build tool of its own so the node agent links none of
// go-containerregistry (TestNodeAgentLinksNoBenchmark).
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// entrypoint is where the kproxy binary lives in the image (as in the
// Dockerfile).
const entrypoint = "/usr/local/bin/kproxy"

func main() {
	tools := flag.String("tools", "", "root directory staged by stage-tools.sh (nft, iptables and their libraries)")
	bin := flag.String("kproxy", "", "the static kproxy binary (CGO_ENABLED=0) for linux/amd64")
	version := flag.String("version", "dev", "kproxy's version: the image's tag and its org.opencontainers.image.version label")
	out := flag.String("out", "bin/kproxy-image.oci.tar", "the OCI archive to write (an OCI image layout, tarred)")
	flag.Parse()
	if *tools == "" || *bin == "" {
		log.Fatal("kproxy-image: -tools and -kproxy are required")
	}
	if err := build(*tools, *bin, *version, *out); err != nil {
		log.Fatalf("kproxy-image: %v", err)
	}
}

func build(tools, bin, version, out string) error {
	toolsLayer, err := dirLayer(tools)
	if err != nil {
		return fmt.Errorf("tools layer from %s: %w", tools, err)
	}
	kproxyLayer, err := fileLayer(bin, entrypoint)
	if err != nil {
		return fmt.Errorf("kproxy layer from %s: %w", bin, err)
	}
	img, err := mutate.AppendLayers(empty.Image, toolsLayer, kproxyLayer)
	if err != nil {
		return fmt.Errorf("append layers: %w", err)
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = []string{entrypoint}
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "kproxy",
		"org.opencontainers.image.version": version,
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return fmt.Errorf("config: %w", err)
	}

	dir, err := os.MkdirTemp(filepath.Dir(out), ".kproxy-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("OCI layout in %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": version,
	})); err != nil {
		return fmt.Errorf("write image to the layout: %w", err)
	}
	if err := tarDir(dir, out); err != nil {
		return fmt.Errorf("archive %s: %w", out, err)
	}
	digest, _ := img.Digest()
	fmt.Printf("wrote %s (oci-archive:%s:%s, %s)\n", out, out, version, digest)
	return nil
}
