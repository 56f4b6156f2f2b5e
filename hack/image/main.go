// Command image builds tollgate's container image without a container
// daemon or a registry: one layer holding the static tollgate binary and the
// passwd and group entries of the non-root user it runs as, on an empty base.
// It writes the image as one tar archive that is both an OCI image layout
// (index.json, blobs/) and a `docker save` archive (manifest.json), so
// `docker load`, `kind load image-archive`, `crane push` and
// `skopeo copy oci-archive:` or `docker-archive:` all read it.
//
// `make image` builds the binary and runs this program; the Dockerfile builds
// the same image with Docker. See docs/image.md.
//
//	go run ./hack/image -binary bin/linux-amd64/tollgate -version 0.1.0 -o bin/tollgate-image.tar
package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The image's layout and defaults. The Dockerfile builds the same: the
// image test holds the two together.
const (
	// defaultRepo is the repository the Helm chart deploys
	// (charts/tollgate/values.yaml image.repository).
	defaultRepo = "ghcr.io/tollgate/tollgate"
	// binaryPath is where the binary lies in the image: the entrypoint.
	binaryPath = "/tollgate"
	// uid and gid are the non-root user the image runs as, distroless's
	// "nonroot" and the chart's runAsUser.
	uid, gid = 65532, 65532
	// homeDir is the user's home and the working directory.
	homeDir = "/home/nonroot"
	// caPath is where the optional CA bundle goes (Go's crypto/x509 reads it).
	caPath = "/etc/ssl/certs/ca-certificates.crt"
	// sourceURL is the org.opencontainers.image.source label.
	sourceURL = "https://github.com/tollgate/tollgate"
)

// passwd and group name root and the non-root user, so that tools that map
// ids to names (ps, id, the Go os/user package) find them. No shell exists:
// the login shell is a path that is not there.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

// options describe one image.
type options struct {
	binary   string    // the static tollgate binary, built for linux/arch
	arch     string    // GOARCH the binary is built for
	repo     string    // repository of the tag the archive carries
	version  string    // tollgate's version: the tag and the version label
	revision string    // source commit, the revision label
	caCerts  string    // optional CA bundle to add at caPath
	created  time.Time // creation time of the image and of every file in it
}

func main() {
	var o options
	var out string
	flag.StringVar(&o.binary, "binary", "", "the static tollgate binary (CGO_ENABLED=0, GOOS=linux)")
	flag.StringVar(&o.arch, "arch", "amd64", "GOARCH the binary was built for")
	flag.StringVar(&o.repo, "repo", defaultRepo, "image repository; the tag is the version")
	flag.StringVar(&o.version, "version", "", "tollgate version: the image tag and its org.opencontainers.image.version label")
	flag.StringVar(&o.revision, "revision", "", "source commit, the org.opencontainers.image.revision label")
	flag.StringVar(&o.caCerts, "ca-certs", "", "CA bundle to add at "+caPath+" (none by default: tollgate needs it only for https engine-metrics URLs with publicly signed certificates)")
	flag.StringVar(&out, "o", "bin/tollgate-image.tar", "output archive")
	created := flag.Int64("created", sourceDateEpoch(), "creation time in Unix seconds (default: $SOURCE_DATE_EPOCH, else 0), for reproducible digests")
	flag.Parse()
	o.created = time.Unix(*created, 0).UTC()
	if err := run(o, out); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// sourceDateEpoch returns $SOURCE_DATE_EPOCH, or 0.
func sourceDateEpoch() int64 {
	n, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

func run(o options, out string) error {
	if o.binary == "" || o.version == "" {
		return errors.New("-binary and -version are required")
	}
	tag, err := name.NewTag(o.repo+":"+o.version, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image tag: %w", err)
	}
	img, err := buildImage(o)
	if err != nil {
		return err
	}
	if err := writeArchive(out, tag, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	st, err := os.Stat(out)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s (linux/%s) %s, %.1f MiB\n", out, tag, o.arch, digest, float64(st.Size())/(1<<20))
	return nil
}

// buildImage returns the image: one layer on an empty base, OCI media
// types, the config that runs the binary as the non-root user.
func buildImage(o options) (v1.Image, error) {
	bin, err := os.ReadFile(o.binary)
	if err != nil {
		return nil, err
	}
	var ca []byte
	if o.caCerts != "" {
		if ca, err = os.ReadFile(o.caCerts); err != nil {
			return nil, err
		}
	}
	files, err := layerTar(bin, ca, o.created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(files)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
	if err != nil {
		return nil, err
	}

	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if ca != nil {
		env = append(env, "SSL_CERT_FILE="+caPath)
	}
	cfg := &v1.ConfigFile{
		Architecture: o.arch,
		OS:           "linux",
		Created:      v1.Time{Time: o.created},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Entrypoint: []string{binaryPath},
			// The chart's container args (serve and its flags) replace Cmd.
			Cmd:        []string{"serve"},
			User:       strconv.Itoa(uid) + ":" + strconv.Itoa(gid),
			WorkingDir: homeDir,
			Env:        env,
			Labels:     labels(o),
		},
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	return mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History: v1.History{
			Created:   v1.Time{Time: o.created},
			CreatedBy: "hack/image: " + binaryPath + ", /etc/passwd, /etc/group",
			Comment:   "tollgate " + o.version,
		},
	})
}

// labels are the image's OCI annotations (the repository has no license
// file, so no licenses label).
func labels(o options) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":       "tollgate",
		"org.opencontainers.image.description": "Envoy ext_proc admission scheduler for LLM inference",
		"org.opencontainers.image.version":     o.version,
		"org.opencontainers.image.source":      sourceURL,
		"org.opencontainers.image.created":     o.created.Format(time.RFC3339),
	}
	if o.revision != "" {
		l["org.opencontainers.image.revision"] = o.revision
	}
	return l
}

// layerTar returns the layer's files as an uncompressed tar: the binary, the
// user's passwd and group entries, its home, /tmp and, when given, the CA
// bundle. Every file is root's, read-only but for the home and /tmp.
func layerTar(bin, ca []byte, mtime time.Time) ([]byte, error) {
	type entry struct {
		name     string
		mode     int64
		uid, gid int
		body     []byte
		dir      bool
	}
	entries := []entry{
		{name: "etc/", mode: 0o755, dir: true},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
	}
	if ca != nil {
		entries = append(entries,
			entry{name: "etc/ssl/", mode: 0o755, dir: true},
			entry{name: "etc/ssl/certs/", mode: 0o755, dir: true},
			entry{name: caPath[1:], mode: 0o644, body: ca})
	}
	entries = append(entries,
		entry{name: "home/", mode: 0o755, dir: true},
		entry{name: homeDir[1:] + "/", mode: 0o700, uid: uid, gid: gid, dir: true},
		entry{name: "tmp/", mode: 0o1777, dir: true},
		entry{name: binaryPath[1:], mode: 0o755, body: bin})

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, Uid: e.uid, Gid: e.gid, ModTime: mtime, Format: tar.FormatPAX}
		if e.dir {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeArchive writes img, tagged tag, to path as a tar that holds an OCI
// image layout (oci-layout, index.json, blobs/sha256/) and the manifest.json
// of a `docker save` archive, whose paths point at the same blobs: the
// format `docker save` writes since Docker 25.
func writeArchive(path string, tag name.Tag, img v1.Image) (err error) {
	rawManifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	manifestDigest, err := img.Digest()
	if err != nil {
		return err
	}
	mediaType, err := img.MediaType()
	if err != nil {
		return err
	}
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	configDigest, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	index, err := json.Marshal(v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: mediaType,
			Digest:    manifestDigest,
			Size:      int64(len(rawManifest)),
			Annotations: map[string]string{
				"io.containerd.image.name":          tag.Name(),
				"org.opencontainers.image.ref.name": tag.TagStr(),
			},
		}},
	})
	if err != nil {
		return err
	}
	docker := tarball.Descriptor{Config: blobPath(configDigest), RepoTags: []string{tag.String()}}
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		docker.Layers = append(docker.Layers, blobPath(d))
	}
	dockerManifest, err := json.Marshal(tarball.Manifest{docker})
	if err != nil {
		return err
	}

	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".image-*.tar")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	put := func(name string, size int64, r io.Reader) error {
		h := &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: cf.Created.Time, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
		if r == nil {
			h.Mode, h.Typeflag = 0o755, tar.TypeDir
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if r == nil {
			return nil
		}
		n, err := io.Copy(tw, r)
		if err == nil && n != size {
			err = fmt.Errorf("%s: wrote %d bytes, want %d", name, n, size)
		}
		return err
	}
	putBytes := func(name string, b []byte) error { return put(name, int64(len(b)), bytes.NewReader(b)) }

	if err := putBytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := put("blobs/", 0, nil); err != nil {
		return err
	}
	if err := put("blobs/sha256/", 0, nil); err != nil {
		return err
	}
	if err := putBytes(blobPath(configDigest), rawConfig); err != nil {
		return err
	}
	for _, l := range layers {
		if err := putLayer(put, l); err != nil {
			return err
		}
	}
	if err := putBytes(blobPath(manifestDigest), rawManifest); err != nil {
		return err
	}
	if err := putBytes("index.json", index); err != nil {
		return err
	}
	if err := putBytes("manifest.json", dockerManifest); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// putLayer writes a layer's compressed blob.
func putLayer(put func(string, int64, io.Reader) error, l v1.Layer) error {
	d, err := l.Digest()
	if err != nil {
		return err
	}
	size, err := l.Size()
	if err != nil {
		return err
	}
	rc, err := l.Compressed()
	if err != nil {
		return err
	}
	err = put(blobPath(d), size, rc)
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	return err
}

// blobPath is a blob's path in an OCI image layout.
func blobPath(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
