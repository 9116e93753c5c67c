package gateway_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
)

func TestSetSecrets(t *testing.T) {
	t.Parallel()
	const newToken = "7001:gateway-test-token-revoked-and-new"

	t.Run("ARevokedTokenIsReplacedWithoutARestart", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		g, stop := b.run(t)
		first := b.tg.SendText(ownerID, "before")
		b.waitRows(t, 1)
		b.tg.WaitConfirmed(t, first)

		// BotFather's /revoke: the long poll in flight and every later
		// call with the old token are refused.
		b.tg.RevokeToken(newToken)
		waitFor(t, "a getUpdates refused with the old token", func() bool {
			for _, c := range b.tg.Calls("getUpdates") {
				if c.Status == http.StatusUnauthorized {
					return true
				}
			}
			return false
		})
		if err := g.SetSecrets(config.Secrets{"tg-token": newToken, "tg2-token": otherToken}); err != nil {
			t.Fatal(err)
		}
		second := b.tg.SendText(ownerID, "after")
		if rs := b.waitRows(t, 2); rs[1].Text != "after" || rs[1].UpdateID != second {
			t.Errorf("rows = %+v", rs)
		}
		b.tg.WaitConfirmed(t, second)
		if _, err := g.SendText(context.Background(), "tg", "100", "sent with the new token"); err != nil {
			t.Errorf("send: %v", err)
		}
		// The other bot polls on, untouched.
		elsewhereID := b.tg2.SendText(elsewhere, "other bot")
		b.tg2.WaitConfirmed(t, elsewhereID)
		stop()
		for _, tok := range []string{token, newToken, otherToken} {
			if strings.Contains(b.logs.String(), tok) {
				t.Errorf("a token is in the log: %s", b.logs.String())
			}
		}
		if !strings.Contains(b.logs.String(), "telegram bot token replaced") {
			t.Errorf("the change is not logged: %s", b.logs.String())
		}
	})

	t.Run("AMissingTokenKeepsTheOldOneAndSaysWhich", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		g, _ := b.run(t)
		err := g.SetSecrets(config.Secrets{"tg-token": token})
		if err == nil || !strings.Contains(err.Error(), `gateway "tg2" keeps its bot token`) ||
			!strings.Contains(err.Error(), "choirctl secret set tg2-token") {
			t.Errorf("SetSecrets without tg2's token: %v", err)
		}
		id := b.tg2.SendText(elsewhere, "still polling")
		b.tg2.WaitConfirmed(t, id)
	})
}
