package configdiff_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/configdiff"
	"github.com/choirhq/choir/config/starter"
)

func TestDiff(t *testing.T) {
	t.Parallel()
	base := func() *config.Config {
		c, _ := starter.Local("/srv/choir", config.Postgres{Host: "localhost", Port: 5432, Database: "choir"})
		return c
	}
	temp := 0.5

	tests := []struct {
		name string
		edit func(c *config.Config)
		want []string
	}{
		{"EqualConfigsHaveNoChanges", func(*config.Config) {}, nil},
		{"OmittedTunableEqualsItsDefault", func(c *config.Config) { c.HeartbeatIntervalMS = 0 }, nil},
		{"ChangedLeafIsOneLineWithOldAndNew", func(c *config.Config) {
			m := c.Models["local"]
			m.Endpoint = "http://10.0.0.2:8080/v1"
			c.Models["local"] = m
		}, []string{"~ models.local.endpoint: http://127.0.0.1:11434/v1 -> http://10.0.0.2:8080/v1"}},
		{"AddedAndRemovedResourcesAreOneEntryEach", func(c *config.Config) {
			c.DMs["bob"] = config.DM{Gateway: "console", UserID: "bob"}
			delete(c.Agents, "assistant")
			c.Agents["old"] = config.Agent{}
		}, []string{"- agents.assistant", "+ agents.old", "+ dms.bob"}},
		{"NumbersAndNullsAreJSON", func(c *config.Config) {
			c.ApprovalTimeoutMS = 60000
			m := c.Models["local"]
			m.Temperature = &temp
			c.Models["local"] = m
		}, []string{"~ approval_timeout_ms: 1800000 -> 60000", "~ models.local.temperature: null -> 0.5"}},
		{"QuotedKeysAndEmptyStrings", func(c *config.Config) {
			c.Agents["assistant-2"] = c.Agents["assistant"]
			a := c.Agents["assistant"]
			a.Defaults.DM = ""
			c.Agents["assistant"] = a
		}, []string{`~ agents.assistant.defaults.dm: console -> ""`, `+ agents["assistant-2"]`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			running, staged := base(), base()
			tt.edit(staged)
			changes, err := configdiff.Diff(running, staged)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, c := range changes {
				got = append(got, c.String())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Diff =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestChangeKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path string
		want []string
	}{
		{"$", nil},
		{"$.models.local.endpoint", []string{"models", "local", "endpoint"}},
		{`$.agents["a-1"].repo.ref`, []string{"agents", "a-1", "repo", "ref"}},
		{`$["odd.key"]`, []string{"odd.key"}},
	}
	for _, tt := range tests {
		if got := (configdiff.Change{Path: tt.path}).Keys(); !slices.Equal(got, tt.want) {
			t.Errorf("Keys(%s) = %q, want %q", tt.path, got, tt.want)
		}
	}
}

func TestSecretsDiffNeverShowsValues(t *testing.T) {
	t.Parallel()
	running := config.Secrets{"kept": "v-kept-1111", "rotated": "v-old-2222", "gone": "v-gone-3333"}
	staged := config.Secrets{"kept": "v-kept-1111", "rotated": "v-new-4444", "new-key": "v-new-5555"}
	changes := configdiff.SecretsDiff(running, staged)
	var lines []string
	for _, c := range changes {
		lines = append(lines, c.String())
	}
	want := []string{"- secrets.json: gone", "+ secrets.json: new-key", "~ secrets.json: rotated (value changed)"}
	if !slices.Equal(lines, want) {
		t.Errorf("SecretsDiff =\n%s\nwant\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	report := configdiff.DiffReport{Changes: changes}
	data, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{string(data), report.String()} {
		for _, v := range []string{"v-kept", "v-old", "v-gone", "v-new"} {
			if strings.Contains(out, v) {
				t.Errorf("a secret value appears in the report: %s", out)
			}
		}
	}
}
