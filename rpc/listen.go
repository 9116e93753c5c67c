package rpc

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
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
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if tlsConfig == nil && !transport.IsLoopbackHost(host) {
		return nil, fmt.Errorf("listen on %s: plaintext is allowed only on a loopback address; configure TLS (a certificate is generated when none is given)", addr)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if tlsConfig == nil {
		// "localhost" could resolve to anything: check what was bound.
		if ta, ok := ln.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
			ln.Close()
			return nil, fmt.Errorf("listen on %s: bound %s, which is not loopback; plaintext refused", addr, ln.Addr())
		}
		return ln, nil
	}
	conf := tlsConfig.Clone()
	conf.NextProtos = []string{"http/1.1"}
	if conf.MinVersion == 0 {
		conf.MinVersion = tls.VersionTLS13
	}
	return tls.NewListener(ln, conf), nil
}

// TLSFiles names a PEM certificate (chain) and its private key.
type TLSFiles struct {
	CertFile string
	KeyFile  string
}

// ServerTLSConfig loads files into a server TLS configuration.
func ServerTLSConfig(files TLSFiles) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS certificate %s: %w", files.CertFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}, nil
}

// LoadOrCreateServerTLS returns the TLS configuration of the http
// transport: from files when a certificate and key are configured (choird
// --tls-cert/--tls-key), otherwise from a self-signed certificate kept in
// dir (see EnsureSelfSignedCert; usually .choir.d/tls). certFile is the
// certificate agents should trust with --ca-cert.
func LoadOrCreateServerTLS(files TLSFiles, dir string, hosts []string) (conf *tls.Config, certFile string, err error) {
	switch {
	case files.CertFile != "" && files.KeyFile != "":
	case files.CertFile != "" || files.KeyFile != "":
		return nil, "", errors.New("TLS: set both the certificate and the key, or neither to use a self-signed certificate")
	default:
		if files, _, err = EnsureSelfSignedCert(dir, hosts); err != nil {
			return nil, "", err
		}
	}
	conf, err = ServerTLSConfig(files)
	if err != nil {
		return nil, "", err
	}
	return conf, files.CertFile, nil
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
	if transport.CertCovers(files.CertFile, files.KeyFile, hosts, time.Now()) {
		return files, false, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return files, false, fmt.Errorf("create TLS directory: %w", err)
	}
	certPEM, keyPEM, err := transport.GenerateSelfSigned(hosts, time.Now(), selfSignedLifetime)
	if err != nil {
		return files, false, err
	}
	// The key first: a certificate without its key is useless, while a
	// key without its certificate is simply regenerated next time.
	if err := transport.WriteFileAtomic(files.KeyFile, keyPEM, 0o600); err != nil {
		return files, false, err
	}
	if err := transport.WriteFileAtomic(files.CertFile, certPEM, 0o644); err != nil {
		return files, false, err
	}
	return files, true, nil
}
