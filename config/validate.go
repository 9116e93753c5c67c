package config

import (
	"fmt"
	"maps"
	"math"
	"net"
	"net/mail"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/choirhq/choir/config/workspace"
	"github.com/choirhq/choir/internal/repopattern"
	"github.com/choirhq/choir/strictjson"
)

// Placeholder starts every value that starter.Skeleton leaves for the user to fill
// in. Validate reports any string value starting with it, and nothing else
// about that value.
const Placeholder = "CHANGE-ME"

// Validate checks the configuration against itself and the secrets: names
// are valid, every reference to another resource and to a secret resolves,
// and values are in range. It reports every problem at once as an [*Error]
// whose paths locate the offending values in config.json. A nil s counts as
// no secrets at all. Messages name secrets but never show their values.
func (c *Config) Validate(s Secrets) error { return c.ValidateAt("", s) }

// ValidateAt is Validate for the configuration of choird's home directory
// home (.choir.d): no workspace may be, hold or sit inside it.
func (c *Config) ValidateAt(home string, s Secrets) error {
	v := &validator{c: c, secrets: s, placeholders: map[string]bool{}, home: home}
	v.findPlaceholders(strictjson.Root, reflect.ValueOf(c).Elem())
	v.repo(path("global_repo"), c.GlobalRepo)
	v.workspaces()
	v.models()
	v.tts()
	v.voiceProfiles()
	v.gitIdentities()
	v.notion()
	v.emailAccounts()
	v.search()
	v.web()
	v.console()
	v.embedding()
	v.gateways()
	v.dms()
	v.postgres()
	v.agents()
	v.hostCaps(path("caps"), c.Caps)
	v.tunables()
	if len(v.problems) == 0 {
		return nil
	}
	return &strictjson.Error{Problems: v.problems}
}

type validator struct {
	c            *Config
	home         string // choird's home directory, "" when unknown
	secrets      Secrets
	placeholders map[string]bool
	problems     []strictjson.Problem
}

// path joins keys onto the root path.
func path(keys ...string) string {
	p := strictjson.Root
	for _, k := range keys {
		p = strictjson.PathKey(p, k)
	}
	return p
}

// sub joins keys onto path p.
func sub(p string, keys ...string) string {
	for _, k := range keys {
		p = strictjson.PathKey(p, k)
	}
	return p
}

func (v *validator) add(p, format string, args ...any) {
	if v.placeholders[p] {
		return // already reported as a placeholder
	}
	v.problems = append(v.problems, strictjson.Problem{Path: p, Message: fmt.Sprintf(format, args...)})
}

// findPlaceholders reports every string starting with Placeholder, walking
// the configuration as it is laid out in JSON.
func (v *validator) findPlaceholders(p string, rv reflect.Value) {
	switch rv.Kind() {
	case reflect.Pointer:
		if !rv.IsNil() {
			v.findPlaceholders(p, rv.Elem())
		}
	case reflect.Struct:
		for i := range rv.NumField() {
			name, _, _ := strings.Cut(rv.Type().Field(i).Tag.Get("json"), ",")
			v.findPlaceholders(sub(p, name), rv.Field(i))
		}
	case reflect.Map:
		keys := slices.Sorted(func(yield func(string) bool) {
			for _, k := range rv.MapKeys() {
				if !yield(k.String()) {
					return
				}
			}
		})
		for _, k := range keys {
			v.findPlaceholders(sub(p, k), rv.MapIndex(reflect.ValueOf(k)))
		}
	case reflect.String:
		if strings.HasPrefix(rv.String(), Placeholder) {
			v.problems = append(v.problems, strictjson.Problem{Path: p, Message: "placeholder value: replace it in config.json"})
			v.placeholders[p] = true
		}
	}
}

// name checks the name of a resource.
func (v *validator) name(p, kind, name string) {
	if !ValidName(name) {
		v.add(p, "%s name must match %s", kind, NamePattern)
	}
}

// required reports an empty required value.
func (v *validator) required(p, value string) bool {
	if value == "" {
		v.add(p, "required")
		return false
	}
	return true
}

// ref checks that name, found at p, names one of the resources of a kind.
func ref[V any](v *validator, p, kind, name string, defined map[string]V, required bool) {
	if name == "" {
		if required {
			v.add(p, "required: name a %s", kind)
		}
		return
	}
	if _, ok := defined[name]; ok {
		return
	}
	if len(defined) == 0 {
		v.add(p, "unknown %s %q: no %ss are defined", kind, name, kind)
		return
	}
	v.add(p, "unknown %s %q (defined: %s)", kind, name, strings.Join(slices.Sorted(maps.Keys(defined)), ", "))
}

// secret checks the secret reference name found at p.
func (v *validator) secret(p, name string, required bool) {
	if name == "" {
		if required {
			v.add(p, "required: name the secret in secrets.json that holds the credentials")
		}
		return
	}
	value, ok := v.secrets[name]
	switch {
	case !ok:
		v.add(p, "secret %q is not in secrets.json; set it with: choirctl secret set %s", name, name)
	case value == "":
		v.add(p, "secret %q is empty in secrets.json; set it with: choirctl secret set %s", name, name)
	}
}

// oneOf checks an enumerated value. Placeholders were reported already.
func (v *validator) oneOf(p, value string, allowed []string, also string) {
	if !slices.Contains(allowed, value) {
		v.add(p, "%q is not allowed: must be %sone of %s", value, also, strings.Join(allowed, ", "))
	}
}

func (v *validator) port(p string, port int) {
	if port < 1 || port > 65535 {
		v.add(p, "port must be between 1 and 65535")
	}
}

var hostnameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`)

func (v *validator) host(p, host string) {
	if !v.required(p, host) {
		return
	}
	if net.ParseIP(host) == nil && (len(host) > 253 || !hostnameRE.MatchString(host)) {
		v.add(p, "must be a hostname or an IP address")
	}
}

// endpoint checks an API base URL. Messages do not quote it: a URL can carry
// credentials.
func (v *validator) endpoint(p, endpoint string) {
	if !v.required(p, endpoint) {
		return
	}
	u, err := url.Parse(endpoint)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		v.add(p, "must be an http or https URL")
	case u.User != nil:
		v.add(p, "must not embed credentials: put them in secrets.json and name the secret")
	}
}

func (v *validator) rangeCheck(p string, x, lo, hi float64) {
	if x < lo || x > hi {
		v.add(p, "must be between %g and %g", lo, hi)
	}
}

func (v *validator) repo(p string, r Repo) {
	switch {
	case r.URL == "" && r.Ref != "":
		v.add(sub(p, "url"), "required when ref is set")
	case r.URL != "" && r.Ref == "":
		v.add(sub(p, "ref"), "required when url is set: name a branch, tag or commit")
	}
}

func (v *validator) workspaces() {
	byPath := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(v.c.Workspaces)) {
		p := path("workspaces", name)
		v.name(p, "workspace", name)
		w := v.c.Workspaces[name]
		pp := sub(p, "path")
		if !v.required(pp, w.Path) {
			continue
		}
		if !filepath.IsAbs(w.Path) {
			v.add(pp, "must be an absolute path")
			continue
		}
		clean := filepath.Clean(w.Path)
		if other, ok := byPath[clean]; ok {
			// Workspaces are leased exclusively; two names for one
			// directory would let two agents write it at once.
			v.add(pp, "same directory as workspace %q", other)
			continue
		}
		byPath[clean] = name
		if err := workspace.CheckPath(clean, workspace.UserHome(), v.home); err != nil {
			v.add(pp, "%v", err)
		}
	}
	// A workspace inside another would be the other's agent's too, and
	// chowned with it.
	for _, outer := range slices.Sorted(maps.Keys(byPath)) {
		for _, inner := range slices.Sorted(maps.Keys(byPath)) {
			if outer != inner && workspace.Within(inner, outer) {
				v.add(sub(path("workspaces", byPath[inner]), "path"), "%s sits inside workspace %q (%s): each workspace must be a directory of its own, outside every other",
					inner, byPath[outer], outer)
			}
		}
	}
}

func (v *validator) models() {
	for _, name := range slices.Sorted(maps.Keys(v.c.Models)) {
		p := path("models", name)
		v.name(p, "model", name)
		m := v.c.Models[name]
		v.required(sub(p, "provider"), m.Provider)
		v.required(sub(p, "model"), m.Model)
		v.endpoint(sub(p, "endpoint"), m.Endpoint)
		if m.Temperature != nil {
			v.rangeCheck(sub(p, "temperature"), *m.Temperature, 0, 2)
		}
		switch {
		case m.ReasoningEffort == nil:
		case *m.ReasoningEffort == "":
			v.add(sub(p, "reasoning_effort"), "must be null or a non-empty effort such as \"medium\"")
		default:
			v.oneOf(sub(p, "reasoning_effort"), *m.ReasoningEffort, ReasoningEfforts, "null or ")
		}
		v.secret(sub(p, "secret"), m.Secret, false)
		if m.ContextWindow != 0 && m.ContextWindow < 1024 {
			v.add(sub(p, "context_window"), "must be at least 1024 tokens (or omitted for %d)", DefaultContextWindow)
		}
		v.prices(sub(p, "prices"), m.Prices)
	}
}

func (v *validator) tts() {
	for _, name := range slices.Sorted(maps.Keys(v.c.TTS)) {
		p := path("tts", name)
		v.name(p, "tts", name)
		t := v.c.TTS[name]
		v.required(sub(p, "provider"), t.Provider)
		v.required(sub(p, "model_id"), t.ModelID)
		v.endpoint(sub(p, "endpoint"), t.Endpoint)
		v.secret(sub(p, "secret"), t.Secret, false)
		v.unitPrice(sub(p, "price_per_1k_characters"), t.PricePer1KCharacters, "characters")
	}
}

func (v *validator) voiceProfiles() {
	for _, name := range slices.Sorted(maps.Keys(v.c.VoiceProfiles)) {
		p := path("voice_profiles", name)
		v.name(p, "voice profile", name)
		vp := v.c.VoiceProfiles[name]
		ref(v, sub(p, "tts"), "tts provider", vp.TTS, v.c.TTS, true)
		v.required(sub(p, "voice_id"), vp.VoiceID)
		if v.required(sub(p, "output_format"), vp.OutputFormat) {
			v.oneOf(sub(p, "output_format"), vp.OutputFormat, OutputFormats, "")
		}
		sp := sub(p, "voice_settings")
		vs := vp.VoiceSettings
		v.rangeCheck(sub(sp, "stability"), vs.Stability, 0, 1)
		v.rangeCheck(sub(sp, "similarity_boost"), vs.SimilarityBoost, 0, 1)
		v.rangeCheck(sub(sp, "style"), vs.Style, 0, 1)
		v.rangeCheck(sub(sp, "speed"), vs.Speed, 0.5, 2)
	}
}

func (v *validator) gitIdentities() {
	for _, name := range slices.Sorted(maps.Keys(v.c.GitIdentities)) {
		p := path("git_identities", name)
		v.name(p, "git identity", name)
		g := v.c.GitIdentities[name]
		v.required(sub(p, "name"), g.Name)
		if v.required(sub(p, "email"), g.Email) {
			if a, err := mail.ParseAddress(g.Email); err != nil || a.Address != g.Email {
				v.add(sub(p, "email"), "must be a bare email address such as agent@example.com")
			}
		}
		v.secret(sub(p, "secret"), g.Secret, false)
		for i, h := range g.Hosts {
			hp := fmt.Sprintf("%s.hosts[%d]", p, i)
			if hostOnly, _, err := net.SplitHostPort(h); err == nil {
				h = hostOnly
			}
			v.host(hp, h)
		}
		for i, r := range g.Repos {
			if err := repopattern.Check(r); err != nil {
				v.add(strictjson.PathIndex(sub(p, "repos"), i), "%v", err)
			}
		}
	}
}

func (v *validator) notion() {
	for _, name := range slices.Sorted(maps.Keys(v.c.NotionIntegrations)) {
		p := path("notion_integrations", name)
		v.name(p, "notion integration", name)
		v.secret(sub(p, "secret"), v.c.NotionIntegrations[name].Secret, true)
		if e := v.c.NotionIntegrations[name].Endpoint; e != "" {
			v.endpoint(sub(p, "endpoint"), e)
		}
	}
}

func (v *validator) emailAccounts() {
	for _, name := range slices.Sorted(maps.Keys(v.c.EmailAccounts)) {
		p := path("email_accounts", name)
		v.name(p, "email account", name)
		e := v.c.EmailAccounts[name]
		v.host(sub(p, "smtp_host"), e.SMTPHost)
		v.port(sub(p, "smtp_port"), e.SMTPPort)
		v.host(sub(p, "imap_host"), e.IMAPHost)
		v.port(sub(p, "imap_port"), e.IMAPPort)
		if e.Sharing != EmailExclusive && e.Sharing != EmailShared {
			v.add(sub(p, "sharing"), "must be %q or %q", EmailExclusive, EmailShared)
		}
		v.secret(sub(p, "secret"), e.Secret, true)
		v.emailPolicy(p, e.EmailPolicy)
	}
}

func (v *validator) search() {
	for _, name := range slices.Sorted(maps.Keys(v.c.Search)) {
		p := path("search", name)
		v.name(p, "search provider", name)
		v.secret(sub(p, "secret"), v.c.Search[name].Secret, true)
		v.unitPrice(sub(p, "price_per_1k_queries"), v.c.Search[name].PricePer1KQueries, "queries")
	}
}

func (v *validator) embedding() {
	p := path("embedding")
	e := v.c.Embedding
	if e.Provider == "" {
		v.add(sub(p, "provider"), "required: name an embedding provider, or %q for the built-in one", EmbeddingOffline)
	}
	if e.Dimensions < 1 || e.Dimensions > MaxEmbeddingDimensions {
		v.add(sub(p, "dimensions"), "must be between 1 and %d (the most pgvector's HNSW index takes)", MaxEmbeddingDimensions)
	}
	if e.PricePerMTok < 0 || math.IsNaN(e.PricePerMTok) || math.IsInf(e.PricePerMTok, 0) {
		v.add(sub(p, "price_per_mtok"), "must be a price in US dollars per million tokens, 0 or more (e.g. 0.02), or omitted")
	}
	if e.Provider == EmbeddingOffline {
		if e.Endpoint != "" {
			v.add(sub(p, "endpoint"), "the offline provider is built in and takes no endpoint")
		}
		if e.Secret != "" {
			v.add(sub(p, "secret"), "the offline provider is built in and takes no secret")
		}
		return
	}
	v.required(sub(p, "model"), e.Model)
	v.endpoint(sub(p, "endpoint"), e.Endpoint)
	v.secret(sub(p, "secret"), e.Secret, false)
}

func (v *validator) gateways() {
	for _, name := range slices.Sorted(maps.Keys(v.c.Gateways)) {
		p := path("gateways", name)
		v.name(p, "gateway", name)
		g := v.c.Gateways[name]
		switch g.Type {
		case GatewayTelegram:
			v.secret(sub(p, "secret"), g.Secret, true)
		case GatewayConsole:
			if g.Secret != "" {
				v.add(sub(p, "secret"), "a console gateway takes no secret")
			}
		default:
			v.add(sub(p, "type"), "must be %q or %q", GatewayTelegram, GatewayConsole)
		}
	}
}

func (v *validator) dms() {
	type binding struct{ gateway, userID string }
	seen := map[binding]string{}
	for _, name := range slices.Sorted(maps.Keys(v.c.DMs)) {
		p := path("dms", name)
		v.name(p, "dm", name)
		d := v.c.DMs[name]
		ref(v, sub(p, "gateway"), "gateway", d.Gateway, v.c.Gateways, true)
		up := sub(p, "user_id")
		if !v.required(up, d.UserID) {
			continue
		}
		if g, ok := v.c.Gateways[d.Gateway]; ok && g.Type == GatewayTelegram {
			if n, err := strconv.ParseInt(d.UserID, 10, 64); err != nil || n <= 0 || strconv.FormatInt(n, 10) != d.UserID {
				v.add(up, "must be a numeric Telegram user id")
			}
		}
		v.timeZone(sub(p, "time_zone"), d.TimeZone)
		b := binding{d.Gateway, d.UserID}
		if other, ok := seen[b]; ok {
			v.add(up, "same gateway and user as dm %q: a user has one DM per gateway", other)
			continue
		}
		seen[b] = name
	}
}

// timeZone checks an IANA time zone name; empty is allowed (UTC).
func (v *validator) timeZone(p, name string) {
	if name == "" {
		return
	}
	if err := CheckTimeZone(name); err != nil {
		v.add(p, "%v", err)
	}
}

// CheckTimeZone checks that name is an IANA time zone, and says what to
// write instead when it is not.
func CheckTimeZone(name string) error {
	// "Local" would be whatever zone choird's host has: never the user's.
	if _, err := time.LoadLocation(name); err != nil || name == "Local" || name == "" {
		return fmt.Errorf("unknown time zone %q: use an IANA name such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\"", name)
	}
	return nil
}

var sslModes = []string{"disable", "allow", "prefer", "require", "verify-ca", "verify-full"}

func (v *validator) postgres() {
	p := path("postgres")
	pg := v.c.Postgres
	hp := sub(p, "host")
	switch {
	case pg.Host == "":
		v.add(hp, "required: a hostname, an IP address or the directory of the server's Unix socket")
	case strings.ContainsAny(pg.Host, ",\x00"):
		// The drivers read a comma as a list of hosts.
		v.add(hp, "must be a single host")
	case strings.HasPrefix(pg.Host, "/"):
		// A socket directory.
	default:
		v.host(hp, pg.Host)
	}
	v.port(sub(p, "port"), pg.Port)
	v.required(sub(p, "database"), pg.Database)
	if pg.SSLMode != "" && !slices.Contains(sslModes, pg.SSLMode) {
		v.add(sub(p, "sslmode"), "must be one of %s", strings.Join(sslModes, ", "))
	}
	sp := sub(p, "secret")
	before := len(v.problems)
	v.secret(sp, pg.Secret, true)
	if len(v.problems) == before && !v.placeholders[sp] {
		if _, _, err := postgresCredentials(pg.Secret, v.secrets); err != nil {
			v.add(sp, "secret %q must have the form user:password (the password may be empty)", pg.Secret)
		}
	}
}

func (v *validator) agents() {
	schemas := map[string]string{}
	for _, id := range slices.Sorted(maps.Keys(v.c.Agents)) {
		p := path("agents", id)
		if !ValidName(id) {
			v.add(p, "agent id must match %s: it becomes the Postgres schema and role name %s", NamePattern, "choir_<id>")
		} else {
			schema := SchemaName(id)
			if other, ok := schemas[schema]; ok {
				v.add(p, "agent ids %q and %q both map to the Postgres schema and role %s: rename one", other, id, schema)
			} else {
				schemas[schema] = id
			}
		}
		a := v.c.Agents[id]
		v.repo(sub(p, "repo"), a.Repo)
		dp := sub(p, "defaults")
		d := a.Defaults
		ref(v, sub(dp, "workspace"), "workspace", d.Workspace, v.c.Workspaces, true)
		ref(v, sub(dp, "llm"), "model", d.LLM, v.c.Models, true)
		ref(v, sub(dp, "core_llm"), "model", d.CoreLLM, v.c.Models, false)
		ref(v, sub(dp, "voice_profile"), "voice profile", d.VoiceProfile, v.c.VoiceProfiles, false)
		ref(v, sub(dp, "git_identity"), "git identity", d.GitIdentity, v.c.GitIdentities, false)
		ref(v, sub(dp, "notion"), "notion integration", d.Notion, v.c.NotionIntegrations, false)
		ref(v, sub(dp, "email"), "email account", d.Email, v.c.EmailAccounts, false)
		ref(v, sub(dp, "dm"), "dm", d.DM, v.c.DMs, true)
		v.budgets(sub(p, "budgets"), a.Budgets)
		v.toolMode(sub(p, "tool_mode"), a.ToolMode)
		v.mcpSecrets(sub(p, "mcp_secrets"), a.MCPSecrets)
		v.mcpServers(sub(p, "mcp_servers"), a.MCPServers, a.MCPSecrets)
		v.memoryReaders(sub(p, "memory_readable_by"), id, a.MemoryReadableBy)
		v.allowHosts(sub(sub(p, "web"), "allow_hosts"), a.Web.AllowHosts)
		v.untrustedInput(sub(p, "untrusted_input"), a.UntrustedInput)
		v.egress(sub(p, "egress"), a.Egress)
	}
}

func (v *validator) tunables() {
	c := v.c
	hb := c.HeartbeatInterval().Milliseconds()
	if hb < 100 {
		v.add(path("heartbeat_interval_ms"), "must be at least 100")
	}
	if c.CrashDetectionThreshold().Milliseconds() < 2*hb {
		v.add(path("crash_detection_threshold_ms"), "must be at least twice heartbeat_interval_ms (%d), so that one late heartbeat is not taken for a crash", hb)
	}
	positive := []struct {
		name  string
		value int64
	}{
		{"rate_limit_retry_ms", c.RateLimitRetry().Milliseconds()},
		{"log_archive_threshold_lines", c.LogArchiveThreshold()},
		{"approval_timeout_ms", c.ApprovalTimeout().Milliseconds()},
		{"session_summary_timeout_ms", c.SessionSummaryTimeout().Milliseconds()},
		{"mid_term_sessions", int64(c.MidTermSessionCount())},
		{"snapshot_every_events", int64(c.SnapshotInterval())},
	}
	for _, t := range positive {
		if t.value < 1 {
			v.add(path(t.name), "must be positive (or omitted for the default)")
		}
	}
	if p := c.CompactionThreshold(); p < 10 || p > 95 {
		v.add(path("compaction_threshold_percent"), "must be between 10 and 95 (or omitted for %d)", DefaultCompactionThresholdPercent)
	}
}
