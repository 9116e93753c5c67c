package rpc

import (
	"context"
	"crypto/tls"
	"net"
	"path/filepath"
	"slices"
	"time"

	"github.com/choirhq/choir/rpc/internal/transport"
	"github.com/choirhq/choir/rpc/unixsock"
)

// ListenUnix listens on the Unix socket at path for the uds transport:
// mode 0600, a stale socket replaced, a live one refused with an error
// matching unixsock.ErrInUse that names its holder. See unixsock.Listen.
func ListenUnix(ctx context.Context, path string) (net.Listener, error) {
	return unixsock.Listen(ctx, path)
}

// ListenTCP listens on addr for the http transport. With a TLS
// configuration the listener serves TLS (server-only; HTTP/1.1). Without
// one it refuses any address but a loopback one: plaintext must never cross
// a network boundary (spec 12.1).
func ListenTCP(ctx context.Context, addr string, tlsConfig *tls.Config) (net.Listener, error) {
	return transport.ListenTCP(ctx, addr, tlsConfig)
}

// TLSFiles names a PEM certificate (chain) and its private key.
type TLSFiles struct {
	CertFile string
	KeyFile  string
}

// ServerTLSConfig loads files into a server TLS configuration.
func ServerTLSConfig(files TLSFiles) (*tls.Config, error) {
	return transport.ServerTLSConfig(files.CertFile, files.KeyFile)
}

// LoadOrCreateServerTLS returns the TLS configuration of the http
// transport: from files when a certificate and key are configured (choird
// --tls-cert/--tls-key), otherwise from a self-signed certificate kept in
// dir (see EnsureSelfSignedCert; usually .choir.d/tls). certFile is the
// certificate agents should trust with --ca-cert.
func LoadOrCreateServerTLS(files TLSFiles, dir string, hosts []string) (conf *tls.Config, certFile string, err error) {
	if files.CertFile == "" && files.KeyFile == "" {
		if files, _, err = EnsureSelfSignedCert(dir, hosts); err != nil {
			return nil, "", err
		}
	}
	return transport.LoadServerTLS(files.CertFile, files.KeyFile)
}

// Self-signed certificate file names, within the directory given to
// EnsureSelfSignedCert.
const (
	SelfSignedCertFile = "cert.pem"
	SelfSignedKeyFile  = "key.pem"
)

// DefaultCertHosts are the names every self-signed certificate covers.
var DefaultCertHosts = []string{"localhost", "127.0.0.1", "::1"}

// selfSignedLifetime is the validity of a generated certificate; it is
// regenerated when less than 30 days remain (see transport.CertCovers).
const selfSignedLifetime = 5 * 365 * 24 * time.Hour

// EnsureSelfSignedCert returns a self-signed ECDSA P-256 certificate and
// key in dir (cert.pem, key.pem; dir mode 0700, key mode 0600), generating
// them the first time and reusing them afterwards, so that agents can pin
// cert.pem as their CA (--ca-cert). It regenerates them when they are
// unreadable, expire within 30 days, or do not cover every one of hosts
// (DNS names or IP addresses, added to DefaultCertHosts). created reports
// whether it generated a new pair.
func EnsureSelfSignedCert(dir string, hosts []string) (files TLSFiles, created bool, err error) {
	files = TLSFiles{CertFile: filepath.Join(dir, SelfSignedCertFile), KeyFile: filepath.Join(dir, SelfSignedKeyFile)}
	hosts = append(slices.Clone(DefaultCertHosts), hosts...)
	created, err = transport.EnsureSelfSigned(dir, files.CertFile, files.KeyFile, hosts, selfSignedLifetime)
	return files, created, err
}
