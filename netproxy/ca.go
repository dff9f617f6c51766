package netproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// CA is the executor's interception authority for credential masking: a
// self-signed ECDSA P-256 certificate whose key exists only in this
// process's memory (never written to any file, so no sandbox can read
// it), and the leaf certificates it issues, one per host, cached.
//
// A command trusts it through the certificate variables (CertVars) that
// point at a bundle of the system roots and this certificate; only hosts
// a masked credential is bound to are ever intercepted.
type CA struct {
	cert    *x509.Certificate
	certDER []byte
	key     *ecdsa.PrivateKey

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // host → leaf
}

// maxLeaves bounds the cache of issued leaves (a command choosing hosts
// cannot grow it without end: only masked destinations are issued).
const maxLeaves = 256

// NewCA makes a fresh authority, valid from an hour ago for ten years
// (it lives as long as the server process).
func NewCA() (*CA, error) {
	key, der, cert, err := issue(&x509.Certificate{
		Subject:               pkix.Name{CommonName: "exec-server credential masking CA", Organization: []string{"exec-server"}},
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}, nil, nil)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, certDER: der, key: key, leaves: map[string]*tls.Certificate{}}, nil
}

// issue makes a fresh P-256 key and a certificate for it from tmpl (given
// a random serial, valid from an hour ago), signed by parent's key, or
// self-signed when parent is nil.
func issue(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*ecdsa.PrivateKey, []byte, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	if tmpl.SerialNumber, err = randSerial(); err != nil {
		return nil, nil, nil, err
	}
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return key, der, cert, nil
}

func randSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

// CertPEM is the authority's certificate (never its key).
func (ca *CA) CertPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.certDER})
}

// Certificate is the authority's certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// Leaf returns a certificate for host (a name or an IP literal), issued
// once and cached.
func (ca *CA) Leaf(host string) (*tls.Certificate, error) {
	if host == "" {
		return nil, errors.New("no host to issue a certificate for")
	}
	ca.mu.Lock()
	defer ca.mu.Unlock()
	if c, ok := ca.leaves[host]; ok && time.Now().Before(c.Leaf.NotAfter.Add(-time.Hour)) {
		return c, nil
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: host},
		NotAfter:    time.Now().AddDate(0, 0, 30),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	key, der, leaf, err := issue(tmpl, ca.cert, ca.key)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der, ca.certDER}, PrivateKey: key, Leaf: leaf}
	if len(ca.leaves) >= maxLeaves {
		clear(ca.leaves)
	}
	ca.leaves[host] = c
	return c, nil
}

// CertVars are the variables the reference 0.171 points at its CA bundle
// when masking credentials (measured: the child's environment).
var CertVars = []string{
	"SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
	"PIP_CERT", "CLOUDSDK_CORE_CUSTOM_CA_CERTS_FILE", "BUNDLE_SSL_CA_CERT", "CARGO_HTTP_CAINFO",
	"CODEX_CA_CERTIFICATE", "DENO_CERT", "NPM_CONFIG_CAFILE", "npm_config_cafile",
}

// systemBundles are where the system's roots are read from for the
// command's bundle (the first that exists), as Go's crypto/x509 looks.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt", "/etc/ssl/ca-bundle.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", "/etc/ssl/cert.pem",
}

// WriteBundle writes the command's trust bundle into dir (a directory the
// server owns, outside every sandbox's writable area): the system's roots
// followed by this authority's certificate, as ca-bundle-<sha256>.pem
// (the reference's name), mode 0644. It returns the file's path. The
// bundle holds certificates only.
func (ca *CA) WriteBundle(dir string) (string, error) {
	var bundle []byte
	for _, f := range systemBundles {
		if b, err := os.ReadFile(f); err == nil {
			bundle = append(bundle, b...)
			if len(bundle) > 0 && bundle[len(bundle)-1] != '\n' {
				bundle = append(bundle, '\n')
			}
			break
		}
	}
	bundle = append(bundle, ca.CertPEM()...)
	sum := sha256.Sum256(bundle)
	path := filepath.Join(dir, "ca-bundle-"+hex.EncodeToString(sum[:])+".pem")
	if b, err := os.ReadFile(path); err == nil && string(b) == string(bundle) {
		return path, nil
	}
	tmp, err := os.CreateTemp(dir, ".ca-bundle-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(bundle); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return path, os.Rename(tmp.Name(), path)
}

// Authority is an executor's masking authority: its CA, made on first
// use, and the commands' trust bundle, written once into a directory of
// its own (mode 0755, outside every sandbox's writable area; a sandbox
// sees it read-only). The zero value is ready; Close removes the bundle.
type Authority struct {
	mu     sync.Mutex
	ca     *CA
	dir    string
	bundle string
}

// Get returns the CA and the bundle's path, making them on first use.
func (a *Authority) Get() (*CA, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ca != nil {
		return a.ca, a.bundle, nil
	}
	ca, err := NewCA()
	if err != nil {
		return nil, "", err
	}
	dir, err := os.MkdirTemp("", "exec-server-mitm-ca-")
	if err != nil {
		return nil, "", err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	bundle, err := ca.WriteBundle(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, "", err
	}
	a.ca, a.dir, a.bundle = ca, dir, bundle
	return ca, bundle, nil
}

// Close removes the bundle's directory; a later Get makes a new CA.
func (a *Authority) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.dir != "" {
		os.RemoveAll(a.dir)
	}
	a.ca, a.dir, a.bundle = nil, "", ""
}
