package toolsearch_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/daemon/toolsearch"
	"github.com/choirhq/choir/dbtest"
)

var corpus = []toolsearch.Entry{
	{Name: "ledger.entry.post", Text: "ledger.entry.post\nRecords a payment in the household's accounting books.\namount\npayee\nside effect write"},
	{Name: "mail.message.send", Text: "mail.message.send\nSends an email to one or more recipients.\nto\nsubject\nbody\nside effect external"},
	{Name: "calendar.event.create", Text: "calendar.event.create\nAdds an appointment to the user's calendar.\ntitle\nstart\nend\nside effect write"},
	{Name: "choir.fs.read", Text: "choir.fs.read\nRead a text file in the workspace.\npath\nhead\ntail\nside effect read\ncat"},
	{Name: "weather.forecast.get", Text: "weather.forecast.get\nTells tomorrow's temperature and rain for a city.\ncity\nside effect read"},
}

const (
	hash1 = "1111111111111111111111111111111111111111111111111111111111111111"
	hash2 = "2222222222222222222222222222222222222222222222222222222222222222"
)

func setup(t *testing.T) *toolsearch.Index {
	t.Helper()
	pool := dbtest.NewPool(t)
	store := memory.New(memory.Options{Pool: pool, Embedder: embed.NewOffline(256)})
	return toolsearch.New(pool, store, nil)
}

func TestSearchFindsToolByParaphrase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	idx := setup(t)
	if _, missing, err := idx.Search(ctx, hash1, "anything", 5); err != nil || !missing {
		t.Fatalf("search before indexing: missing %v, %v", missing, err)
	}
	if n, err := idx.Build(ctx, hash1, corpus); err != nil || n != len(corpus) {
		t.Fatalf("build = %d, %v", n, err)
	}
	for _, tc := range []struct{ query, want string }{
		// No word of the tool's name: its description, in other words.
		{"recording payments into the accounting book", "ledger.entry.post"},
		{"will it rain in Paris tomorrow", "weather.forecast.get"},
		{"send an email", "mail.message.send"},
	} {
		names, missing, err := idx.Search(ctx, hash1, tc.query, 3)
		if err != nil || missing || len(names) == 0 || names[0] != tc.want {
			t.Errorf("search %q = %v (missing %v, %v), want %s first", tc.query, names, missing, err, tc.want)
		}
	}
}

func TestIndexIsRebuiltForANewManifest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	idx := setup(t)
	if _, err := idx.Build(ctx, hash1, corpus); err != nil {
		t.Fatal(err)
	}
	// Building the same manifest again keeps it.
	if n, err := idx.Build(ctx, hash1, corpus[:1]); err != nil || n != len(corpus) {
		t.Fatalf("rebuild of the same hash = %d, %v; want the index kept", n, err)
	}
	// A new image: another hash, other tools.
	newer := []toolsearch.Entry{{Name: "ledger.entry.void", Text: "ledger.entry.void\nCancels a payment recorded in the books.\nid"}}
	if _, missing, _ := idx.Search(ctx, hash2, "payment", 3); !missing {
		t.Fatal("a new manifest hash found an index")
	}
	if _, err := idx.Build(ctx, hash2, newer); err != nil {
		t.Fatal(err)
	}
	names, _, err := idx.Search(ctx, hash2, "payment", 3)
	if err != nil || strings.Join(names, ",") != "ledger.entry.void" {
		t.Fatalf("search of the new manifest = %v, %v", names, err)
	}
}

func TestBadInputIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	idx := setup(t)
	tools := idx.HostTools(func(err error) error { return err })
	for _, tc := range []struct{ tool, in string }{
		{toolsearch.SearchTool, `{"query":"x","manifest_hash":"nothex"}`},
		{toolsearch.SearchTool, `{"query":"","manifest_hash":"` + hash1 + `"}`},
		{toolsearch.IndexTool, `{"manifest_hash":"` + hash1 + `","tools":[]}`},
		{toolsearch.IndexTool, `{"manifest_hash":"` + hash1 + `","tools":[{"name":"","text":"x"}]}`},
		{toolsearch.IndexTool, `[1]`},
	} {
		if _, err := tools[tc.tool](ctx, "a", json.RawMessage(tc.in)); !errors.Is(err, toolsearch.ErrInvalidInput) {
			t.Errorf("%s %s: err = %v, want ErrInvalidInput", tc.tool, tc.in, err)
		}
	}
}
