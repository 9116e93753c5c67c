package svc

import (
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/choirhq/choir/config"
)

// Default endpoints of the services whose config may omit one.
const (
	DefaultBraveEndpoint  = "https://api.search.brave.com/res/v1"
	DefaultNotionEndpoint = "https://api.notion.com/v1"
	// NotionVersion is the Notion-Version sent when the agent sent none.
	NotionVersion = "2022-06-28"
)

// service is the rule of one kind of service route: which resource of
// config.json a name picks, whether a session may use it, which paths
// are its API's, how its key is sent, and how a call is metered.
type service struct {
	noun string
	// resource returns the endpoint and the secret's name of the named
	// resource of agent agentID, false when config.json has none.
	resource func(cfg *config.Config, agentID, name string) (endpoint, secret string, ok bool)
	// allowed reports whether a session of agentID bound to b may use
	// name.
	allowed func(cfg *config.Config, agentID string, b binding, name string) bool
	// paths are the API's paths, per method.
	paths map[string]*regexp.Regexp
	// exact says the endpoint is the resource's own URL, not a base: an
	// empty path is the endpoint itself, with its query, and another
	// path is below it.
	exact bool
	// credential adds the key to the forwarded request's headers.
	credential func(h http.Header, key string)
	// meter is nil for a service that is not metered.
	meter meterFunc
	// usage says the answers carry a usage object to settle from (model
	// calls); other metered calls settle what they asked for.
	usage bool
}

var services = map[string]*service{
	"llm": {
		noun: "model",
		resource: func(cfg *config.Config, _, name string) (string, string, bool) {
			m, ok := cfg.Models[name]
			return m.Endpoint, m.Secret, ok
		},
		allowed: func(_ *config.Config, _ string, b binding, name string) bool { return slices.Contains(b.models, name) },
		paths: map[string]*regexp.Regexp{
			http.MethodPost: regexp.MustCompile(`^chat/completions$`),
			http.MethodGet:  regexp.MustCompile(`^models$`),
		},
		credential: bearer,
		meter:      meterModelCall,
		usage:      true,
	},
	"search": {
		noun: "search provider",
		resource: func(cfg *config.Config, _, name string) (string, string, bool) {
			p, ok := cfg.Search[name]
			return orDefault(p.Endpoint, DefaultBraveEndpoint), p.Secret, ok
		},
		// Every agent may search (choir.web.search), as GET_SECRETS judges.
		allowed: func(*config.Config, string, binding, string) bool { return true },
		paths:   map[string]*regexp.Regexp{http.MethodGet: regexp.MustCompile(`^[a-z]+/search$`)},
		credential: func(h http.Header, key string) {
			if key != "" {
				h.Set("X-Subscription-Token", key)
			}
		},
		meter: meterSearch,
	},
	"tts": {
		noun: "TTS provider",
		resource: func(cfg *config.Config, _, name string) (string, string, bool) {
			t, ok := cfg.TTS[name]
			return t.Endpoint, t.Secret, ok
		},
		allowed: func(_ *config.Config, _ string, b binding, name string) bool { return slices.Contains(b.tts, name) },
		paths: map[string]*regexp.Regexp{
			http.MethodPost: regexp.MustCompile(`^text-to-speech/[A-Za-z0-9_-]{1,64}(/stream)?$`),
		},
		credential: func(h http.Header, key string) {
			if key != "" {
				h.Set("Xi-Api-Key", key)
			}
		},
		meter: meterSpeech,
	},
	"notion": {
		noun: "Notion integration",
		resource: func(cfg *config.Config, _, name string) (string, string, bool) {
			n, ok := cfg.NotionIntegrations[name]
			return orDefault(n.Endpoint, DefaultNotionEndpoint), n.Secret, ok
		},
		allowed: func(_ *config.Config, _ string, b binding, name string) bool { return b.notion == name },
		paths: map[string]*regexp.Regexp{
			http.MethodGet:    notionPath,
			http.MethodPost:   notionPath,
			http.MethodPatch:  notionPath,
			http.MethodDelete: notionPath,
		},
		credential: func(h http.Header, key string) {
			bearer(h, key)
			if h.Get("Notion-Version") == "" {
				h.Set("Notion-Version", NotionVersion)
			}
		},
	},
	"mcp": {
		noun: "MCP server",
		resource: func(cfg *config.Config, agentID, name string) (string, string, bool) {
			m, ok := cfg.Agents[agentID].MCPServers[name]
			return m.URL, m.Secret, ok
		},
		// As GET_SECRETS judged an MCP server's secret before the
		// gateway added it: one of the agent's mcp_secrets, both as
		// bound at the session's start and as config.json has them now.
		allowed: func(cfg *config.Config, agentID string, b binding, name string) bool {
			a := cfg.Agents[agentID]
			secret := a.MCPServers[name].Secret
			return slices.Contains(b.mcpSecrets, secret) && slices.Contains(a.MCPSecrets, secret)
		},
		// Streamable HTTP: POST messages, GET a stream, DELETE the
		// session, at the server's URL or below it.
		paths: map[string]*regexp.Regexp{
			http.MethodGet:    mcpPath,
			http.MethodPost:   mcpPath,
			http.MethodDelete: mcpPath,
		},
		credential: bearer,
		exact:      true,
	},
}

// mcpPath is a path below an MCP server's URL: segments that start with
// no dot (so neither . nor ..) of unreserved characters.
var mcpPath = regexp.MustCompile(`^([A-Za-z0-9_~-][A-Za-z0-9._~-]*(/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)*/?)?$`)

// notionPath is a path of the Notion API: segments of letters, digits,
// - and _ (IDs with or without dashes), nothing that could climb out of
// the endpoint's path.
var notionPath = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}(/[A-Za-z0-9_-]{1,64}){0,5}$`)

// errPath is a path outside the service's API.
var errPath = errors.New("not a path of this service's API")

// checkPath checks the path after the resource's name. Only an allowed
// path of the API passes, matched on the escaped form, so that no dot
// segment or encoded slash can climb out of the endpoint's base path.
func (s *service) checkPath(method, rest string) error {
	re, ok := s.paths[method]
	if !ok || !re.MatchString(rest) || strings.Contains(rest, "..") {
		return errPath
	}
	return nil
}

func bearer(h http.Header, key string) {
	if key != "" {
		h.Set("Authorization", "Bearer "+key)
	}
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// target is where a call goes: the path after the resource's name below
// the endpoint, with the caller's query. Below an exact endpoint the path
// is joined to the endpoint's own (its query kept when the caller sent
// none); checkPath let no dot segment through, so nothing climbs out.
func (s *service) target(base, rest, query string) (*url.URL, error) {
	if !s.exact {
		u, err := url.Parse(strings.TrimRight(base, "/") + "/" + rest)
		if err == nil {
			u.RawQuery = query
		}
		return u, err
	}
	u, err := url.Parse(base)
	if err != nil {
		return nil, err
	}
	if rest != "" {
		u = u.JoinPath(rest)
	}
	if query != "" {
		u.RawQuery = query
	}
	return u, nil
}
