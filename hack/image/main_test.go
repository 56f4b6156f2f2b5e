package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"go.yaml.in/yaml/v3"
)

// TestImage builds tollgate, builds the image around it, reads the archive
// back both as a `docker save` archive and as an OCI image layout, checks
// the config and the files, and runs the binary taken from the layer.
func TestImage(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the image is linux/" + runtime.GOARCH + ": its binary runs only on linux")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the go command is needed to build tollgate: %v", err)
		}
		t.Skipf("install Go (the go command on PATH) to build tollgate: %v", err)
	}
	dir := t.TempDir()
	const version, commit = "9.8.7-test", "0123456789abcdef"
	bin := filepath.Join(dir, "tollgate")
	// The static build make image runs, less -trimpath: the test shares the
	// build cache of make test's other CGO_ENABLED=0 builds instead of
	// compiling every dependency once more; what it checks does not depend
	// on the paths in the binary.
	build := exec.CommandContext(t.Context(), goBin, "build",
		"-ldflags", "-s -w -X main.version="+version+" -X main.commit="+commit,
		"-o", bin, "github.com/tollgate/tollgate/cmd/tollgate")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	build.Stdout, build.Stderr = t.Output(), t.Output()
	if err := build.Run(); err != nil {
		t.Fatalf("go build: %v", err)
	}

	o := options{binary: bin, arch: runtime.GOARCH, repo: defaultRepo, version: version, revision: commit, created: time.Unix(1700000000, 0).UTC()}
	archive := filepath.Join(dir, "out", "image.tar")
	if err := run(o, archive); err != nil {
		t.Fatal(err)
	}

	// The docker-save view: the tag, and a valid image.
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(archive) })
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || !slices.Equal(m[0].RepoTags, []string{defaultRepo + ":" + version}) {
		t.Fatalf("manifest.json = %+v, want one image tagged %s:%s", m, defaultRepo, version)
	}
	dockerImg, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		t.Fatal(err)
	}

	// The OCI view of the same blobs.
	oci := filepath.Join(dir, "oci")
	untar(t, archive, oci)
	idx, err := layout.ImageIndexFromPath(oci)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("index.json lists %d manifests, want 1", len(im.Manifests))
	}
	if got := im.Manifests[0].Annotations["org.opencontainers.image.ref.name"]; got != version {
		t.Errorf("index.json ref.name = %q, want %q", got, version)
	}
	img, err := idx.Image(im.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	checkBlobs(t, oci, img)
	// The docker view names the same config and layer blobs, which
	// checkBlobs has just checked against their digests.
	if c1, c2 := configName(t, img), configName(t, dockerImg); c1 != c2 {
		t.Errorf("the OCI layout and the docker archive name different configs: %s, %s", c1, c2)
	}
	if l1, l2 := layerDigests(t, img), layerDigests(t, dockerImg); !slices.Equal(l1, l2) {
		t.Errorf("the OCI layout and the docker archive name different layers: %v, %v", l1, l2)
	}
	if mt, err := img.MediaType(); err != nil || mt != "application/vnd.oci.image.manifest.v1+json" {
		t.Errorf("manifest media type %q (%v), want OCI's", mt, err)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if !slices.Equal(c.Entrypoint, []string{"/tollgate"}) || !slices.Equal(c.Cmd, []string{"serve"}) {
		t.Errorf("entrypoint %q, cmd %q; want [/tollgate] [serve]", c.Entrypoint, c.Cmd)
	}
	if c.User != "65532:65532" || c.WorkingDir != "/home/nonroot" {
		t.Errorf("user %q, working dir %q; want 65532:65532, /home/nonroot", c.User, c.WorkingDir)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  version,
		"org.opencontainers.image.revision": commit,
		"org.opencontainers.image.title":    "tollgate",
		"org.opencontainers.image.source":   sourceURL,
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}

	// The layer holds exactly the binary, the user and its directories:
	// no shell, nothing else.
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	files, diffID := layerFiles(t, layers[0])
	if want := cf.RootFS.DiffIDs; len(want) != 1 || diffID != want[0] {
		t.Errorf("the layer's content has digest %s, the config's diff_ids are %v", diffID, want)
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	if want := []string{"etc/", "etc/group", "etc/passwd", "home/", "home/nonroot/", "tmp/", "tollgate"}; !slices.Equal(names, want) {
		t.Errorf("layer files %q, want %q", names, want)
	}
	if h := files["home/nonroot/"].hdr; h.Uid != 65532 || h.Gid != 65532 {
		t.Errorf("home/nonroot owned by %d:%d, want 65532:65532", h.Uid, h.Gid)
	}
	if h := files["tollgate"].hdr; h.Mode != 0o755 || h.Uid != 0 {
		t.Errorf("tollgate mode %o uid %d, want 755 root's", h.Mode, h.Uid)
	}
	if p := string(files["etc/passwd"].body); !strings.Contains(p, "\nnonroot:x:65532:65532:") {
		t.Errorf("etc/passwd lacks the nonroot user:\n%s", p)
	}

	extracted := filepath.Join(dir, "extracted")
	if err := os.WriteFile(extracted, files["tollgate"].body, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.CommandContext(t.Context(), extracted, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("tollgate --version: %v\n%s", err, out)
	}
	want := regexp.MustCompile(`^tollgate ` + regexp.QuoteMeta(version) + `\ncommit: ` + commit + `\ngo: +go[0-9][^ ]* linux/` + runtime.GOARCH + `\n$`)
	if !want.Match(out) {
		t.Errorf("tollgate --version printed %q, want %s", out, want)
	}
}

// TestImage_Reproducible builds the image of one small file twice: the
// same input and options give the same bytes.
func TestImage_Reproducible(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("not really tollgate"), 0o600); err != nil {
		t.Fatal(err)
	}
	o := options{binary: bin, arch: "arm64", repo: defaultRepo, version: "1.0.0", created: time.Unix(1700000000, 0).UTC()}
	var archives [][]byte
	for _, name := range []string{"a.tar", "b.tar"} {
		if err := run(o, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
		archives = append(archives, readFile(t, filepath.Join(dir, name)))
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Error("two builds of the same binary and options differ: the archive is not reproducible")
	}
}

// TestDefaults_MatchChartAndDockerfile holds the defaults of this program,
// the chart and the Dockerfile together: the repository and user the chart
// deploys, and the version the Dockerfile labels with (the chart's
// appVersion, its default tag; the Makefile reads it from Chart.yaml).
func TestDefaults_MatchChartAndDockerfile(t *testing.T) {
	var chart struct {
		AppVersion string `yaml:"appVersion"`
	}
	var values struct {
		Image struct {
			Repository string `yaml:"repository"`
			Tag        string `yaml:"tag"`
		} `yaml:"image"`
		PodSecurityContext struct {
			RunAsUser  int `yaml:"runAsUser"`
			RunAsGroup int `yaml:"runAsGroup"`
		} `yaml:"podSecurityContext"`
	}
	decodeYAML(t, "../../charts/tollgate/Chart.yaml", &chart)
	decodeYAML(t, "../../charts/tollgate/values.yaml", &values)
	if values.Image.Repository != defaultRepo {
		t.Errorf("the chart deploys %s, the image program tags %s", values.Image.Repository, defaultRepo)
	}
	if values.Image.Tag != "" {
		t.Errorf("the chart's image.tag is %q: it should default to appVersion, the version make image tags", values.Image.Tag)
	}
	if values.PodSecurityContext.RunAsUser != uid || values.PodSecurityContext.RunAsGroup != gid {
		t.Errorf("the chart runs as %d:%d, the image's user is %d:%d", values.PodSecurityContext.RunAsUser, values.PodSecurityContext.RunAsGroup, uid, gid)
	}

	dockerfile := string(readFile(t, "../../Dockerfile"))
	for _, line := range []string{
		"ARG VERSION=" + chart.AppVersion,
		"COPY --from=build /out/tollgate " + binaryPath,
		"USER 65532:65532",
		"WORKDIR " + homeDir,
		`ENTRYPOINT ["` + binaryPath + `"]`,
		`CMD ["serve"]`,
		"FROM gcr.io/distroless/static-debian12:nonroot",
	} {
		if !slices.Contains(strings.Split(dockerfile, "\n"), line) {
			t.Errorf("Dockerfile lacks the line %q", line)
		}
	}
}

type file struct {
	hdr  *tar.Header
	body []byte
}

// checkBlobs checks every blob of an OCI layout against its digest, and
// the descriptors of img's manifest against the blobs.
func checkBlobs(t *testing.T, dir string, img v1.Image) {
	t.Helper()
	blobs, err := filepath.Glob(filepath.Join(dir, "blobs", "sha256", "*"))
	if err != nil {
		t.Fatal(err)
	}
	sizes := map[v1.Hash]int64{}
	for _, p := range blobs {
		h, n, err := v1.SHA256(bytes.NewReader(readFile(t, p)))
		if err != nil {
			t.Fatal(err)
		}
		if h.Hex != filepath.Base(p) {
			t.Errorf("blob %s has digest %s", filepath.Base(p), h)
		}
		sizes[h] = n
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		if n, ok := sizes[d.Digest]; !ok || n != d.Size {
			t.Errorf("manifest names %s (%d bytes); the blob is there: %t, %d bytes", d.Digest, d.Size, ok, n)
		}
	}
	if len(blobs) != 2+len(m.Layers) {
		t.Errorf("%d blobs, want the manifest, the config and %d layers", len(blobs), len(m.Layers))
	}
}

// layerFiles reads every entry of a layer, and the digest of its
// uncompressed content.
func layerFiles(t *testing.T, l v1.Layer) (map[string]file, v1.Hash) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	sum := sha256.New()
	files := map[string]file{}
	tr := tar.NewReader(io.TeeReader(rc, sum))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			if _, err := io.Copy(sum, rc); err != nil { // the padding after the end marker
				t.Fatal(err)
			}
			return files, v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum.Sum(nil))}
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = file{h, body}
	}
}

// untar extracts the archive's regular files and directories into dir.
func untar(t *testing.T, archive, dir string) {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = root.MkdirAll(h.Name, 0o755)
		case tar.TypeReg:
			var w *os.File
			if w, err = root.Create(h.Name); err == nil {
				_, err = io.Copy(w, tr)
				if cerr := w.Close(); err == nil {
					err = cerr
				}
			}
		default:
			t.Fatalf("archive entry %s of type %c", h.Name, h.Typeflag)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func layerDigests(t *testing.T, img v1.Image) []v1.Hash {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var out []v1.Hash
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, d)
	}
	return out
}

func configName(t *testing.T, img v1.Image) v1.Hash {
	t.Helper()
	h, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func decodeYAML(t *testing.T, path string, v any) {
	t.Helper()
	if err := yaml.Unmarshal(readFile(t, path), v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
