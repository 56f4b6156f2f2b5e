// Package apiserver runs a real kube-apiserver with etcd on loopback for
// tests, as envtest does: RBAC authorization, service account tokens, and
// no controllers or kubelets (objects are what the test creates).
//
// The binaries come from the separate Go module in test/kubeapi (make
// kubeapi builds them into test/kubeapi/bin at the release of k8s.io/* the
// project uses); TOLLGATE_KUBE_APISERVER and TOLLGATE_ETCD override their
// paths.
package apiserver

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/tollgate/tollgate/test/loopback"
)

// Install says how to get the binaries.
const Install = "run make kubeapi (builds kube-apiserver and etcd into test/kubeapi/bin)"

// Binaries returns the kube-apiserver and etcd paths: the environment
// overrides, else test/kubeapi/bin of this source tree.
func Binaries() (apiserver, etcd string) {
	_, self, _, _ := runtime.Caller(0)
	bin := filepath.Join(filepath.Dir(self), "..", "kubeapi", "bin")
	apiserver, etcd = filepath.Join(bin, "kube-apiserver"), filepath.Join(bin, "etcd")
	if p := os.Getenv("TOLLGATE_KUBE_APISERVER"); p != "" {
		apiserver = p
	}
	if p := os.Getenv("TOLLGATE_ETCD"); p != "" {
		etcd = p
	}
	return apiserver, etcd
}

// Cluster is a running API server and its etcd.
type Cluster struct {
	// URL is the API server's https address.
	URL string
	// Admin is a client configuration in the system:masters group.
	Admin *rest.Config
	// Client is a clientset for Admin.
	Client kubernetes.Interface

	dir    string
	cancel context.CancelFunc
	procs  []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start runs etcd and kube-apiserver in a temporary directory and waits,
// at most ready, until the API server answers /readyz. log receives their
// output. Stop ends both and removes the directory.
func Start(log *os.File, ready time.Duration) (_ *Cluster, err error) {
	apiserverBin, etcdBin := Binaries()
	for _, b := range []string{apiserverBin, etcdBin} {
		if _, err := os.Stat(b); err != nil {
			return nil, fmt.Errorf("apiserver: %w (%s)", err, Install)
		}
	}
	dir, err := os.MkdirTemp("", "tollgate-apiserver-")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cluster{dir: dir, cancel: cancel}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()

	var addrs [3]string
	for i := range addrs {
		if addrs[i], err = loopback.FreeAddr(); err != nil {
			return nil, err
		}
	}
	etcdClient, etcdPeer, port := addrs[0], addrs[1], addrs[2]
	if err := c.spawn(ctx, log, "etcd", etcdBin, "-data-dir", filepath.Join(dir, "etcd"),
		"-listen-client-url", "http://"+etcdClient, "-listen-peer-url", "http://"+etcdPeer); err != nil {
		return nil, err
	}

	token, err := randomHex()
	if err != nil {
		return nil, err
	}
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(token+`,admin,admin,"system:masters"`+"\n"), 0o600); err != nil {
		return nil, err
	}
	saKey := filepath.Join(dir, "sa.key")
	if err := writeRSAKey(saKey); err != nil {
		return nil, err
	}
	_, securePort, _ := net.SplitHostPort(port)
	if err := c.spawn(ctx, log, "kube-apiserver", apiserverBin,
		"--etcd-servers=http://"+etcdClient,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--secure-port="+securePort,
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		"--token-auth-file="+tokens,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+saKey,
		"--service-account-signing-key-file="+saKey,
		// No controller manager creates the default ServiceAccount the
		// admission plugin would require of every pod.
		"--disable-admission-plugins=ServiceAccount",
		"--allow-privileged=true",
		"--v=0",
	); err != nil {
		return nil, err
	}
	c.URL = "https://" + port
	c.Admin = &rest.Config{Host: c.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}, QPS: 100, Burst: 200}
	if c.Client, err = kubernetes.NewForConfig(c.Admin); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(ready)
	for {
		for _, p := range c.procs {
			select {
			case <-p.done:
				return nil, fmt.Errorf("apiserver: %s exited before the API server was ready: %w", p.name, p.err)
			default:
			}
		}
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		rcancel()
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("apiserver: not ready after %v: %w %s", ready, err, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (c *Cluster) spawn(ctx context.Context, log *os.File, name, bin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("apiserver: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	c.procs = append(c.procs, p)
	return nil
}

// Stop ends the API server, then etcd, and removes their data.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(15 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	c.cancel()
	_ = os.RemoveAll(c.dir)
}

// Kubeconfig writes a kubeconfig file for this cluster that authenticates
// with token (a service account token, say) and returns its path.
func (c *Cluster) Kubeconfig(dir, name, token string) (string, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: c.URL, InsecureSkipTLSVerify: true}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: name}
	cfg.CurrentContext = "test"
	path := filepath.Join(dir, name+".kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// AdminKubeconfig writes a kubeconfig file for the admin and returns its
// path.
func (c *Cluster) AdminKubeconfig(dir string) (string, error) {
	return c.Kubeconfig(dir, "admin", c.Admin.BearerToken)
}

func randomHex() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

func writeRSAKey(path string) error {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	der := x509.MarshalPKCS1PrivateKey(k)
	b := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der})
	if b == nil {
		return errors.New("apiserver: encode the service account key")
	}
	return os.WriteFile(path, b, 0o600)
}
