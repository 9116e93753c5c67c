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
			"allowed_recipients": ["boss@corp.test", "@example.com"], "wake": true, "poll_seconds": 300}}}`
		c, err := config.Parse([]byte(data))
		if err != nil {
			t.Fatal(err)
		}
		e := c.EmailAccounts["primary"]
		if !e.RequireApproval || !e.Wake || e.PollSeconds != 300 || e.Login() != "agent@example.com" || e.Folder() != "INBOX" ||
			e.AttachmentLimit() != config.DefaultEmailAttachmentBytes {
			t.Errorf("parsed %+v", e)
		}
		for addr, ok := range map[string]bool{"boss@corp.test": true, "BOSS@corp.test": true, "x@example.com": true,
			"x@sub.example.com": false, "eve@corp.test": false} {
			if e.MaySendTo(addr) != ok {
				t.Errorf("MaySendTo(%s) = %v, want %v", addr, !ok, ok)
			}
		}
	})

	t.Run("InvalidFieldsNamed", func(t *testing.T) {
		t.Parallel()
		c, s := specConfig(t), specSecrets()
		e := c.EmailAccounts["primary-email"]
		e.Address, e.TLS, e.AllowedRecipients = "Agent <a@b.c>", "starttls", []string{"ok@x.test", "@", "nobody", "@x.test"}
		e.MaxAttachmentBytes, e.PollSeconds = -1, -5
		c.EmailAccounts["primary-email"] = e
		checkProblems(t, problems(t, c.Validate(s)), []string{
			`$.email_accounts["primary-email"].address: must be a bare email address such as agent@example.com`,
			`$.email_accounts["primary-email"].tls: must be omitted (TLS on 465/993, STARTTLS elsewhere) or "none"`,
			`$.email_accounts["primary-email"].allowed_recipients[1]: must be an address such as "bob@example.com" or a domain such as "@example.com"`,
			`$.email_accounts["primary-email"].allowed_recipients[2]: must be an address such as "bob@example.com" or a domain such as "@example.com"`,
			`$.email_accounts["primary-email"].max_attachment_bytes: must be 0 (10 MiB) or a positive number of bytes, e.g. 26214400`,
			`$.email_accounts["primary-email"].poll_seconds: must be 0 (IMAP IDLE) or 1 to 86400 seconds, e.g. 300`,
		})
	})

	t.Run("UnknownFieldRejected", func(t *testing.T) {
		t.Parallel()
		_, err := config.Parse([]byte(`{"email_accounts": {"p": {"wake_on_mail": true}}}`))
		if err == nil || !strings.Contains(err.Error(), "wake_on_mail") {
			t.Errorf("err = %v, want the unknown field named", err)
		}
	})
}
