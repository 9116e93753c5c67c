package config_test

import (
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
)

func TestEmailPolicy(t *testing.T) {
	t.Parallel()

	t.Run("ParsesFlatInTheAccount", func(t *testing.T) {
		t.Parallel()
		data := `{"email_accounts": {"primary": {"smtp_host": "smtp.example.com", "smtp_port": 587, "imap_host": "imap.example.com",
			"imap_port": 993, "sharing": "exclusive", "secret": "mail", "address": "agent@example.com", "require_approval": true,
			"allowed_recipients": ["boss@corp.test", "@example.com"], "wake": true, "poll_seconds": 300,
			"wake_from": ["boss@corp.test", "@trusted.test"], "wake_per_hour": 5}}}`
		c, err := config.Parse([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		e := c.EmailAccounts["primary"]
		if !e.RequireApproval || !e.Wake || e.PollSeconds != 300 || e.Login() != "agent@example.com" || e.Folder() != "INBOX" ||
			e.AttachmentLimit() != config.DefaultEmailAttachmentBytes || e.WakeLimit() != 5 {
			t.Errorf("parsed %+v", e)
		}
		for addr, ok := range map[string]bool{"boss@corp.test": true, "BOSS@corp.test": true, "x@example.com": true,
			"x@sub.example.com": false, "eve@corp.test": false} {
			if e.MaySendTo(addr) != ok {
				t.Errorf("MaySendTo(%s) = %v, want %v", addr, !ok, ok)
			}
		}
		for addr, ok := range map[string]bool{"Boss@Corp.test": true, "anyone@trusted.test": true, "eve@corp.test": false,
			"x@sub.trusted.test": false, "agent@example.com": false} {
			if e.MayWake(addr) != ok {
				t.Errorf("MayWake(%s) = %v, want %v", addr, !ok, ok)
			}
		}
	})

	// A stranger's mail never starts a turn unless wake_from names the
	// sender, and an account that may send to anyone sends nothing
	// without approval.
	t.Run("DefaultsAreSafe", func(t *testing.T) {
		t.Parallel()
		c, err := config.Parse([]byte(`{"email_accounts": {"p": {"address": "agent@example.com", "wake": true}}}`))
		if err != nil {
			t.Fatal(err)
		}
		e := c.EmailAccounts["p"]
		if e.MayWake("boss@example.com") || e.MayWake("agent@example.com") {
			t.Error("an empty wake_from lets mail wake the agent")
		}
		if !e.NeedsApproval() || !e.MaySendTo("anyone@else.test") {
			t.Errorf("no allowed_recipients: NeedsApproval %v, MaySendTo %v; want approval for mail to anyone", e.NeedsApproval(),
				e.MaySendTo("anyone@else.test"))
		}
		if e.WakeLimit() != config.DefaultEmailWakePerHour {
			t.Errorf("WakeLimit() = %d, want the default %d", e.WakeLimit(), config.DefaultEmailWakePerHour)
		}
		e.AllowedRecipients = []string{"@example.com"}
		if e.NeedsApproval() {
			t.Error("listed recipients and no require_approval still need approval")
		}
	})

	t.Run("InvalidFieldsNamed", func(t *testing.T) {
		t.Parallel()
		c, s := specConfig(t), specSecrets()
		e := c.EmailAccounts["primary-email"]
		e.Address, e.TLS, e.AllowedRecipients = "Agent <a@b.c>", "starttls", []string{"ok@x.test", "@", "nobody", "@x.test"}
		e.WakeFrom, e.WakePerHour = []string{"Bob <bob@x.test>", "@ok.test", "x.test"}, 61
		e.MaxAttachmentBytes, e.PollSeconds = -1, -5
		c.EmailAccounts["primary-email"] = e
		checkProblems(t, problems(t, c.Validate(s)), []string{
			`$.email_accounts["primary-email"].address: must be a bare email address such as agent@example.com`,
			`$.email_accounts["primary-email"].tls: must be omitted (TLS on 465/993, STARTTLS elsewhere) or "none"`,
			`$.email_accounts["primary-email"].allowed_recipients[1]: must be an address such as "bob@example.com" or a domain such as "@example.com"`,
			`$.email_accounts["primary-email"].allowed_recipients[2]: must be an address such as "bob@example.com" or a domain such as "@example.com"`,
			`$.email_accounts["primary-email"].wake_from[0]: must be an address such as "bob@example.com" or a domain such as "@example.com"`,
			`$.email_accounts["primary-email"].wake_from[2]: must be an address such as "bob@example.com" or a domain such as "@example.com"`,
			`$.email_accounts["primary-email"].wake_per_hour: must be 0 (20) or 1 to 60 turns an hour, e.g. 10`,
			`$.email_accounts["primary-email"].max_attachment_bytes: must be 0 (10 MiB) or a positive number of bytes, e.g. 26214400`,
			`$.email_accounts["primary-email"].poll_seconds: must be 0 (IMAP IDLE) or 1 to 86400 seconds, e.g. 300`,
		})
	})

	t.Run("WakeFromOfTheWrongTypeNamed", func(t *testing.T) {
		t.Parallel()
		_, err := config.Parse([]byte(`{"email_accounts": {"p": {"wake_from": "bob@example.com"}}}`))
		if err == nil || !strings.Contains(err.Error(), `$.email_accounts.p.wake_from`) {
			t.Errorf("err = %v, want the field's JSON path", err)
		}
	})

	t.Run("UnknownFieldRejected", func(t *testing.T) {
		t.Parallel()
		_, err := config.Parse([]byte(`{"email_accounts": {"p": {"wake_on_mail": true}}}`))
		if err == nil || !strings.Contains(err.Error(), "wake_on_mail") {
			t.Errorf("err = %v, want the unknown field named", err)
		}
	})
}
