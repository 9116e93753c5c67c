package config_test

import (
	"testing"
	"time"

	"github.com/choirhq/choir/config"
)

// TestConsoleConfig: no block serves no console; the block's defaults;
// every problem names its JSON path; unknown fields are refused.
func TestConsoleConfig(t *testing.T) {
	t.Parallel()
	c, s := specConfig(t), specSecrets()
	if c.Console != nil {
		t.Fatalf("the spec example has a console: %+v", c.Console)
	}
	c.Console = &config.Console{}
	if err := c.Validate(s); err != nil {
		t.Fatalf("an empty console block: %v", err)
	}
	if c.Console.Address() != config.DefaultConsoleListen || c.Console.SessionLifetime() != 12*time.Hour {
		t.Errorf("defaults: %s, %s", c.Console.Address(), c.Console.SessionLifetime())
	}
	c.Console = &config.Console{Listen: ":7780", TLS: &config.ConsoleTLS{Cert: "/c.pem"}, SessionLifetimeMS: 1000}
	checkProblems(t, problems(t, c.Validate(s)), []string{
		`$.console.listen: name the host to listen on, e.g. "127.0.0.1:7780"; an empty host listens on every interface`,
		`$.console.tls.key: name the private key file (PEM)`,
		`$.console.session_lifetime_ms: must be between 60000 (a minute) and 2592000000 (30 days); 0 takes the default, 12 hours`,
	})
	c.Console = &config.Console{Listen: "localhost"}
	checkProblems(t, problems(t, c.Validate(s)), []string{`$.console.listen: want host:port, e.g. "127.0.0.1:7780"`})

	_, err := config.Parse([]byte(`{"console": {"listen": "127.0.0.1:7780", "tls": {"cert": "c", "key": "k", "ca": "x"}, "lifetime": 5}}`))
	checkProblems(t, problems(t, err), []string{
		`$.console.tls.ca: unknown field (known: cert, key)`,
		`$.console.lifetime: unknown field (known: listen, session_lifetime_ms, tls)`,
	})
}
