package peer

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// issuer signs test certificates.
type issuer struct {
	cert *x509.Certificate
	key  crypto.Signer
	file string // the certificate's PEM file
}

var serial atomic.Int64

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// writePEM writes one PEM block to dir/name and returns its path.
func writePEM(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func template(name string, ca bool) *x509.Certificate {
	c := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
	if ca {
		c.IsCA, c.BasicConstraintsValid = true, true
		c.KeyUsage = x509.KeyUsageCertSign
	} else {
		c.KeyUsage = x509.KeyUsageDigitalSignature
		c.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	}
	return c
}

func newCA(t *testing.T, name string) *issuer {
	t.Helper()
	key := newKey(t)
	tmpl := template(name, true)
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &issuer{cert: cert, key: key, file: writePEM(t, name+".pem", "CERTIFICATE", der)}
}

// newLeaf returns the cert and key files of a leaf signed by ca, or
// self-signed when ca is nil. It names no host: nothing checks one.
func newLeaf(t *testing.T, name string, ca *issuer) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
	tmpl := template(name, false)
	parent, signer := tmpl, crypto.Signer(key)
	if ca != nil {
		parent, signer = ca.cert, ca.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, key.Public(), signer)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, name+".pem", "CERTIFICATE", der), writePEM(t, name+"-key.pem", "PRIVATE KEY", kder)
}

func configs(t *testing.T, cert, key, ca string) (server, client *tls.Config) {
	t.Helper()
	s, c, err := TLSConfigs(cert, key, ca)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// hello serves one hello/welcome exchange per stream with server TLS and
// tries it with client TLS. It reports whether the scheduler's serve ran,
// and the exchange's error.
func hello(t *testing.T, server, client *tls.Config) (served bool, err error) {
	t.Helper()
	var ran atomic.Bool
	addr := startServer(t, server, func(s ServerStream) error {
		ran.Store(true)
		if _, err := s.Recv(); err != nil {
			return err
		}
		if err := s.Send(&Down{Kind: DownWelcome, Scheduler: "s"}); err != nil {
			return err
		}
		_, err := s.Recv()
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := Dial(ctx, addr, client)
	if err != nil {
		return ran.Load(), err
	}
	defer c.Close()
	if err := c.Send(&Up{Kind: UpHello, Front: "f"}); err != nil {
		_, err = c.Recv()
		return ran.Load(), err
	}
	_, err = c.Recv()
	return ran.Load(), err
}

func TestTLSMutual(t *testing.T) {
	ca, other := newCA(t, "ca"), newCA(t, "other-ca")
	certA, keyA := newLeaf(t, "a", ca)
	certB, keyB := newLeaf(t, "b", ca)
	certX, keyX := newLeaf(t, "x", other)
	server, _ := configs(t, certA, keyA, ca.file)
	_, client := configs(t, certB, keyB, ca.file)
	if _, err := hello(t, server, client); err != nil {
		t.Fatalf("mutual TLS with the shared CA: %v", err)
	}

	// A client certificate from another CA is refused by the server (the
	// client itself trusts the server's CA).
	_, stranger := configs(t, certX, keyX, ca.file)
	if served, err := hello(t, server, stranger); err == nil || served {
		t.Errorf("client cert from another CA: err %v, served %v; want refused", err, served)
	} else {
		t.Logf("refused: %v", err)
	}

	// A server certificate from another CA is refused by the client.
	foreign, _ := configs(t, certX, keyX, other.file)
	foreign.ClientAuth = tls.NoClientCert
	if served, err := hello(t, foreign, client); err == nil || served {
		t.Errorf("server cert from another CA: err %v, served %v; want refused", err, served)
	} else {
		t.Logf("refused: %v", err)
	}
}

func TestTLSPinned(t *testing.T) {
	ca := newCA(t, "ca")
	certS, keyS := newLeaf(t, "shared", nil)
	certA, keyA := newLeaf(t, "a", ca)
	server, client := configs(t, certS, keyS, "")
	if _, err := hello(t, server, client); err != nil {
		t.Fatalf("pinned with the shared leaf: %v", err)
	}

	// The server refuses another leaf, even from a client that accepts
	// any server.
	_, other := configs(t, certA, keyA, "")
	other.VerifyConnection = nil
	if served, err := hello(t, server, other); err == nil || served {
		t.Errorf("client with another leaf: err %v, served %v; want refused", err, served)
	} else {
		t.Logf("refused: %v", err)
	}

	// The client refuses a server with another leaf, even one that asks
	// for no client certificate.
	open, _ := configs(t, certA, keyA, "")
	open.ClientAuth, open.VerifyConnection = tls.NoClientCert, nil
	if served, err := hello(t, open, client); err == nil || served {
		t.Errorf("server with another leaf: err %v, served %v; want refused", err, served)
	} else {
		t.Logf("refused: %v", err)
	}

	// A client without TLS is refused.
	if served, err := hello(t, server, nil); err == nil || served {
		t.Errorf("client without TLS: err %v, served %v; want refused", err, served)
	} else {
		t.Logf("refused: %v", err)
	}
}

func TestTLSConfigsErrors(t *testing.T) {
	if s, c, err := TLSConfigs("", "", ""); s != nil || c != nil || err != nil {
		t.Errorf("no files = %v, %v, %v; want all nil", s, c, err)
	}
	cert, key := newLeaf(t, "a", nil)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, cert, key, ca, want string
	}{
		{"key only", "", key, "", "needs both a cert and a key"},
		{"ca only", "", "", cert, "needs both a cert and a key"},
		{"missing cert", missing, key, "", missing},
		{"missing key", cert, missing, "", missing},
		{"bad key", cert, notPEM, "", notPEM},
		{"missing ca", cert, key, missing, missing},
		{"bad ca", cert, key, notPEM, notPEM},
	} {
		_, _, err := TLSConfigs(tt.cert, tt.key, tt.ca)
		if err == nil || !strings.HasPrefix(err.Error(), "peer: ") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want peer: ...%s", tt.name, err, tt.want)
		}
	}
}
