package peer

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// TLSConfigs returns the channel's server and client TLS, built from the
// ext_proc listener's files; all nil without files.
//
// With clientCAFile it is mutual TLS: the server requires a client
// certificate signed by the CA, and the client presents certFile and
// accepts a server chain signed by the same CA, without a hostname check
// (replicas dial pod IPs). Without it the replicas share one certificate
// and each side pins it: a peer must present exactly certFile's leaf.
func TLSConfigs(certFile, keyFile, clientCAFile string) (server, client *tls.Config, err error) {
	if certFile == "" && keyFile == "" && clientCAFile == "" {
		return nil, nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, nil, errors.New("peer: tls needs both a cert and a key file")
	}
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return nil, nil, fmt.Errorf("peer: tls cert: %w", err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("peer: tls key: %w", err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("peer: tls cert %s, key %s: %w", certFile, keyFile, err)
	}
	server = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	client = &tls.Config{
		// Present the certificate even when its CA is not the one the
		// server asks for: the server then says why it refuses.
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
		MinVersion:           tls.VersionTLS13,
		// VerifyConnection verifies the server: no hostname to check.
		InsecureSkipVerify: true, //nolint:gosec // verified by VerifyConnection
	}
	if clientCAFile == "" {
		pin := pinLeaf(cert.Certificate[0])
		server.ClientAuth = tls.RequireAnyClientCert
		server.VerifyConnection = pin
		client.VerifyConnection = pin
		return server, client, nil
	}
	caPEM, err := os.ReadFile(clientCAFile)
	if err != nil {
		return nil, nil, fmt.Errorf("peer: tls client ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, nil, fmt.Errorf("peer: tls client ca: %s holds no PEM certificate", clientCAFile)
	}
	server.ClientCAs = pool
	server.ClientAuth = tls.RequireAndVerifyClientCert
	client.VerifyConnection = verifyChain(pool)
	return server, client, nil
}

// pinLeaf accepts only a peer whose leaf is leaf, byte for byte.
func pinLeaf(leaf []byte) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 || !bytes.Equal(cs.PeerCertificates[0].Raw, leaf) {
			return errors.New("peer: tls: the peer's certificate is not this replica's")
		}
		return nil
	}
}

// verifyChain accepts a server whose chain verifies against roots, with no
// DNS name.
func verifyChain(roots *x509.CertPool) func(tls.ConnectionState) error {
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return errors.New("peer: tls: the scheduler presented no certificate")
		}
		inter := x509.NewCertPool()
		for _, c := range cs.PeerCertificates[1:] {
			inter.AddCert(c)
		}
		opts := x509.VerifyOptions{Roots: roots, Intermediates: inter}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return fmt.Errorf("peer: tls: the scheduler's certificate: %w", err)
		}
		return nil
	}
}
