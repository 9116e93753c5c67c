package config

import "math"

// Prices are a model's prices in US dollars per million tokens, used to
// price a call whose provider reports no cost (OpenRouter reports
// usage.cost; most others do not):
//
//	"prices": {"input_per_mtok": 3, "output_per_mtok": 15, "cached_input_per_mtok": 0.3}
type Prices struct {
	InputPerMTok  float64 `json:"input_per_mtok"`
	OutputPerMTok float64 `json:"output_per_mtok"`
	// CachedInputPerMTok prices prompt tokens served from the provider's
	// cache; zero prices them as input.
	CachedInputPerMTok float64 `json:"cached_input_per_mtok,omitempty"`
}

// Cost is the price of a call of prompt tokens, of which cached were
// served from cache, and completion tokens.
func (p Prices) Cost(prompt, cached, completion int64) float64 {
	cached = min(max(cached, 0), prompt)
	cachedPrice := p.CachedInputPerMTok
	if cachedPrice == 0 {
		cachedPrice = p.InputPerMTok
	}
	return (float64(prompt-cached)*p.InputPerMTok + float64(cached)*cachedPrice +
		float64(completion)*p.OutputPerMTok) / 1e6
}

func (v *validator) prices(p string, pr *Prices) {
	if pr == nil {
		return
	}
	for _, f := range []struct {
		name  string
		value float64
	}{{"input_per_mtok", pr.InputPerMTok}, {"output_per_mtok", pr.OutputPerMTok}, {"cached_input_per_mtok", pr.CachedInputPerMTok}} {
		if f.value < 0 || math.IsNaN(f.value) || math.IsInf(f.value, 0) {
			v.add(sub(p, f.name), "must be a price in US dollars per million tokens, 0 or more (e.g. 3.5)")
		}
	}
	if pr.InputPerMTok == 0 && pr.OutputPerMTok == 0 {
		v.add(p, `names no price: give input_per_mtok and output_per_mtok (e.g. {"input_per_mtok": 3, "output_per_mtok": 15}), or omit prices`)
	}
}

// unitPrice checks a tool's price per 1000 units (characters, queries).
func (v *validator) unitPrice(p string, price float64, unit string) {
	if price < 0 || math.IsNaN(price) || math.IsInf(price, 0) {
		v.add(p, "must be a price in US dollars per 1000 %s, 0 or more (e.g. 0.3), or omitted", unit)
	}
}
