package config_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/strictjson"
)

// distinct marks every secret value in these tests, so that a leak into an
// error message or log line is easy to spot.
const distinct = "sk-DISTINCTIVE-7q3x"

// specSecrets returns a value for every secret the spec example references.
func specSecrets() config.Secrets {
	s := config.Secrets{"postgres-admin-creds": "choir:" + distinct}
	for _, name := range []string{
		"openrouter-key", "elevenlabs-key", "git-dev-token", "git-ops-token",
		"notion-personal-key", "notion-work-key", "email-primary-creds",
		"email-notify-creds", "brave-api-key", "tg-bot-main-token", "tg-bot-work-token",
	} {
		s[name] = distinct + "-" + name
	}
	return s
}

// specConfig parses the spec's example config.json.
func specConfig(t *testing.T) *config.Config {
	t.Helper()
	data, err := os.ReadFile("testdata/spec-example.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(data)
	if err != nil {
		t.Fatalf("Parse spec example: %v", err)
	}
	return c
}

// problems returns the problems of an *strictjson.Error as "path: message".
func problems(t *testing.T, err error) []string {
	t.Helper()
	var ce *strictjson.Error
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *strictjson.Error", err)
	}
	var ps []string
	for _, p := range ce.Problems {
		ps = append(ps, p.String())
	}
	return ps
}

// checkProblems compares problems with patterns; a trailing * in a pattern
// matches any suffix.
func checkProblems(t *testing.T, got, want []string) {
	t.Helper()
	ok := len(got) == len(want)
	for i := 0; ok && i < len(got); i++ {
		if p, wild := strings.CutSuffix(want[i], "*"); wild {
			ok = strings.HasPrefix(got[i], p)
		} else {
			ok = got[i] == want[i]
		}
	}
	if !ok {
		t.Errorf("problems:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

func TestSpecExample(t *testing.T) {
	t.Parallel()

	c := specConfig(t)
	if err := c.Validate(specSecrets()); err != nil {
		t.Fatalf("Validate spec example: %v", err)
	}

	t.Run("ParsesEveryField", func(t *testing.T) {
		t.Parallel()
		if got := c.Models["o3"]; got.Temperature != nil || got.ReasoningEffort == nil || *got.ReasoningEffort != "medium" {
			t.Errorf("o3 = %+v, want null temperature and medium effort", got)
		}
		if got := *c.Models["sonnet"].Temperature; got != 0.7 {
			t.Errorf("sonnet temperature = %v", got)
		}
		want := config.VoiceSettings{Stability: 0.8, SimilarityBoost: 0.9, Style: 0.3, Speed: 0.9}
		if got := c.VoiceProfiles["narrator"].VoiceSettings; got != want {
			t.Errorf("narrator voice settings = %+v, want %+v", got, want)
		}
		if got := c.EmailAccounts["notifications"]; got.Sharing != config.EmailShared || got.IMAPPort != 993 {
			t.Errorf("notifications = %+v", got)
		}
		if got := c.DMs["work-dm"]; got != (config.DM{Gateway: "bot-work", UserID: "123456789", Admin: true}) {
			t.Errorf("work-dm = %+v", got)
		}
		if got := c.Agents["agent-1"].Defaults.Notion; got != "personal-wiki" {
			t.Errorf("agent-1 notion = %q", got)
		}
		if c.GlobalRepo.URL != "git@github.com:org/choir-global.git" || c.Embedding.Dimensions != 1536 {
			t.Errorf("global repo %+v, embedding %+v", c.GlobalRepo, c.Embedding)
		}
	})

	t.Run("OmittedTunablesTakeDefaults", func(t *testing.T) {
		t.Parallel()
		if c.ApprovalTimeout().Minutes() != 30 || c.SessionSummaryTimeout().Seconds() != 30 ||
			c.MidTermSessions != 10 || c.SnapshotEveryEvents != 100 || c.HeartbeatInterval().Milliseconds() != 5000 {
			t.Errorf("tunables: %+v", c)
		}
	})

	t.Run("MarshalRoundTrips", func(t *testing.T) {
		t.Parallel()
		data, err := c.MarshalIndent()
		if err != nil {
			t.Fatal(err)
		}
		back, err := config.Parse(data)
		if err != nil {
			t.Fatalf("Parse(MarshalIndent): %v\n%s", err, data)
		}
		if !reflect.DeepEqual(back, c) {
			t.Errorf("round trip changed the config:\n%s", data)
		}
	})
}

func TestParseRejects(t *testing.T) {
	t.Parallel()

	spec, err := os.ReadFile("testdata/spec-example.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{
			name: "UnknownFieldWithPath",
			doc:  strings.Replace(string(spec), `"workspace": "main-ws"`, `"wrkspace": "main-ws"`, 1),
			want: []string{`$.agents["agent-1"].defaults.wrkspace: unknown field, did you mean workspace? (known: core_llm, dm, email, git_identity, llm, notion, voice_profile, workspace)`},
		},
		{
			name: "UnknownTopLevelSection",
			doc:  `{"workspace": {}}`,
			want: []string{`$.workspace: unknown field, did you mean workspaces? *`},
		},
		{
			name: "DuplicateKey",
			doc:  `{"workspaces": {"main": {"path": "/a"}, "main": {"path": "/b"}}}`,
			want: []string{`$.workspaces.main: duplicate key`},
		},
		{
			name: "TrailingData",
			doc:  string(spec) + "{}",
			want: []string{`$: unexpected data after top-level value at line 177, column 1`},
		},
		{
			name: "TypeMismatch",
			doc:  `{"models": {"m": {"temperature": "hot"}}, "postgres": {"port": "5432"}}`,
			want: []string{`$.models.m.temperature: expected number, got string`, `$.postgres.port: expected integer, got string`},
		},
		{
			name: "NullForRequiredObject",
			doc:  `{"postgres": null}`,
			want: []string{`$.postgres: expected object, got null`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Parse([]byte(tt.doc))
			checkProblems(t, problems(t, err), tt.want)
		})
	}
}

func TestParseSecrets(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsFlatObjectOfStrings", func(t *testing.T) {
		t.Parallel()
		s, err := config.ParseSecrets([]byte(`{"b": "2", "a": "1", "empty": ""}`))
		if err != nil {
			t.Fatal(err)
		}
		if got := s.Names(); !reflect.DeepEqual(got, []string{"a", "b", "empty"}) {
			t.Errorf("Names() = %v", got)
		}
		if s["a"] != "1" {
			t.Errorf("a = %q", s["a"])
		}
	})

	tests := []struct {
		name string
		doc  string
		want []string
	}{
		{"NonStringValue", `{"a": 1, "b": {"c": "d"}}`, []string{`$.a: expected string, got number`, `$.b: expected string, got object`}},
		{"NullValue", `{"a": null}`, []string{`$.a: expected string, got null`}},
		{"DuplicateName", `{"a": "` + distinct + `", "a": "` + distinct + `"}`, []string{`$.a: duplicate key`}},
		{"TrailingData", `{"a": "x"} "` + distinct + `"`, []string{`$: unexpected data after top-level value at line 1, column 12`}},
		{"NotAnObject", `["` + distinct + `"]`, []string{`$: expected object, got array`}},
		{"SyntaxErrorInsideValue", `{"a": "` + distinct + "\n" + `"}`, []string{`$.a: syntax error at line 1, column 27: invalid character '\n' in string literal`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.ParseSecrets([]byte(tt.doc))
			checkProblems(t, problems(t, err), tt.want)
			if strings.Contains(err.Error(), distinct) {
				t.Errorf("error shows a secret value: %v", err)
			}
		})
	}
}

func TestSecretsRedact(t *testing.T) {
	t.Parallel()

	s := config.Secrets{"api-key": distinct, "db": "u:" + distinct}
	var outputs []string
	for _, format := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d"} {
		outputs = append(outputs, fmt.Sprintf(format, s))
	}
	outputs = append(outputs, fmt.Sprintf("%T %v", s, s), fmt.Sprint(s), fmt.Sprintln(s), s.String(), s.GoString())
	outputs = append(outputs, fmt.Sprintf("%v", struct{ S config.Secrets }{s}))

	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("loaded", "secrets", s)
	slog.New(slog.NewTextHandler(&logs, nil)).Info("loaded", "secrets", s)
	outputs = append(outputs, logs.String())

	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	outputs = append(outputs, string(data))

	for _, out := range outputs {
		if strings.Contains(out, distinct) || strings.Contains(out, "7q3x") {
			t.Errorf("output shows a secret value: %s", out)
		}
		if !strings.Contains(out, "api-key") && !strings.Contains(out, "61") { // %x renders names in hex
			t.Errorf("output does not name the secrets: %s", out)
		}
	}
	if got, want := s.String(), "map[api-key:REDACTED db:REDACTED]"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := string(data), `{"api-key":"REDACTED","db":"REDACTED"}`; got != want {
		t.Errorf("json.Marshal = %s, want %s", got, want)
	}
}

func TestSchemaName(t *testing.T) {
	t.Parallel()

	tests := []struct{ id, want string }{
		{"agent-1", "choir_agent_1"},
		{"agent_1", "choir_agent_1"},
		{"a", "choir_a"},
		{"a-b-c", "choir_a_b_c"},
	}
	for _, tt := range tests {
		if got := config.SchemaName(tt.id); got != tt.want {
			t.Errorf("SchemaName(%q) = %q, want %q", tt.id, got, tt.want)
		}
	}
}

func TestPostgresDSN(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		pg      config.Postgres
		secret  string
		want    string
		wantErr string
	}{
		{
			name:   "HostAndPassword",
			pg:     config.Postgres{Host: "localhost", Port: 5432, Database: "choir", Secret: "pg"},
			secret: "choir:pw",
			want:   `host='localhost' port='5432' dbname='choir' user='choir' password='pw'`,
		},
		{
			name:   "EmptyPasswordIsOmitted",
			pg:     config.Postgres{Host: "db.internal", Port: 6543, Database: "choir", Secret: "pg"},
			secret: "postgres:",
			want:   `host='db.internal' port='6543' dbname='choir' user='postgres'`,
		},
		{
			name:   "SocketDirectoryHost",
			pg:     config.Postgres{Host: "/var/run/postgresql", Port: 5432, Database: "choir", Secret: "pg", SSLMode: "disable"},
			secret: "postgres:",
			want:   `host='/var/run/postgresql' port='5432' dbname='choir' user='postgres' sslmode='disable'`,
		},
		{
			name:   "PasswordWithColonsQuotesAndSpacesIsQuoted",
			pg:     config.Postgres{Host: "::1", Port: 5432, Database: "my db", Secret: "pg"},
			secret: `o'neil:a:b c\'d`,
			want:   `host='::1' port='5432' dbname='my db' user='o\'neil' password='a:b c\\\'d'`,
		},
		{
			name:    "MissingSecret",
			pg:      config.Postgres{Host: "localhost", Port: 5432, Database: "choir", Secret: "absent"},
			secret:  "x:y",
			wantErr: `secret "absent" is not in secrets.json; set it with: choirctl secret set absent: bad postgres secret`,
		},
		{
			name:    "SecretWithoutColon",
			pg:      config.Postgres{Host: "localhost", Port: 5432, Database: "choir", Secret: "pg"},
			secret:  distinct,
			wantErr: `secret "pg" must have the form user:password (the password may be empty): bad postgres secret`,
		},
		{
			name:    "SecretWithEmptyUser",
			pg:      config.Postgres{Host: "localhost", Port: 5432, Database: "choir", Secret: "pg"},
			secret:  ":" + distinct,
			wantErr: `secret "pg" must have the form user:password (the password may be empty): bad postgres secret`,
		},
		{
			name:    "NulInPassword",
			pg:      config.Postgres{Host: "localhost", Port: 5432, Database: "choir", Secret: "pg"},
			secret:  "u:" + distinct + "\x00",
			wantErr: `postgres password contains a NUL byte`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &config.Config{Postgres: tt.pg}
			got, err := c.PostgresDSN(config.Secrets{"pg": tt.secret})
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("PostgresDSN error = %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("PostgresDSN =\n  %s\nwant\n  %s", got, tt.want)
			}
		})
	}

	t.Run("ErrorsWrapSentinel", func(t *testing.T) {
		t.Parallel()
		c := &config.Config{Postgres: config.Postgres{Secret: "pg"}}
		if _, err := c.PostgresDSN(nil); !errors.Is(err, config.ErrPostgresSecret) {
			t.Errorf("err = %v, want ErrPostgresSecret", err)
		}
	})
}

func TestPostgresDescribe(t *testing.T) {
	t.Parallel()

	tests := []struct {
		pg   config.Postgres
		want string
	}{
		{config.Postgres{Host: "localhost", Port: 5432}, "localhost:5432"},
		{config.Postgres{Host: "::1", Port: 5433}, "[::1]:5433"},
		{config.Postgres{Host: "/var/run/postgresql", Port: 5432}, "/var/run/postgresql/.s.PGSQL.5432"},
	}
	for _, tt := range tests {
		if got := tt.pg.Describe(); got != tt.want {
			t.Errorf("Describe(%+v) = %q, want %q", tt.pg, got, tt.want)
		}
	}
}

func TestBudgetsDefaults(t *testing.T) {
	got := config.Budgets{MaxCoreJobs: 2}.WithDefaults()
	want := config.Budgets{MaxCoreJobs: 2, TotalSessionTokens: config.DefaultTotalSessionTokens,
		MaxToolCallsPerSession: config.DefaultMaxToolCallsPerSession, MaxStepsPerMessage: config.DefaultMaxStepsPerMessage,
		PerJobMaxSteps: config.DefaultPerJobMaxSteps, PerJobMaxToolCalls: config.DefaultPerJobMaxToolCalls,
		PerJobWallTimeMS: config.DefaultPerJobWallTimeMS, MaxInjectionsPerJob: config.DefaultMaxInjectionsPerJob}
	if got != want {
		t.Fatalf("WithDefaults = %+v, want %+v", got, want)
	}
	if d := (config.Model{}).ContextWindowTokens(); d != config.DefaultContextWindow {
		t.Fatalf("default context window = %d", d)
	}
}
