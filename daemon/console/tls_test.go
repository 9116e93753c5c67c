package console_test

import (
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/console"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
)

// TestConsoleTLS: with console.tls the console speaks HTTPS, its link
// says so, and its session cookie is Secure.
func TestConsoleTLS(t *testing.T) {
	t.Parallel()
	files, _, err := rpc.EnsureSelfSignedCert(t.TempDir(), []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	d := choirdtest.Start(t, choirdtest.Options{Edit: func(c *config.Config, _ config.Secrets) {
		c.Console = &config.Console{Listen: "127.0.0.1:0", TLS: &config.ConsoleTLS{Cert: files.CertFile, Key: files.KeyFile}}
	}})
	code, out, errOut := choirctltest.Run(t, d.Home, "console")
	link := strings.Fields(out)
	if code != 0 || len(link) == 0 || !strings.HasPrefix(link[0], "https://127.0.0.1:") {
		t.Fatalf("choirctl console: exit %d\n%s%s", code, out, errOut)
	}
	pem, err := os.ReadFile(files.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	c := client(t)
	c.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}
	resp, err := c.Get(link[0])
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var secure bool
	for _, k := range resp.Cookies() {
		secure = secure || (k.Name == console.CookieName && k.Secure && k.HttpOnly && k.SameSite == http.SameSiteStrictMode)
	}
	if resp.StatusCode != http.StatusSeeOther || !secure {
		t.Errorf("login over TLS: HTTP %d, cookies %v; want a Secure, HttpOnly, SameSite=Strict session cookie", resp.StatusCode, resp.Cookies())
	}
}
