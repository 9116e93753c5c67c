package svc

import (
	"errors"
	"net/http"
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
	// resource, false when config.json has none.
	resource func(cfg *config.Config, name string) (endpoint, secret string, ok bool)
	// allowed reports whether a session bound to b may use name.
	allowed func(cfg *config.Config, b binding, name string) bool
	// paths are the API's paths, per method.
	paths map[string]*regexp.Regexp
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
		resource: func(cfg *config.Config, name string) (string, string, bool) {
			m, ok := cfg.Models[name]
			return m.Endpoint, m.Secret, ok
		},
		allowed: func(_ *config.Config, b binding, name string) bool { return slices.Contains(b.models, name) },
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
		resource: func(cfg *config.Config, name string) (string, string, bool) {
			p, ok := cfg.Search[name]
			return orDefault(p.Endpoint, DefaultBraveEndpoint), p.Secret, ok
		},
		// Every agent may search (choir.web.search), as GET_SECRETS judges.
		allowed: func(*config.Config, binding, string) bool { return true },
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
		resource: func(cfg *config.Config, name string) (string, string, bool) {
			t, ok := cfg.TTS[name]
			return t.Endpoint, t.Secret, ok
		},
		allowed: func(_ *config.Config, b binding, name string) bool { return slices.Contains(b.tts, name) },
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
		resource: func(cfg *config.Config, name string) (string, string, bool) {
			n, ok := cfg.NotionIntegrations[name]
			return orDefault(n.Endpoint, DefaultNotionEndpoint), n.Secret, ok
		},
		allowed: func(_ *config.Config, b binding, name string) bool { return b.notion == name },
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
}

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
