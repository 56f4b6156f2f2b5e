package charttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/cli"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/tollgate/tollgate/envoy"
	"github.com/tollgate/tollgate/extproc/discovery/kube"
	"github.com/tollgate/tollgate/extproc/election"
	"github.com/tollgate/tollgate/test/apiserver"
	"github.com/tollgate/tollgate/test/testbin"
)

// The tests in this file run against a real kube-apiserver and etcd
// (test/apiserver), shared by the package's tests: Helm installs the chart
// with server-side validation of every object, and the tollgate binary runs
// with the chart's ServiceAccount, Role and RoleBinding through a token of
// that ServiceAccount.

var realAPI struct {
	once    sync.Once
	c       *apiserver.Cluster
	err     error
	log     string
	binDir  string
	binOnce sync.Once
	bin     string
	binErr  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if realAPI.c != nil {
		realAPI.c.Stop()
	}
	if realAPI.log != "" && code == 0 {
		_ = os.Remove(realAPI.log)
	}
	if realAPI.binDir != "" {
		_ = os.RemoveAll(realAPI.binDir)
	}
	os.Exit(code)
}

// cluster returns the package's API server, started on first use with
// every CRD the chart's objects need.
func cluster(t *testing.T) *apiserver.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a kube-apiserver")
	}
	apiserverBin, etcdBin := apiserver.Binaries()
	testbin.File(t, apiserverBin, apiserver.Install)
	testbin.File(t, etcdBin, apiserver.Install)
	crds := crdFiles(t)
	realAPI.once.Do(func() {
		f, err := os.CreateTemp("", "tollgate-apiserver-*.log")
		if err != nil {
			realAPI.err = err
			return
		}
		defer f.Close()
		realAPI.log = f.Name()
		if realAPI.c, realAPI.err = apiserver.Start(f, 2*time.Minute); realAPI.err == nil {
			realAPI.err = installCRDs(realAPI.c, crds)
		}
	})
	if realAPI.err != nil {
		t.Fatalf("%v (API server log: %s)", realAPI.err, realAPI.log)
	}
	return realAPI.c
}

// crdFiles lists the CRDs the chart's objects need: Istio's and Envoy
// Gateway's from their Go modules, the Prometheus Operator's generated
// from its API types (make kubeapi), and the InferencePool's,
// InferenceObjective's and InferenceModelRewrite's.
func crdFiles(t *testing.T) []string {
	t.Helper()
	modDir := func(mod string) string { // the module at the version go.mod requires
		out, err := exec.Command("go", "mod", "download", "-json", mod).Output()
		var info struct{ Dir string }
		if err != nil || json.Unmarshal(out, &info) != nil || info.Dir == "" {
			t.Fatalf("go mod download %s: %v\n%s", mod, err, out)
		}
		return info.Dir
	}
	eg := filepath.Join(modDir("github.com/envoyproxy/gateway"), "charts/gateway-helm/charts/crds/crds/generated")
	files := []string{
		filepath.Join(modDir("istio.io/api"), "kubernetes/customresourcedefinitions.gen.yaml"),
		filepath.Join(eg, "gateway.envoyproxy.io_envoyextensionpolicies.yaml"),
		filepath.Join(eg, "gateway.envoyproxy.io_backendtrafficpolicies.yaml"),
		filepath.Join(eg, "gateway.envoyproxy.io_clienttrafficpolicies.yaml"),
		"testdata/inferencepool-crd.yaml",
		"testdata/inferenceobjective-crd.yaml",
		"testdata/inferencemodelrewrite-crd.yaml",
	}
	apiserverBin, _ := apiserver.Binaries()
	monitoring := filepath.Join(filepath.Dir(filepath.Dir(apiserverBin)), "crds")
	for _, f := range []string{"monitoring.coreos.com_servicemonitors.yaml", "monitoring.coreos.com_prometheusrules.yaml"} {
		p := filepath.Join(monitoring, f)
		if _, err := os.Stat(p); err != nil {
			testbin.Missing(t, p, apiserver.Install)
		}
		files = append(files, p)
	}
	return files
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func installCRDs(c *apiserver.Cluster, files []string) error {
	dc, err := dynamic.NewForConfig(c.Admin)
	if err != nil {
		return err
	}
	ctx := context.Background()
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		docs, err := envoy.SplitYAML(b)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		for _, doc := range docs {
			var u unstructured.Unstructured
			if err := yaml.Unmarshal(doc, &u.Object); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if u.GetKind() != "CustomResourceDefinition" {
				continue
			}
			if _, err := dc.Resource(crdGVR).Create(ctx, &u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("%s: create CRD %s: %w", f, u.GetName(), err)
			}
			names = append(names, u.GetName())
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, name := range names {
		for {
			u, err := dc.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
			if err == nil && crdEstablished(u) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s not established: %w", name, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

func crdEstablished(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}

// helmInstall installs the chart with doc's values into namespace ns
// through the Helm SDK.
func helmInstall(t *testing.T, c *apiserver.Cluster, ns, doc string) *action.Configuration {
	t.Helper()
	kc, err := c.AdminKubeconfig(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	settings := cli.New()
	settings.KubeConfig = kc
	settings.SetNamespace(ns)
	cfg := new(action.Configuration)
	if err := cfg.Init(settings.RESTClientGetter(), ns, "secret", func(string, ...any) {}); err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName = releaseName
	inst.Namespace = ns
	inst.CreateNamespace = true
	inst.Timeout = time.Minute
	if _, err := inst.RunWithContext(t.Context(), loadChart(t), values(t, doc)); err != nil {
		t.Fatalf("helm install into %s: %v", ns, err)
	}
	return cfg
}

func createNamespace(t *testing.T, c *apiserver.Cluster, name string) {
	t.Helper()
	_, err := c.Client.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// TestRealAPI_HelmInstall installs the chart in every scenario (every
// discovery mode and integration, the ServiceMonitor, PrometheusRule and
// dashboard) so the API server validates every object, CRD schemas
// included.
func TestRealAPI_HelmInstall(t *testing.T) {
	c := cluster(t)
	createNamespace(t, c, "models")       // kubernetesSelector's worker namespace
	createNamespace(t, c, "istio-system") // where the EnvoyFilter goes, with Istio's gateway
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range scenarios {
			if !yield(k) {
				return
			}
		}
	}) {
		t.Run(name, func(t *testing.T) {
			ns := "helm-" + strings.ToLower(name)
			cfg := helmInstall(t, c, ns, scenarios[name])
			r := mustRenderIn(t, ns, values(t, scenarios[name]))
			if _, err := c.Client.AppsV1().Deployments(ns).Get(t.Context(), r.deployments[0].Name, metav1.GetOptions{}); err != nil {
				t.Errorf("Deployment after install: %v", err)
			}
			// The EnvoyFilter lives in the gateway's namespace under the
			// release's name: releases of the same name collide there, so
			// each scenario's release goes before the next.
			if _, err := action.NewUninstall(cfg).Run(releaseName); err != nil {
				t.Errorf("helm uninstall: %v", err)
			}
		})
	}
}

// tollgateBinary builds cmd/tollgate once per test binary, without DWARF,
// which halves its link.
func tollgateBinary(t *testing.T) string {
	t.Helper()
	realAPI.binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "tollgate-bin-")
		if err != nil {
			realAPI.binErr = err
			return
		}
		realAPI.binDir = dir
		realAPI.bin = filepath.Join(dir, "tollgate")
		out, err := exec.Command("go", "build", "-ldflags=-s -w", "-o", realAPI.bin, "../../cmd/tollgate").CombinedOutput()
		if err != nil {
			realAPI.binErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if realAPI.binErr != nil {
		t.Fatal(realAPI.binErr)
	}
	return realAPI.bin
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the
// chart's ServiceAccount with a token from the TokenRequest API.
func serviceAccountKubeconfig(t *testing.T, c *apiserver.Cluster, r *rendered, ns string) string {
	t.Helper()
	if len(r.serviceAccounts) != 1 {
		t.Fatalf("%d ServiceAccounts rendered; want 1", len(r.serviceAccounts))
	}
	exp := int64(3600)
	tok, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), r.serviceAccounts[0].Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for the chart's ServiceAccount: %v", err)
	}
	kc, err := c.Kubeconfig(t.TempDir(), "tollgate", tok.Status.Token)
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// tollgateProc is a running tollgate serve.
type tollgateProc struct {
	pod     string
	metrics string
	// peer is the peer channel's address with replicas, else "".
	peer string
	cmd  *exec.Cmd
	done chan struct{}
	out  *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runTollgate runs tollgate serve as the chart's Deployment would for the
// pod named pod, with the listen addresses, the peer channel's included,
// moved to loopback.
func runTollgate(t *testing.T, r *rendered, ns, pod, kubeconfig string) *tollgateProc {
	t.Helper()
	p := &tollgateProc{pod: pod, metrics: freeLoopback(t), done: make(chan struct{}), out: new(syncBuffer)}
	var args []string
	for _, a := range materialiseAs(t, r, pod, ns) {
		switch {
		case strings.HasPrefix(a, "--grpc-addr="), strings.HasPrefix(a, "--metrics-addr="):
			continue
		case strings.HasPrefix(a, "--peer-addr="):
			p.peer = freeLoopback(t)
			a = "--peer-addr=" + p.peer
		}
		args = append(args, a)
	}
	args = append(args, "--grpc-addr=127.0.0.1:0", "--metrics-addr="+p.metrics, "--kubeconfig="+kubeconfig, "--drain-delay=0s")
	p.cmd = exec.Command(tollgateBinary(t), args...)
	p.cmd.Env = outsideCluster()
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("tollgate %s output:\n%s", pod, p.out.String())
		}
	})
	return p
}

func (p *tollgateProc) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(time.Minute):
		t.Errorf("tollgate %s did not stop within a minute of SIGTERM", p.pod)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// metric returns the value of a series, named with its labels in
// exposition order when it has any, or -1 when absent or unreachable.
func (p *tollgateProc) metric(name string) float64 {
	body := p.scrape()
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err == nil {
				return f
			}
		}
	}
	return -1
}

// objectiveClasses returns the counts of the last "objective classes
// applied" log line, from "objectives" on, or "" before the first.
func (p *tollgateProc) objectiveClasses() string {
	last := ""
	for l := range strings.Lines(p.out.String()) {
		if _, rest, ok := strings.Cut(l, `"msg":"objective classes applied",`); ok {
			last = strings.TrimSuffix(strings.TrimSpace(rest), "}")
		}
	}
	return last
}

var workerLabel = regexp.MustCompile(`^tollgate_worker_active_requests\{[^}]*worker="([^"]*)"`)

// workers returns the distinct worker IDs of the per-rank series.
func (p *tollgateProc) workers() []string {
	var ids []string
	for l := range strings.Lines(p.scrape()) {
		if m := workerLabel.FindStringSubmatch(l); m != nil && !slices.Contains(ids, m[1]) {
			ids = append(ids, m[1])
		}
	}
	slices.Sort(ids)
	return ids
}

// scrapeClient bounds each scrape, so a stalled process cannot hold a poll
// past its ceiling.
var scrapeClient = &http.Client{Timeout: 5 * time.Second}

func (p *tollgateProc) scrape() string {
	resp, err := scrapeClient.Get("http://" + p.metrics + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// eventually polls ok every 100 ms until it holds or limit passes. It
// fails at once when one of procs exits: that process cannot bring the
// awaited state any more.
func eventually(t *testing.T, limit time.Duration, what string, ok func() bool, procs ...*tollgateProc) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		var exited *tollgateProc
		for _, p := range procs {
			select {
			case <-p.done:
				exited = p
			default:
			}
		}
		if exited != nil || time.Now().After(deadline) {
			for _, p := range procs {
				t.Logf("tollgate %s output:\n%s", p.pod, p.out.String())
			}
			if exited != nil {
				t.Fatalf("tollgate %s exited (%v) while waiting for %s", exited.pod, exited.cmd.ProcessState, what)
			}
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// workerPod creates a Running, Ready pod with the given IP and labels.
func workerPod(t *testing.T, c *apiserver.Cluster, ns, name, ip string, annotations map[string]string) *corev1.Pod {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "vllm"}, Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai"}}},
	}
	p, err := c.Client.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if p, err = c.Client.CoreV1().Pods(ns).UpdateStatus(t.Context(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return p
}

// access is one SubjectAccessReview question.
type access struct {
	verb, group, resource, ns, name string
}

// checkAccess asks the API server what the ServiceAccount may do: every
// allowed entry must be allowed and every denied entry denied, so a missing
// or an excess permission in the chart's Role fails.
func checkAccess(t *testing.T, c *apiserver.Cluster, saNS, sa string, allowed, denied []access) {
	t.Helper()
	user := "system:serviceaccount:" + saNS + ":" + sa
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + saNS, "system:authenticated"}
	ask := func(a access) bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: a.verb, Group: a.group, Resource: a.resource, Namespace: a.ns, Name: a.name},
		}}
		res, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(t.Context(), sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res.Status.Allowed
	}
	for _, a := range allowed {
		if !ask(a) {
			t.Errorf("%s may not %+v; the chart's Role must allow it", user, a)
		}
	}
	for _, a := range denied {
		if ask(a) {
			t.Errorf("%s may %+v; the chart's Role grants more than tollgate needs", user, a)
		}
	}
}

// TestRealAPI_EndpointSliceDiscovery runs tollgate with the chart's
// kubernetes discovery and RBAC against real EndpointSlices and Pods: it
// sees the ready endpoints, follows a watch event that marks one not ready
// and a pod annotation change, and its ServiceAccount may do exactly what
// discovery needs.
func TestRealAPI_EndpointSliceDiscovery(t *testing.T) {
	c := cluster(t)
	const ns = "discovery"
	doc := scenarios["kubernetesService"]
	helmInstall(t, c, ns, doc)
	r := mustRenderIn(t, ns, values(t, doc))
	ctx := t.Context()

	pods := []*corev1.Pod{
		workerPod(t, c, ns, "vllm-0", "10.1.0.10", nil),
		workerPod(t, c, ns, "vllm-1", "10.1.0.11", nil),
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "vllm", Namespace: ns},
		Spec:       corev1.ServiceSpec{Selector: map[string]string{"app": "vllm"}, Ports: []corev1.ServicePort{{Name: "http", Port: 8000}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "vllm-x7k2p", Namespace: ns, Labels: map[string]string{discoveryv1.LabelServiceName: "vllm"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: new("http"), Port: new(int32(8000))}},
	}
	for _, p := range pods {
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{p.Status.PodIP},
			Conditions: discoveryv1.EndpointConditions{Ready: new(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name, UID: p.UID},
		})
	}
	slice, err := c.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	p := runTollgate(t, r, ns, "tollgate-6c9f7-abcde", serviceAccountKubeconfig(t, c, r, ns))
	eventually(t, 30*time.Second, "both endpoints as workers", func() bool { return p.metric("tollgate_workers") == 2 }, p)
	if ws := p.workers(); len(ws) != 2 || !strings.Contains(strings.Join(ws, " "), "10.1.0.10") && !strings.Contains(strings.Join(ws, " "), "vllm-0") {
		t.Errorf("workers %v; want the two endpoints", ws)
	}
	capacity := p.metric("tollgate_scheduler_capacity")

	// A pod annotation lowers the capacity of vllm-0: the pod watch
	// delivers it.
	pod0, err := c.Client.CoreV1().Pods(ns).Get(ctx, "vllm-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod0.Annotations = map[string]string{kube.AnnotationMaxRunningRequests: "16"}
	if _, err := c.Client.CoreV1().Pods(ns).Update(ctx, pod0, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, fmt.Sprintf("the capacity to change from %v after the annotation", capacity), func() bool {
		v := p.metric("tollgate_scheduler_capacity")
		return v > 0 && v < capacity
	}, p)

	// The EndpointSlice controller marks vllm-1 not ready: an update with
	// a new resourceVersion, through the watch.
	slice.Endpoints[1].Conditions.Ready = new(false)
	if _, err := c.Client.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "one worker after vllm-1 went not ready", func() bool { return p.metric("tollgate_workers") == 1 }, p)

	sa := r.serviceAccounts[0].Name
	const (
		disc = "discovery.k8s.io"
		core = ""
	)
	checkAccess(t, c, ns, sa,
		[]access{
			{"list", disc, "endpointslices", ns, ""}, {"watch", disc, "endpointslices", ns, ""},
			{"list", core, "pods", ns, ""}, {"watch", core, "pods", ns, ""},
		},
		[]access{
			{"get", disc, "endpointslices", ns, "vllm-x7k2p"}, {"update", disc, "endpointslices", ns, "vllm-x7k2p"},
			{"list", disc, "endpointslices", "default", ""}, {"list", disc, "endpointslices", "", ""},
			{"list", core, "pods", "", ""}, {"get", core, "pods", ns, "vllm-0"}, {"create", core, "pods", ns, ""},
			{"list", core, "secrets", ns, ""}, {"get", core, "secrets", ns, "x"}, {"list", core, "services", ns, ""},
			{"create", "coordination.k8s.io", "leases", ns, ""}, // no leader election with one replica
		})
}

// TestRealAPI_InferencePoolDiscovery runs tollgate with the chart's
// inferencepool discovery, leader election and RBAC against installed
// InferencePool, InferenceObjective and InferenceModelRewrite CRDs: the
// pool's selector picks its pods, a deleted pod leaves the worker set, the
// pool's InferenceObjectives map onto classes and follow updates (the
// chart's --objective-class winning), its InferenceModelRewrites become the
// rewrite table and follow a delete, and the Role is limited to what that
// needs.
func TestRealAPI_InferencePoolDiscovery(t *testing.T) {
	c := cluster(t)
	const ns = "pool"
	doc := scenarios["inferencePool"]
	helmInstall(t, c, ns, doc)
	r := mustRenderIn(t, ns, values(t, doc))
	ctx := t.Context()

	dc, err := dynamic.NewForConfig(c.Admin)
	if err != nil {
		t.Fatal(err)
	}
	var pool unstructured.Unstructured
	if err := yaml.Unmarshal([]byte(`
apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata: {name: vllm-llama}
spec:
  selector: {matchLabels: {app: vllm}}
  targetPorts: [{number: 8000}]
  endpointPickerRef: {name: tollgate, port: {number: 9002}, failureMode: FailClose}
`), &pool.Object); err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Resource(kube.InferencePoolGVR).Namespace(ns).Create(ctx, &pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	workerPod(t, c, ns, "vllm-llama-0", "10.2.0.10", nil)
	workerPod(t, c, ns, "vllm-llama-1", "10.2.0.11", map[string]string{kube.AnnotationDPSize: "2"})
	// The scenario's values map "pinned" to system with --objective-class.
	objectives := dc.Resource(kube.InferenceObjectiveGVR).Namespace(ns)
	for _, doc := range []string{
		`{metadata: {name: chat}, spec: {poolRef: {name: vllm-llama}, priority: 10}}`,
		`{metadata: {name: batch}, spec: {poolRef: {name: vllm-llama}, priority: -1}}`,
		`{metadata: {name: plain}, spec: {poolRef: {name: vllm-llama}}}`,
		`{metadata: {name: pinned}, spec: {poolRef: {name: vllm-llama}, priority: -5}}`,
		`{metadata: {name: elsewhere}, spec: {poolRef: {name: other-pool}, priority: 3}}`,
	} {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		u.SetAPIVersion("inference.networking.x-k8s.io/v1alpha2")
		u.SetKind("InferenceObjective")
		if _, err := objectives.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rewrites := dc.Resource(kube.InferenceModelRewriteGVR).Namespace(ns)
	for _, doc := range []string{
		`{metadata: {name: alias}, spec: {poolRef: {name: vllm-llama}, rules: [{matches: [{model: {value: llama}}, {model: {value: llama-latest}}], targets: [{modelRewrite: llama-3-8b, weight: 9}, {modelRewrite: llama-3-70b, weight: 1}]}]}}`,
		`{metadata: {name: fallback}, spec: {poolRef: {name: vllm-llama}, rules: [{targets: [{modelRewrite: llama-3-8b}]}]}}`,
		`{metadata: {name: elsewhere}, spec: {poolRef: {name: other-pool}, rules: [{matches: [{model: {value: other-model}}], targets: [{modelRewrite: other-target}]}]}}`,
	} {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		u.SetAPIVersion("inference.networking.x-k8s.io/v1alpha2")
		u.SetKind("InferenceModelRewrite")
		if _, err := rewrites.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	p := runTollgate(t, r, ns, "tollgate-7d8e9-fghij", serviceAccountKubeconfig(t, c, r, ns))
	eventually(t, 45*time.Second, "the pool's two pods as workers, as leader", func() bool {
		return p.metric("tollgate_workers") == 2 && p.metric("tollgate_leader") == 1
	}, p)
	eventually(t, 30*time.Second, "chat, batch and plain from objects, pinned from the flag", func() bool {
		return p.objectiveClasses() == `"objectives":4,"from_flags":1,"system":1,"interactive":1,"default":1,"bulk":1`
	}, p)
	if !strings.Contains(p.out.String(), `spec.priority -5 (class bulk) ignored: --objective-class maps pinned to system`) {
		t.Errorf("the shadowed object is not logged:\n%s", p.out.String())
	}
	batch, err := objectives.Get(ctx, "batch", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(batch.Object, int64(2), "spec", "priority"); err != nil {
		t.Fatal(err)
	}
	if _, err := objectives.Update(ctx, batch, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := objectives.Delete(ctx, "plain", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "batch interactive after its update, plain gone", func() bool {
		return p.objectiveClasses() == `"objectives":3,"from_flags":1,"system":1,"interactive":2,"default":0,"bulk":0`
	}, p)
	for series, want := range map[string]float64{
		`tollgate_objectives{class="interactive",source="inferenceobjective"}`: 2,
		`tollgate_objectives{class="system",source="flag"}`:                    1,
		`tollgate_objectives{class="bulk",source="inferenceobjective"}`:        0,
	} {
		if got := p.metric(series); got != want {
			t.Errorf("%s = %v, want %v", series, got, want)
		}
	}

	const exactRewrites, anyRewrite = `tollgate_model_rewrites{match="exact",source="inferencemodelrewrite"}`, `tollgate_model_rewrites{match="any",source="inferencemodelrewrite"}`
	eventually(t, 30*time.Second, "two names and the rule for any other name from the pool's rewrites", func() bool {
		return p.metric(exactRewrites) == 2 && p.metric(anyRewrite) == 1
	}, p)
	if err := rewrites.Delete(ctx, "fallback", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "no rule for any other name once its object is deleted", func() bool {
		return p.metric(exactRewrites) == 2 && p.metric(anyRewrite) == 0
	}, p)

	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "vllm-llama-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "one worker after the pod was deleted", func() bool { return p.metric("tollgate_workers") == 1 }, p)

	const (
		inf  = "inference.networking.k8s.io"
		infx = "inference.networking.x-k8s.io"
	)
	checkAccess(t, c, ns, r.serviceAccounts[0].Name,
		[]access{
			{"list", inf, "inferencepools", ns, "vllm-llama"}, {"watch", inf, "inferencepools", ns, "vllm-llama"},
			{"list", infx, "inferenceobjectives", ns, ""}, {"watch", infx, "inferenceobjectives", ns, ""},
			{"list", infx, "inferencemodelrewrites", ns, ""}, {"watch", infx, "inferencemodelrewrites", ns, ""},
			{"list", "", "pods", ns, ""}, {"watch", "", "pods", ns, ""},
		},
		[]access{
			{"list", inf, "inferencepools", ns, ""}, {"list", inf, "inferencepools", ns, "other-pool"},
			{"update", inf, "inferencepools", ns, "vllm-llama"}, {"get", inf, "inferencepools", ns, "vllm-llama"},
			{"get", infx, "inferenceobjectives", ns, "chat"}, {"update", infx, "inferenceobjectives", ns, "chat"},
			{"create", infx, "inferenceobjectives", ns, ""}, {"list", infx, "inferenceobjectives", "default", ""},
			{"list", infx, "inferenceobjectives", "", ""},
			{"get", infx, "inferencemodelrewrites", ns, "alias"}, {"update", infx, "inferencemodelrewrites", ns, "alias"},
			{"create", infx, "inferencemodelrewrites", ns, ""}, {"list", infx, "inferencemodelrewrites", "default", ""},
			{"list", "discovery.k8s.io", "endpointslices", ns, ""}, {"list", "", "secrets", ns, ""},
		})
}

// TestRealAPI_LeaderElection runs two tollgate replicas with the chart's
// leader election arguments and Role against a real Lease: exactly one is
// the scheduler and holds the Lease, which names it and its peer address;
// the other reaches it over the peer channel; when the scheduler stops, it
// releases the Lease and the other replica takes over.
func TestRealAPI_LeaderElection(t *testing.T) {
	c := cluster(t)
	const ns = "leader"
	doc := scenarios["leaderElection"]
	helmInstall(t, c, ns, doc)
	r := mustRenderIn(t, ns, values(t, doc))
	ctx := t.Context()
	kc := serviceAccountKubeconfig(t, c, r, ns)

	a := runTollgate(t, r, ns, "tollgate-5d4f8-aaaaa", kc)
	b := runTollgate(t, r, ns, "tollgate-5d4f8-bbbbb", kc)
	// The ceilings are generous multiples of the scenario's own periods
	// (leaseDuration 20s, retryPeriod 3s); each wait ends as soon as its
	// signal shows, or at once when a process exits.
	const ceiling = 2 * time.Minute
	eventually(t, ceiling, "both replicas to serve metrics", func() bool {
		return a.metric("tollgate_leader") >= 0 && b.metric("tollgate_leader") >= 0
	}, a, b)
	// The Lease's holder, as the API server has it, must schedule, and the
	// other replica follow it over the peer channel. Both are read on every
	// poll: on a loaded machine the first leader may miss its renew
	// deadline and hand over.
	var leader, standby *tollgateProc
	var ll, ls, linked float64 // last tollgate_leader of both, and the follower's tollgate_peer_linked
	defer func() {
		if t.Failed() && leader != nil {
			t.Logf("last tollgate_leader: %s %v, %s %v; %s linked %v", leader.pod, ll, standby.pod, ls, standby.pod, linked)
		}
	}()
	eventually(t, ceiling, "the Lease holder to schedule and the other replica to link to it", func() bool {
		l, err := c.Client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(l.Items) != 1 || l.Items[0].Spec.HolderIdentity == nil {
			return false
		}
		switch leaseHolder(t, &l.Items[0]).Identity {
		case a.pod:
			leader, standby = a, b
		case b.pod:
			leader, standby = b, a
		default:
			return false
		}
		ll, ls = leader.metric("tollgate_leader"), standby.metric("tollgate_leader")
		linked = standby.metric("tollgate_peer_linked")
		return ll == 1 && ls == 0 && linked == 1 &&
			standby.metric(`tollgate_peer_scheduler{identity="`+leader.pod+`"}`) == 1
	}, a, b)

	leases, err := c.Client.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(leases.Items) != 1 || leases.Items[0].Spec.HolderIdentity == nil {
		t.Fatalf("Leases %+v; want one held", leases.Items)
	}
	if got, want := leaseHolder(t, &leases.Items[0]), (election.Record{Identity: leader.pod, PeerAddr: leader.peer}); got != want {
		t.Fatalf("Lease holder %+v; want %+v, the scheduler and its peer address", got, want)
	}
	if v := leader.metric("tollgate_peer_fronts"); v != 1 {
		t.Errorf("tollgate_peer_fronts = %v on the scheduler; want 1, the other replica", v)
	}
	lease := leases.Items[0]
	checkAccess(t, c, ns, r.serviceAccounts[0].Name,
		[]access{
			{"get", "coordination.k8s.io", "leases", ns, lease.Name}, {"update", "coordination.k8s.io", "leases", ns, lease.Name},
			{"create", "coordination.k8s.io", "leases", ns, ""},
		},
		[]access{
			{"update", "coordination.k8s.io", "leases", ns, "another-lease"}, {"delete", "coordination.k8s.io", "leases", ns, lease.Name},
			{"list", "coordination.k8s.io", "leases", ns, ""}, {"get", "coordination.k8s.io", "leases", "kube-system", lease.Name},
			{"list", "", "pods", ns, ""},
		})

	acquired := standby.metric("tollgate_leader_acquisitions_total")
	if acquired < 0 {
		t.Fatalf("%s exports no tollgate_leader_acquisitions_total", standby.pod)
	}
	start := time.Now()
	leader.stop(t) // SIGTERM: releases the Lease
	eventually(t, ceiling, "the other replica to take over", func() bool {
		return standby.metric("tollgate_leader") == 1 && standby.metric("tollgate_leader_acquisitions_total") == acquired+1 &&
			standby.metric("tollgate_peer_linked") == 1
	}, standby)
	took := time.Since(start)
	l, err := c.Client.CoordinationV1().Leases(ns).Get(ctx, lease.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil || leaseHolder(t, l).Identity != standby.pod || l.ResourceVersion == lease.ResourceVersion {
		t.Errorf("Lease after the takeover: holder %v, resourceVersion %s (was %s); want %s", l.Spec.HolderIdentity, l.ResourceVersion, lease.ResourceVersion, standby.pod)
	}
	if l.Spec.LeaseTransitions == nil || lease.Spec.LeaseTransitions == nil || *l.Spec.LeaseTransitions <= *lease.Spec.LeaseTransitions {
		t.Errorf("leaseTransitions %v → %v; want it to grow", lease.Spec.LeaseTransitions, l.Spec.LeaseTransitions)
	}
	t.Logf("takeover after the leader stopped: %v", took.Round(time.Millisecond))
}

// leaseHolder decodes the Lease's holderIdentity, IDENTITY@HOST:PORT with
// replicas; an empty or unreadable one is the zero Record.
func leaseHolder(t *testing.T, l *coordinationv1.Lease) election.Record {
	t.Helper()
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
		return election.Record{}
	}
	r, err := election.Parse(*l.Spec.HolderIdentity)
	if err != nil {
		t.Logf("Lease holder: %v", err)
		return election.Record{}
	}
	return r
}
