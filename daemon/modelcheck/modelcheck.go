// Package modelcheck asks each LLM endpoint of config.json whether it
// answers, and whether it takes its key, with the OpenAI-compatible
// GET <endpoint>/models: at choird's start, so that its log says plainly
// when no model is reachable (and the first chat would only answer "I
// could not reach the model"), and for choirctl status.
package modelcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/modelenv"
	"github.com/choirhq/choir/rpc/admin"
)

// Timeout bounds one round of probes: they run side by side, so a
// black-holed endpoint costs this once.
const Timeout = 3 * time.Second

// Probe asks every model of cfg at once, each with its key from secrets,
// and returns what each answered, sorted by name.
func Probe(ctx context.Context, hc *http.Client, cfg *config.Config, secrets config.Secrets) []admin.ModelStatus {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	names := slices.Sorted(maps.Keys(cfg.Models))
	out := make([]admin.ModelStatus, len(names))
	var wg sync.WaitGroup
	for i, name := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = probeOne(ctx, hc, name, cfg.Models[name], secrets)
		}()
	}
	wg.Wait()
	return out
}

func probeOne(ctx context.Context, hc *http.Client, name string, m config.Model, secrets config.Secrets) admin.ModelStatus {
	st := admin.ModelStatus{Name: name, Model: m.Model, Endpoint: m.Endpoint}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(m.Endpoint, "/")+"/models", nil)
	if err != nil {
		st.Error = fmt.Sprintf("endpoint %s is not a URL: %v", m.Endpoint, err)
		return st
	}
	if m.Secret != "" {
		key, ok := secrets[m.Secret]
		if !ok {
			st.Error = fmt.Sprintf("its key, secret %s, is not in secrets.json: choirctl secret set %s", m.Secret, m.Secret)
			return st
		}
		req.Header.Set("Authorization", "Bearer "+key)
	}
	res, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s", Timeout)
		}
		st.Error = fmt.Sprintf("nothing answers at %s: %v", m.Endpoint, err)
		return st
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20)) //nolint:errcheck
	res.Body.Close()
	switch {
	case res.StatusCode == http.StatusUnauthorized || res.StatusCode == http.StatusForbidden:
		st.Error = rejected(m, res.StatusCode)
	case res.StatusCode >= 500:
		st.Error = fmt.Sprintf("%s answers HTTP %d", m.Endpoint, res.StatusCode)
	default:
		// 2xx, and 404 from servers without a model listing: it answers.
		st.Reachable = true
	}
	return st
}

// rejected says that the provider refused the key, naming the
// environment variable choirctl init --local took it from, if it did.
func rejected(m config.Model, code int) string {
	if m.Secret == "" {
		return fmt.Sprintf("%s rejects requests without a key (HTTP %d): set models.<name>.secret and the key in secrets.json", m.Endpoint, code)
	}
	from := ""
	if env, ok := modelenv.ModelKeyEnv[m.Secret]; ok {
		from = fmt.Sprintf(" (from the environment variable %s at choirctl init)", env)
	}
	return fmt.Sprintf("%s rejects the key in secret %s%s with HTTP %d: set a valid key with choirctl secret set %s, then choirctl secret apply",
		m.Endpoint, m.Secret, from, code, m.Secret)
}

// NoneReachable says, when no model in st answers, that agents cannot
// talk and how to give them a model; "" when one does.
func NoneReachable(st []admin.ModelStatus) string {
	for _, s := range st {
		if s.Reachable {
			return ""
		}
	}
	return "no model is reachable, so agents answer only \"I could not reach the model\": " + modelenv.ModelEnvHelp
}
