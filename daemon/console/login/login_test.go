package login_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/daemon/console/login"
	"github.com/choirhq/choir/dbtest"
)

func setup(t *testing.T) *login.Store {
	t.Helper()
	return login.New(dbtest.NewPool(t), time.Hour, "http://127.0.0.1:7780/")
}

func token(t *testing.T, s *login.Store) string {
	t.Helper()
	l, err := s.Issue(context.Background(), "choirctl:uid=0")
	if err != nil {
		t.Fatal(err)
	}
	tok, ok := strings.CutPrefix(l.URL, "http://127.0.0.1:7780/login?token=")
	if !ok || time.Until(l.ExpiresAt) > login.TokenLifetime || time.Until(l.ExpiresAt) < login.TokenLifetime-5*time.Second {
		t.Fatalf("link %+v", l)
	}
	return tok
}

// TestExchangeOnce: of many browsers racing with one link, exactly one
// gets a session; its secret authenticates it, as the operator, named
// console:<prefix>; nothing stored is a token or a secret.
func TestExchangeOnce(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	tok := token(t, s)
	var mu sync.Mutex
	var won []string
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			_, secret, err := s.Exchange(ctx, tok, "test")
			if err != nil && !errors.Is(err, login.ErrInvalid) {
				t.Error(err)
			}
			if err == nil {
				mu.Lock()
				won = append(won, secret)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(won) != 1 {
		t.Fatalf("%d exchanges of one link won", len(won))
	}
	sess, err := s.Authenticate(ctx, won[0])
	if err != nil || !sess.Scope().Admin || sess.Scope().Actor != "console:"+sess.ID.String()[:8] || sess.CSRF == "" {
		t.Fatalf("session %+v, scope %+v, %v", sess, sess.Scope(), err)
	}
	for _, bad := range []string{"", tok, won[0] + "x"} {
		if _, err := s.Authenticate(ctx, bad); !errors.Is(err, login.ErrInvalid) {
			t.Errorf("Authenticate(%q) = %v", bad, err)
		}
	}
	list, err := s.List(ctx)
	if err != nil || len(list) != 1 || list[0].CreatedBy != "choirctl:uid=0" || list[0].UserAgent != "test" {
		t.Fatalf("list %+v, %v", list, err)
	}
}

// TestRevokeByPrefix: a prefix shorter than eight characters, or with
// LIKE's wildcards, names nothing; eight name the session.
func TestRevokeByPrefix(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	sess, secret, err := s.Exchange(ctx, token(t, s), "")
	if err != nil {
		t.Fatal(err)
	}
	id := sess.ID.String()
	for _, p := range []string{id[:7], "%%%%%%%%", "________", id[:7] + "%"} {
		if ids, err := s.Revoke(ctx, p, "test"); !errors.Is(err, login.ErrShortPrefix) {
			t.Errorf("Revoke(%q) = %v, %v", p, ids, err)
		}
	}
	if _, err := s.Authenticate(ctx, secret); err != nil {
		t.Fatalf("a refused revoke ended the session: %v", err)
	}
	if ids, err := s.Revoke(ctx, strings.ToUpper(id[:8]), "test"); err != nil || len(ids) != 1 || ids[0] != id {
		t.Fatalf("Revoke = %v, %v", ids, err)
	}
	if _, err := s.Authenticate(ctx, secret); !errors.Is(err, login.ErrInvalid) {
		t.Errorf("revoked session authenticated: %v", err)
	}
}
