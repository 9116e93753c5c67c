package config

import (
	"slices"
	"strconv"

	"github.com/choirhq/choir/internal/netguard"
)

// Web holds the limits of the web tools (choir.web.fetch in the agent,
// choir.web.browse in choird's browser worker) and the hosts they may
// reach despite the SSRF guard. Every zero field takes its default; the
// accessor methods apply them.
type Web struct {
	// AllowHosts opens hosts the guard refuses by default (loopback,
	// private, link-local, metadata): "host" or "host:port", e.g.
	// "intranet.example.com" or "127.0.0.1:8080".
	AllowHosts []string `json:"allow_hosts,omitempty"`
	// FetchMaxBytes caps a choir.web.fetch download (default 10 MiB).
	FetchMaxBytes int64 `json:"fetch_max_bytes,omitempty"`
	// FetchTimeoutMS bounds one fetch, redirects included (default 30 s).
	FetchTimeoutMS int64 `json:"fetch_timeout_ms,omitempty"`
	// BrowseNavigationTimeoutMS bounds one browser navigation or wait
	// (default 30 s).
	BrowseNavigationTimeoutMS int64 `json:"browse_navigation_timeout_ms,omitempty"`
	// BrowseMaxPageBytes caps the HTML a browse call reads (default 5 MiB).
	BrowseMaxPageBytes int64 `json:"browse_max_page_bytes,omitempty"`
	// BrowseMaxTextBytes caps the text or HTML a browse call returns
	// (default 64 KiB); more is cut and marked truncated.
	BrowseMaxTextBytes int64 `json:"browse_max_text_bytes,omitempty"`
	// BrowseMaxTabs is the most tabs one agent may have open (default 4).
	BrowseMaxTabs int `json:"browse_max_tabs,omitempty"`
}

// Defaults of the web limits.
const (
	DefaultFetchMaxBytes             = 10 << 20
	DefaultFetchTimeoutMS            = 30_000
	DefaultBrowseNavigationTimeoutMS = 30_000
	DefaultBrowseMaxPageBytes        = 5 << 20
	DefaultBrowseMaxTextBytes        = 64 << 10
	DefaultBrowseMaxTabs             = 4
)

// WithDefaults returns w with every zero limit set to its default.
func (w Web) WithDefaults() Web {
	def := func(p *int64, d int64) {
		if *p <= 0 {
			*p = d
		}
	}
	def(&w.FetchMaxBytes, DefaultFetchMaxBytes)
	def(&w.FetchTimeoutMS, DefaultFetchTimeoutMS)
	def(&w.BrowseNavigationTimeoutMS, DefaultBrowseNavigationTimeoutMS)
	def(&w.BrowseMaxPageBytes, DefaultBrowseMaxPageBytes)
	def(&w.BrowseMaxTextBytes, DefaultBrowseMaxTextBytes)
	if w.BrowseMaxTabs <= 0 {
		w.BrowseMaxTabs = DefaultBrowseMaxTabs
	}
	return w
}

// WebFor is the web section as agent agentID sees it: the global one, with
// the agent's own allow_hosts in place of the global list when it sets
// one. An agent's list never adds to another's.
func (c *Config) WebFor(agentID string) Web {
	w := c.Web
	if a, ok := c.Agents[agentID]; ok && a.Web.AllowHosts != nil {
		w.AllowHosts = a.Web.AllowHosts
	}
	w.AllowHosts = slices.Clone(w.AllowHosts)
	return w
}

// allowHosts validates one allow_hosts list at p.
func (v *validator) allowHosts(p string, hosts []string) {
	for i, h := range hosts {
		if err := netguard.ParseAllow(h); err != nil {
			v.add(p+"["+strconv.Itoa(i)+"]", "%v", err)
		}
	}
}

// web validates the web section.
func (v *validator) web() {
	w := v.c.Web
	v.allowHosts(path("web", "allow_hosts"), w.AllowHosts)
	neg := func(key string, x int64) {
		if x < 0 {
			v.add(path("web", key), "must not be negative (0 takes the default)")
		}
	}
	neg("fetch_max_bytes", w.FetchMaxBytes)
	neg("fetch_timeout_ms", w.FetchTimeoutMS)
	neg("browse_navigation_timeout_ms", w.BrowseNavigationTimeoutMS)
	neg("browse_max_page_bytes", w.BrowseMaxPageBytes)
	neg("browse_max_text_bytes", w.BrowseMaxTextBytes)
	if w.BrowseMaxTabs < 0 || w.BrowseMaxTabs > 64 {
		v.add(path("web", "browse_max_tabs"), "must be between 1 and 64 (0 takes the default, 4)")
	}
	for name, s := range v.c.Search {
		if s.Endpoint != "" {
			v.endpoint(path("search", name, "endpoint"), s.Endpoint)
		}
	}
}
