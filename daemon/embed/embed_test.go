package embed_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/embed/embedtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func cosine(a, b []float32) float64 {
	var dot, na, nb float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
		na += float64(a[i]) * float64(a[i])
		nb += float64(b[i]) * float64(b[i])
	}
	return dot / math.Sqrt(na*nb)
}

func TestOffline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := embed.NewOffline(64)

	t.Run("IsDeterministicAndUnitLength", func(t *testing.T) {
		t.Parallel()
		a, err := e.Embed(ctx, []string{"Deploy the API to production", "deploy the api to production"})
		if err != nil {
			t.Fatal(err)
		}
		for i := range a[0] {
			if a[0][i] != a[1][i] {
				t.Fatalf("case changed the vector at %d", i)
			}
		}
		if n := cosine(a[0], a[0]); math.Abs(n-1) > 1e-6 {
			t.Errorf("norm^2 = %v", n)
		}
	})

	t.Run("SharedWordsMeanSimilarVectors", func(t *testing.T) {
		t.Parallel()
		v, err := e.Embed(ctx, []string{"the deployment pipeline deploys containers",
			"deploying containers with the pipeline", "a recipe for lemon cake"})
		if err != nil {
			t.Fatal(err)
		}
		if near, far := cosine(v[0], v[1]), cosine(v[0], v[2]); near <= far || near < 0.3 {
			t.Errorf("cosine(related) = %.3f, cosine(unrelated) = %.3f", near, far)
		}
	})

	t.Run("TextWithoutWordsStillGetsAUnitVector", func(t *testing.T) {
		t.Parallel()
		v, err := e.Embed(ctx, []string{"...", ""})
		if err != nil {
			t.Fatal(err)
		}
		if n := cosine(v[0], v[0]); math.IsNaN(n) {
			t.Error("zero vector")
		}
	})

	t.Run("IsLabelledOffline", func(t *testing.T) {
		t.Parallel()
		st := e.Status()
		if !st.Offline || !strings.Contains(st.Note, "offline lexical") || st.Model != embed.OfflineModel {
			t.Errorf("status = %+v", st)
		}
	})

	t.Run("RefusesOversizedBatches", func(t *testing.T) {
		t.Parallel()
		if _, err := e.Embed(ctx, make([]string, embed.MaxBatch+1)); !errors.Is(err, embed.ErrBatchTooLarge) {
			t.Errorf("err = %v", err)
		}
	})
}

func TestWords(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"The user deployed THE services", "user deploy service"},
		{"deploying, deploys; deployed!", "deploy deploy deploy"},
		{"queries are running", "query runn"},
		{"naïve café", "naïve café"},
	} {
		if got := strings.Join(embed.Words(c.in), " "); got != c.want {
			t.Errorf("Words(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestClient(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	newClient := func(t *testing.T, url, key string, timeout time.Duration) *embed.Embedder {
		t.Helper()
		e, err := embed.New(config.Embedding{Provider: "test", Model: "m", Dimensions: 16, Endpoint: url + "/v1",
			Secret: "embed-key"}, config.Secrets{"embed-key": key}, embed.Options{Timeout: timeout})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}

	t.Run("ReturnsVectorsInInputOrder", func(t *testing.T) {
		t.Parallel()
		srv := embedtest.New(t, embedtest.Options{Dimensions: 16, APIKey: "k"})
		e := newClient(t, srv.URL, "k", time.Second)
		texts := []string{"alpha beta", "gamma", "delta epsilon"}
		got, err := e.Embed(ctx, texts)
		if err != nil {
			t.Fatal(err)
		}
		for i, text := range texts {
			if want := embed.LexicalVector(text, 16); cosine(got[i], want) < 0.9999 {
				t.Errorf("vector %d is not the one for %q", i, text)
			}
		}
		if st := e.Status(); st.Offline || st.Calls != 1 || st.Texts != 3 || st.LastSuccessAt.IsZero() {
			t.Errorf("status = %+v", st)
		}
	})

	t.Run("BadKeyIsPermanent", func(t *testing.T) {
		t.Parallel()
		srv := embedtest.New(t, embedtest.Options{Dimensions: 16, APIKey: "k"})
		_, err := newClient(t, srv.URL, "wrong", time.Second).Embed(ctx, []string{"x"})
		var ee *embed.Error
		if !errors.As(err, &ee) || ee.StatusCode != 401 || embed.IsTemporary(err) ||
			!strings.Contains(err.Error(), "invalid api key") {
			t.Errorf("err = %v", err)
		}
	})

	t.Run("SetSecretsReplacesTheKeyForTheNextRequest", func(t *testing.T) {
		t.Parallel()
		srv := embedtest.New(t, embedtest.Options{Dimensions: 16, APIKey: "key-new"})
		e := newClient(t, srv.URL, "key-old", time.Second)
		if _, err := e.Embed(ctx, []string{"x"}); err == nil {
			t.Fatal("the old key was accepted")
		}
		if err := e.SetSecrets(config.Secrets{"other": "v"}); err == nil || !strings.Contains(err.Error(), `"embed-key"`) {
			t.Errorf("SetSecrets without the key's secret: %v", err)
		}
		if err := e.SetSecrets(config.Secrets{"embed-key": "key-new"}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Embed(ctx, []string{"x"}); err != nil {
			t.Errorf("Embed with the new key: %v", err)
		}
		if err := embed.NewOffline(16).SetSecrets(nil); err != nil {
			t.Errorf("offline SetSecrets: %v", err)
		}
	})

	t.Run("RateLimitIsTemporaryWithRetryAfter", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "3")
			http.Error(w, `{"error":{"message":"slow down"}}`, http.StatusTooManyRequests)
		}))
		defer srv.Close()
		e := newClient(t, srv.URL, "k", time.Second)
		_, err := e.Embed(ctx, []string{"x"})
		var ee *embed.Error
		if !errors.As(err, &ee) || !ee.Retry || ee.RetryAfter != 3*time.Second {
			t.Errorf("err = %#v", err)
		}
		if st := e.Status(); st.Failures != 1 || st.ConsecutiveFailures != 1 || !strings.Contains(st.LastError, "slow down") {
			t.Errorf("status = %+v", st)
		}
	})

	t.Run("HangIsATemporaryTimeout", func(t *testing.T) {
		t.Parallel()
		srv := embedtest.New(t, embedtest.Options{Dimensions: 16, Faults: embedtest.Faults{Timeout: 1}})
		_, err := newClient(t, srv.URL, "", 100*time.Millisecond).Embed(ctx, []string{"x"})
		if err == nil || !embed.IsTemporary(err) || !strings.Contains(err.Error(), "no answer within 100ms") {
			t.Errorf("err = %v", err)
		}
	})

	t.Run("ServerErrorIsTemporary", func(t *testing.T) {
		t.Parallel()
		srv := embedtest.New(t, embedtest.Options{Dimensions: 16, Faults: embedtest.Faults{Down: true}})
		_, err := newClient(t, srv.URL, "", time.Second).Embed(ctx, []string{"x"})
		if err == nil || !embed.IsTemporary(err) {
			t.Errorf("err = %v", err)
		}
	})

	t.Run("WrongDimensionsArePermanentAndSaySo", func(t *testing.T) {
		t.Parallel()
		srv := embedtest.New(t, embedtest.Options{Dimensions: 8})
		e, err := embed.NewClient(embed.ClientConfig{Endpoint: srv.URL, Model: "m", Dimensions: 8}, embed.Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = e.Embed(ctx, []string{"x"})
		if err != nil {
			t.Fatal(err)
		}
		e, _ = embed.NewClient(embed.ClientConfig{Endpoint: srv.URL, Model: "m"}, embed.Options{})
		// Without a dimensions parameter the server answers its own size,
		// which differs from the zero configured here.
		if _, err := e.Embed(ctx, []string{"x"}); err == nil || embed.IsTemporary(err) ||
			!strings.Contains(err.Error(), "embedding.dimensions") {
			t.Errorf("err = %v", err)
		}
	})

	t.Run("BadEndpointIsRefused", func(t *testing.T) {
		t.Parallel()
		if _, err := embed.NewClient(embed.ClientConfig{Endpoint: "ftp://x", Model: "m", Dimensions: 8}, embed.Options{}); err == nil {
			t.Error("ftp endpoint accepted")
		}
	})
}

// TestBilledRequestsAreReported: each request an API provider answers is
// reported with the tokens its usage says, their cost at the configured
// price and the agent the context names; a provider that reports no
// usage is estimated; the offline embedder reports nothing.
func TestBilledRequestsAreReported(t *testing.T) {
	t.Parallel()
	srv := embedtest.New(t, embedtest.Options{Dimensions: 16})
	e, err := embed.New(config.Embedding{Provider: "test", Model: "m", Dimensions: 16, Endpoint: srv.URL + "/v1"}, nil, embed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var got []embed.Usage
	e.SetUsage(20, func(_ context.Context, u embed.Usage) { got = append(got, u) })
	ctx := embed.ForAgent(context.Background(), "assistant", "memory")
	if _, err := e.Embed(ctx, []string{"alpha beta", "gamma delta epsilon"}); err != nil {
		t.Fatal(err)
	}
	want := embed.Usage{AgentID: "assistant", Purpose: "memory", Service: "test/m", Tokens: 5, CostUSD: 5 * 20 / 1e6}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("usage reported %+v, want %+v", got, want)
	}

	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"data": [{"index": 0, "embedding": [1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]}]}`))
	}))
	t.Cleanup(silent.Close)
	e2, _ := embed.New(config.Embedding{Provider: "quiet", Model: "q", Dimensions: 16, Endpoint: silent.URL}, nil, embed.Options{})
	got = nil
	e2.SetUsage(20, func(_ context.Context, u embed.Usage) { got = append(got, u) })
	if _, err := e2.Embed(ctx, []string{strings.Repeat("x", 400)}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Tokens != 100 || !got[0].Estimated || got[0].CostUSD != 100*20/1e6 {
		t.Errorf("without usage in the answer: %+v, want 100 tokens estimated", got)
	}

	off := embed.NewOffline(16)
	off.SetUsage(20, func(_ context.Context, u embed.Usage) { t.Errorf("the offline embedder reported %+v", u) })
	if _, err := off.Embed(ctx, []string{"alpha"}); err != nil {
		t.Fatal(err)
	}
}
