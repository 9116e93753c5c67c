package rpc_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/rpc"
)

func TestEnsureSelfSignedCert(t *testing.T) {
	t.Parallel()

	t.Run("GeneratedOnceThenReused", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "tls")
		files, created, err := rpc.EnsureSelfSignedCert(dir, nil)
		if err != nil || !created {
			t.Fatalf("first: created %v, %v", created, err)
		}
		first, _ := os.ReadFile(files.CertFile)
		again, created, err := rpc.EnsureSelfSignedCert(dir, []string{"127.0.0.1"})
		if err != nil || created || again != files {
			t.Fatalf("second: created %v, files %v, %v", created, again, err)
		}
		if second, _ := os.ReadFile(files.CertFile); !bytes.Equal(first, second) {
			t.Error("the certificate changed")
		}
		for path, mode := range map[string]os.FileMode{dir: 0o700, files.KeyFile: 0o600} {
			fi, err := os.Stat(path)
			if err != nil || fi.Mode().Perm() != mode {
				t.Errorf("%s: mode %v, want %v (%v)", path, fi.Mode().Perm(), mode, err)
			}
		}
	})

	t.Run("NewHostRegenerates", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		files, _, err := rpc.EnsureSelfSignedCert(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, created, err := rpc.EnsureSelfSignedCert(dir, []string{"choird.internal", "10.1.2.3"})
		if err != nil || !created {
			t.Fatalf("created %v, %v", created, err)
		}
		b, _ := os.ReadFile(files.CertFile)
		block, _ := pem.Decode(b)
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range []string{"localhost", "127.0.0.1", "::1", "choird.internal", "10.1.2.3"} {
			if err := cert.VerifyHostname(h); err != nil {
				t.Errorf("%s: %v", h, err)
			}
		}
		if k, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || k.Curve.Params().Name != "P-256" {
			t.Errorf("public key %T, want ECDSA P-256", cert.PublicKey)
		}
	})

	t.Run("CorruptFilesAreReplaced", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		files, _, err := rpc.EnsureSelfSignedCert(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(files.KeyFile, []byte("garbage"), 0o600)
		if _, created, err := rpc.EnsureSelfSignedCert(dir, nil); err != nil || !created {
			t.Fatalf("created %v, %v", created, err)
		}
		if _, err := rpc.ServerTLSConfig(files); err != nil {
			t.Error(err)
		}
	})
}

func TestLoadOrCreateServerTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	_, cert, err := rpc.LoadOrCreateServerTLS(rpc.TLSFiles{}, filepath.Join(dir, "tls"), nil)
	if err != nil || cert != filepath.Join(dir, "tls", rpc.SelfSignedCertFile) {
		t.Fatalf("self-signed: %s, %v", cert, err)
	}
	given := rpc.TLSFiles{CertFile: cert, KeyFile: filepath.Join(dir, "tls", rpc.SelfSignedKeyFile)}
	if _, got, err := rpc.LoadOrCreateServerTLS(given, filepath.Join(dir, "unused"), nil); err != nil || got != cert {
		t.Errorf("configured: %s, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "unused")); !os.IsNotExist(err) {
		t.Error("a self-signed certificate was generated although one was configured")
	}
	if _, _, err := rpc.LoadOrCreateServerTLS(rpc.TLSFiles{CertFile: cert}, dir, nil); err == nil {
		t.Error("a certificate without its key was accepted")
	}
}

func TestListenTCP(t *testing.T) {
	t.Parallel()

	t.Run("PlaintextRefusedBeyondLoopback", func(t *testing.T) {
		t.Parallel()
		for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0"} {
			ln, err := rpc.ListenTCP(t.Context(), addr, nil)
			if err == nil {
				ln.Close()
				t.Errorf("%s: plaintext listener allowed", addr)
			} else if !strings.Contains(err.Error(), "loopback") {
				t.Errorf("%s: %v", addr, err)
			}
		}
	})

	t.Run("PlaintextAllowedOnLoopback", func(t *testing.T) {
		t.Parallel()
		ln, err := rpc.ListenTCP(t.Context(), "127.0.0.1:0", nil)
		if err != nil {
			t.Fatal(err)
		}
		ln.Close()
	})

	t.Run("TLSServesHTTP1Only", func(t *testing.T) {
		t.Parallel()
		files, _, err := rpc.EnsureSelfSignedCert(t.TempDir(), nil)
		if err != nil {
			t.Fatal(err)
		}
		conf, err := rpc.ServerTLSConfig(files)
		if err != nil {
			t.Fatal(err)
		}
		ln, err := rpc.ListenTCP(t.Context(), "127.0.0.1:0", conf)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		pem, _ := os.ReadFile(files.CertFile)
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		d := tls.Dialer{Config: &tls.Config{RootCAs: pool, NextProtos: []string{"h2", "http/1.1"}}}
		c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		st := c.(*tls.Conn).ConnectionState()
		if st.NegotiatedProtocol != "http/1.1" || st.Version != tls.VersionTLS13 {
			t.Errorf("negotiated %q, TLS %x", st.NegotiatedProtocol, st.Version)
		}
	})
}

func TestPlaintextLoopbackTransport(t *testing.T) {
	t.Parallel()
	b := setup(t, transportHTTP, setupOpts{})
	for _, c := range verbCases(t, b) {
		if _, err := c.call(t.Context(), b.client); err != nil {
			t.Errorf("%s: %v", c.verb, err)
		}
	}
	got := receive(t, b.client)
	if _, err := b.srv.Push(b.sessionID, configChanged(1)); err != nil {
		t.Fatal(err)
	}
	got.next(t)
}
