package agent

import (
	"fmt"
	"maps"
	"slices"

	"github.com/choirhq/choir/agent/tool/web"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc/egress"
)

// webTools builds the web tools on the session's dynamic configuration.
// The search tool reaches exactly one secret, its provider's key, through
// searchProvider, and through choird's egress gateway not even that; the
// other web tools reach none.
func (s *session) webTools() web.Config {
	return web.Config{
		SettingsFunc: func() config.Web {
			if d := s.dyn.Load(); d != nil {
				return d.Web
			}
			return config.Web{}
		},
		ProviderFunc: s.searchProvider,
		DialFunc:     s.builtinDial(web.NameFetch),
		Logger:       s.logger,
	}
}

// searchProvider picks the search provider: "brave" when configured, else
// the first by name.
func (s *session) searchProvider() (web.Provider, error) {
	d := s.dyn.Load()
	if d == nil || len(d.Search) == 0 {
		return web.Provider{}, fmt.Errorf("no search provider is configured: add \"search\": {\"brave\": {\"secret\": \"brave-api-key\"}} to config.json")
	}
	name := "brave"
	if _, ok := d.Search[name]; !ok {
		name = slices.Sorted(maps.Keys(d.Search))[0]
	}
	p := d.Search[name]
	if s.egress != nil {
		// choird's egress gateway adds the key and meters the query.
		return web.Provider{Name: name, Endpoint: egress.ServiceURL("search", name), Gateway: true,
			PricePer1KQueries: p.PricePer1KQueries}, nil
	}
	key, _ := s.secrets.get(p.Secret)
	return web.Provider{Name: name, Endpoint: p.Endpoint, Key: key, PricePer1KQueries: p.PricePer1KQueries}, nil
}
