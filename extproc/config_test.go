package extproc

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/test/bufconn"

	"github.com/tollgate/tollgate/extproc/intake"
)

func TestConfig_ZeroValueIsValid(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatal(err)
	}
	d := Config{}.withDefaults()
	if d.EnvoyMessageTimeout != time.Second || d.EnvoyMaxMessageTimeout != 310*time.Second || d.RouterTTL != 120*time.Second ||
		d.Sched.BlockSize != 16 || d.TenantMetricTopN != 32 || d.MaxBodyBytes != DefaultMaxBodyBytes {
		t.Errorf("defaults %+v", d)
	}
}

func TestConfig_ValidateReportsEveryProblem(t *testing.T) {
	err := Config{
		MaxBodyBytes:            -1,
		EnvoyMessageTimeout:     2 * time.Hour,
		EnvoyTimeoutMargin:      -time.Second,
		EnvoyMaxMessageTimeout:  500 * time.Millisecond,
		ForwardedForTrustedHops: -1,
		Tenancy:                 &intake.Tenancy{DefaultMaxClass: "urgent"},
		GRPC:                    GRPCConfig{TLSCert: "c.pem", ClientCA: "ca.pem"},
	}.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{"max body bytes -1", "message timeout 2h0m0s", "margin -1s", "trusted hops -1",
		"default-max-class", "cert and key must be set together"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q:\n%v", want, err)
		}
	}
	if err := (Config{EnvoyMessageTimeout: time.Second, EnvoyMaxMessageTimeout: 500 * time.Millisecond}).Validate(); err == nil {
		t.Error("max message timeout below message timeout accepted")
	}
	if err := (Config{EnvoyMessageTimeout: 100 * time.Millisecond}).Validate(); err == nil {
		t.Error("margin equal to the message timeout accepted")
	}
}

// writePKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA.
func writePKI(t *testing.T) (dir string, clientCert tls.Certificate, caPool *x509.CertPool) {
	t.Helper()
	dir = t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"}, IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	caPool = x509.NewCertPool()
	caPool.AddCert(ca)
	issue := func(serial int64, usage x509.ExtKeyUsage) ([]byte, []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "tollgate"},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"bufnet"}, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(key)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	}
	sc, sk := issue(2, x509.ExtKeyUsageServerAuth)
	cc, ck := issue(3, x509.ExtKeyUsageClientAuth)
	for name, b := range map[string][]byte{
		"server.pem": sc, "server-key.pem": sk,
		"ca.pem": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	clientCert, err = tls.X509KeyPair(cc, ck)
	if err != nil {
		t.Fatal(err)
	}
	return dir, clientCert, caPool
}

func TestServerOptions_MutualTLS(t *testing.T) {
	dir, clientCert, pool := writePKI(t)
	cfg := Config{GRPC: GRPCConfig{
		TLSCert: filepath.Join(dir, "server.pem"), TLSKey: filepath.Join(dir, "server-key.pem"), ClientCA: filepath.Join(dir, "ca.pem"),
	}}
	s, err := New(cfg, oneWorker)
	if err != nil {
		t.Fatal(err)
	}
	opts, err := ServerOptions(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis := bufconn.Listen(1 << 16)
	g := grpc.NewServer(opts...)
	s.Register(g)
	var wg sync.WaitGroup
	wg.Go(func() { _ = g.Serve(lis) })
	defer func() { g.Stop(); wg.Wait() }()
	check := func(certs []tls.Certificate) error {
		conn, err := grpc.NewClient("passthrough:///bufnet",
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, Certificates: certs, ServerName: "bufnet"})))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = healthgrpc.NewHealthClient(conn).Check(ctx, &healthgrpc.HealthCheckRequest{})
		return err
	}
	if err := check([]tls.Certificate{clientCert}); err != nil {
		t.Fatalf("with a client certificate: %v", err)
	}
	if err := check(nil); err == nil {
		t.Fatal("a client without a certificate was accepted")
	}
	if _, err := ServerOptions(Config{GRPC: GRPCConfig{TLSCert: filepath.Join(dir, "nope.pem"), TLSKey: filepath.Join(dir, "nope.pem")}}); err == nil {
		t.Error("missing certificate files accepted")
	}
}
func TestParseClientIPSource(t *testing.T) {
	for in, want := range map[string]ClientIPSource{"": ClientIPSourceAddress, "source-address": ClientIPSourceAddress, "x-forwarded-for": ClientIPForwardedFor} {
		got, err := ParseClientIPSource(in)
		if err != nil || got != want || (in != "" && got.String() != in) {
			t.Errorf("ParseClientIPSource(%q) = %v %v", in, got, err)
		}
	}
	if _, err := ParseClientIPSource("peer"); err == nil {
		t.Error("unknown source accepted")
	}
}
