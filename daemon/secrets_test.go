package daemon_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/atrest"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
)

// choirdLog reads home's choird.log, one map per JSON line.
func choirdLog(t *testing.T, home string) []map[string]any {
	t.Helper()
	f, err := os.Open(filepath.Join(home, "logs", "choird.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		lines = append(lines, m)
	}
	return lines
}

func logLine(lines []map[string]any, msg string) map[string]any {
	if i := slices.IndexFunc(lines, func(m map[string]any) bool { return m["msg"] == msg }); i >= 0 {
		return lines[i]
	}
	return nil
}

// TestEncryptedSecretsAndTokenReload sets $CREDENTIALS_DIRECTORY, as
// systemd's LoadCredentialEncrypted= does, so it is not parallel. choird
// starts on an age-encrypted secrets.json whose key is a systemd
// credential; the bot's token is revoked, set anew with choirctl (the file
// stays encrypted) and applied: the bot answers with the new token, and
// choird never restarted.
func TestEncryptedSecretsAndTokenReload(t *testing.T) {
	const (
		oldToken = "5150:secrets-at-rest-old"
		newToken = "5150:secrets-at-rest-new"
		bossID   = int64(5100)
	)
	tg := telegramtest.NewServer(t)
	bot := tg.AddBot(oldToken, "choir_rest_bot")
	h := choirdtest.WriteHome(t, choirdtest.Options{Edit: func(cfg *config.Config, secrets config.Secrets) {
		cfg.Gateways["tg"] = config.Gateway{Type: config.GatewayTelegram, Secret: "tg-token"}
		secrets["tg-token"] = oldToken
		cfg.DMs["boss"] = config.DM{Gateway: "tg", UserID: "5100", Admin: true}
	}})
	if code, _, stderr := choirctltest.Run(t, h.Dir, "secret", "encrypt"); code != 0 {
		t.Fatalf("secret encrypt: %s", stderr)
	}
	// The key leaves .choir.d for where systemd puts a credential.
	creds := t.TempDir()
	credPath := filepath.Join(creds, atrest.CredentialName)
	if err := os.Rename(filepath.Join(h.Dir, atrest.KeyFileName), credPath); err != nil {
		t.Fatal(err)
	}
	os.Chmod(credPath, 0o400)
	t.Setenv("CREDENTIALS_DIRECTORY", creds)
	t.Setenv(atrest.KeyFileEnv, "")

	d := choirdtest.Start(t, choirdtest.Options{Home: h.Dir, DatabaseURL: h.DatabaseURL,
		Daemon: daemon.Options{TelegramAPIURL: tg.URL()}})
	lines := choirdLog(t, d.Home)
	step2 := logLine(lines, "step 2: secrets.json read and validated")
	if step2 == nil || step2["encrypted"] != true || step2["age_key"] != "systemd credential choir-age-key ("+credPath+")" {
		t.Errorf("step 2 = %v", step2)
	}
	if logLine(lines, config.PlaintextWarning) != nil {
		t.Error("choird warned of a plaintext secrets.json")
	}

	bot.RevokeToken(newToken)
	code, stdout, stderr := choirctltest.Run(t, h.Dir, "secret", "set", "tg-token", newToken)
	if code != 0 || !strings.Contains(stdout, "age-encrypted") {
		t.Fatalf("secret set: %d %s %s", code, stdout, stderr)
	}
	if data, _ := os.ReadFile(filepath.Join(h.Dir, config.SecretsFile)); !atrest.IsEncrypted(data) ||
		strings.Contains(string(data), newToken) {
		t.Fatalf("secrets.json is no longer encrypted:\n%s", data)
	}
	if code, stdout, stderr := choirctltest.Run(t, h.Dir, "secret", "apply"); code != 0 {
		t.Fatalf("secret apply: %d %s %s", code, stdout, stderr)
	}
	id := bot.SendText(bossID, "/status")
	bot.WaitConfirmed(t, id)
	if sent := bot.WaitSent(t, 1); sent[0].ChatID != "5100" {
		t.Errorf("sent = %+v", sent)
	}
	if logs := d.Logs.String(); strings.Contains(logs, oldToken) || strings.Contains(logs, newToken) {
		t.Errorf("a token is in choird's log")
	}
}

func TestPlaintextSecretsAreWarnedOf(t *testing.T) {
	t.Parallel()
	d := choirdtest.Start(t, choirdtest.Options{})
	w := logLine(choirdLog(t, d.Home), config.PlaintextWarning)
	if w == nil || w["level"] != "WARN" || !strings.Contains(config.PlaintextWarning, "choirctl secret encrypt") {
		t.Errorf("no warning of the plaintext secrets.json: %v", w)
	}
}
