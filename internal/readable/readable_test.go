package readable_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/choirhq/choir/internal/readable"
)

const page = `<!doctype html><html><head><title> The  Title </title><style>p{}</style></head>
<body><header>Site header</header><nav><a href="/home">Home</a></nav>
<main><h1>Heading</h1><p>First   paragraph with <a href="/more">more</a>.</p>
<script>var hidden = 1;</script><ul><li>one</li><li>two</li></ul></main>
<aside>Related junk</aside><footer>Copyright</footer></body></html>`

func TestExtractKeepsMainContent(t *testing.T) {
	t.Parallel()
	p, err := readable.Extract(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	if p.Title != "The Title" {
		t.Errorf("title %q", p.Title)
	}
	want := "Heading\n\nFirst paragraph with more.\n\n- one\n\n- two"
	if p.Text != want {
		t.Errorf("text %q, want %q", p.Text, want)
	}
	for _, junk := range []string{"Site header", "Home", "hidden", "Related junk", "Copyright"} {
		if strings.Contains(p.Text, junk) {
			t.Errorf("text keeps boilerplate %q", junk)
		}
	}
}

func TestLinks(t *testing.T) {
	t.Parallel()
	base, _ := url.Parse("https://example.com/a/b")
	links, err := readable.Links(strings.NewReader(page+`<a href="javascript:x()">js</a><a href="#top">top</a>`), base)
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 2 || links[0] != (readable.Link{Text: "Home", URL: "https://example.com/home"}) ||
		links[1] != (readable.Link{Text: "more", URL: "https://example.com/more"}) {
		t.Errorf("links %+v", links)
	}
}
