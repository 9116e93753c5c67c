package transport

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// selfSignedRenew is how long before its expiry a certificate is renewed.
const selfSignedRenew = 30 * 24 * time.Hour

// CertCovers reports whether certFile and keyFile hold a usable pair
// valid for hosts, for at least 30 more days after now.
func CertCovers(certFile, keyFile string, hosts []string, now time.Time) bool {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return false
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return false
		}
	}
	if now.Before(leaf.NotBefore) || now.Add(selfSignedRenew).After(leaf.NotAfter) {
		return false
	}
	for _, h := range hosts {
		if leaf.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// GenerateSelfSigned returns a new self-signed ECDSA P-256 certificate for
// hosts, valid from an hour before now for lifetime, and its key, in PEM.
func GenerateSelfSigned(hosts []string, now time.Time, lifetime time.Duration) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generate TLS key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, fmt.Errorf("generate TLS serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{Organization: []string{"Choir"}, CommonName: "choird"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(lifetime),
		// The certificate is its own CA, so that an agent can trust it
		// directly as a root.
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		if seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create TLS certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encode TLS key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// WriteFileAtomic writes data to path through a temporary file and a
// rename, so that a reader never sees half a file.
func WriteFileAtomic(path string, data []byte, mode fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	err = errors.Join(werr, f.Chmod(mode), f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// EnsureSelfSigned keeps a self-signed certificate valid for hosts in
// certFile and keyFile, in dir (mode 0700): it generates the pair, valid
// for lifetime, unless CertCovers says the one there will do. created
// reports whether it generated one.
func EnsureSelfSigned(dir, certFile, keyFile string, hosts []string, lifetime time.Duration) (created bool, err error) {
	if CertCovers(certFile, keyFile, hosts, time.Now()) {
		return false, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, fmt.Errorf("create TLS directory: %w", err)
	}
	certPEM, keyPEM, err := GenerateSelfSigned(hosts, time.Now(), lifetime)
	if err != nil {
		return false, err
	}
	// The key first: a certificate without its key is useless, while a
	// key without its certificate is simply regenerated next time.
	if err := WriteFileAtomic(keyFile, keyPEM, 0o600); err != nil {
		return false, err
	}
	if err := WriteFileAtomic(certFile, certPEM, 0o644); err != nil {
		return false, err
	}
	return true, nil
}

// ServerTLSConfig loads a certificate (chain) and its key into a server TLS
// configuration.
func ServerTLSConfig(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate %s: %w", certFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}, nil
}

// LoadServerTLS is ServerTLSConfig, refusing a certificate without its key
// or a key without its certificate; it returns certFile as given.
func LoadServerTLS(certFile, keyFile string) (*tls.Config, string, error) {
	if certFile == "" || keyFile == "" {
		return nil, "", errors.New("TLS: set both the certificate and the key, or neither to use a self-signed certificate")
	}
	conf, err := ServerTLSConfig(certFile, keyFile)
	if err != nil {
		return nil, "", err
	}
	return conf, certFile, nil
}
