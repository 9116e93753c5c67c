// Command recall measures the retrieval quality of Choir's memory search:
// recall@1, @5 and @10 of full-text (mode text), vector-only and hybrid
// search, beside a plain BM25 (k1 1.2, b 0.75, the offline embedder's
// stop words and stemming) computed in the same run over the same chunks,
// per question kind and topic, with the search latency and load average.
//
// The question set is generated deterministically (gen.go): conversations
// of many sessions about a few recurring people. Questions are paraphrases
// that share few words with the turn that answers them, among chatter
// about the same people and topics and other people's facts of the same
// topic. Kinds: single-hop; update (a value stated, later replaced: the
// later turn is the evidence); multi-hop (who a relative is, and a fact
// about the relative: two evidence turns, each counting half); temporal
// (two dated facts of one topic about one person, asked by season).
//
// The conversations go through the real session pipeline: each turn is a
// user_msg and a model_output event of a session of the agent; each
// session is ended and its chunking enqueued in one transaction, as choird
// does; River's memory workers (jobs + daemon/memory/pipeline) chunk the
// sessions and embed the chunks with the offline embedder. The evidence of
// a question is the chunk holding its evidence turn's user message (the
// chunker opens a chunk at each user message, so one turn is one chunk).
// Questions go through memory.Store.QueryAsOperator, as choir.memory.query.
// Even conversations are the part to tune on, odd ones the held-out part;
// each is reported apart as well as together.
//
// Fusion sweep (fusion.go): text and vector run at the store's candidate
// count (30), as hybrid's two sides do, and their rankings are fused
// offline by weighted reciprocal rank, 1/(k + vector rank) + ratio/(k +
// text rank), over a grid of k and text-to-vector weight ratios. The
// setting with the best R@10 on the tune part (then R@5, R@1) is reported
// as "tuned" on every group, the held-out part being the figure to trust;
// "rrf60" is plain reciprocal rank fusion (k 60, ratio 1), the store's
// fusion with an embedding provider; the report also checks that fusing
// offline at the store's offline setting reproduces its hybrid search.
//
//	go run ./bench/recall -server "$(scripts/devpg.sh url)"
//	go run ./bench/recall -dry   # BM25 only over the generated turns, no database
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxvec "github.com/pgvector/pgvector-go/pgx"

	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/db"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

const dims = 384

type options struct {
	server, name                   string
	size, sessions, turns, perConv int
	dry                            bool
}

func main() {
	var o options
	flag.StringVar(&o.server, "server", "postgres://postgres@127.0.0.1:55432/choir?sslmode=disable", "a database on the server to use")
	flag.StringVar(&o.name, "db", "choir_bench_recall", "database to create (dropped first if it exists)")
	flag.IntVar(&o.size, "size", 20, "conversations (agents); the run grows with it")
	flag.IntVar(&o.sessions, "sessions", 20, "sessions per conversation")
	flag.IntVar(&o.turns, "turns", 30, "turns per session")
	flag.IntVar(&o.perConv, "questions", 100, "questions per conversation")
	flag.BoolVar(&o.dry, "dry", false, "generate the set and report only BM25 over the generated turns (no database)")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		log.Fatal(err)
	}
}

// tally counts recall at 1, 5 and 10; a question with several evidence
// chunks counts the share of them found.
type tally struct{ at1, at5, at10, n float64 }

func (t *tally) add(ranks []int) {
	t.n++
	for _, r := range ranks {
		w := 1 / float64(len(ranks))
		if r == 1 {
			t.at1 += w
		}
		if r >= 1 && r <= 5 {
			t.at5 += w
		}
		if r >= 1 && r <= 10 {
			t.at10 += w
		}
	}
}

func (t tally) String() string {
	return fmt.Sprintf("R@1 %.3f  R@5 %.3f  R@10 %.3f", t.at1/t.n, t.at5/t.n, t.at10/t.n)
}

var methods = []string{"bm25", "text", "vector", "hybrid"}

// results are the tallies per method and group ("all", "kind …",
// "topic …") and the latencies per method.
type results struct {
	tallies map[string]map[string]*tally
	lat     map[string][]float64
	nq, nc  int
	// cases are the questions' rankings for the fusion sweep.
	cases []fusionCase
}

func (r *results) add(m string, q question, split string, ranks []int) {
	if r.tallies == nil {
		r.tallies, r.lat = map[string]map[string]*tally{}, map[string][]float64{}
	}
	if r.tallies[m] == nil {
		r.tallies[m] = map[string]*tally{}
	}
	for _, g := range []string{"all", "kind " + q.kind, "topic " + q.topic, "split " + split} {
		if r.tallies[m][g] == nil {
			r.tallies[m][g] = &tally{}
		}
		r.tallies[m][g].add(ranks)
	}
}

func run(ctx context.Context, o options) error {
	convs := make([]conversation, o.size)
	for ci := range convs {
		convs[ci] = generate(uint64(ci+1), o.sessions, o.turns, o.perConv)
	}
	if o.dry {
		var res results
		for _, c := range convs {
			var texts []string
			for _, t := range c.turns {
				texts = append(texts, "user: "+t.user+"\nassistant: "+t.reply)
			}
			bm := newBM25(texts)
			for _, q := range c.questions {
				sc := bm.scores(q.text)
				var ranks []int
				for _, e := range q.evidence {
					ranks = append(ranks, rankIn(sc, e))
				}
				res.add("bm25", q, "-", ranks)
				res.nq++
			}
			res.nc += len(texts)
		}
		report(&res, o, []string{"bm25"}, "")
		return nil
	}
	return runDB(ctx, o, convs)
}

func runDB(ctx context.Context, o options, convs []conversation) error {
	cfg, err := pgx.ParseConfig(o.server)
	if err != nil {
		return err
	}
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, o.name)
	if err := create(ctx, o.server, o.name, url, len(convs)); err != nil {
		return err
	}
	defer drop(o.server, o.name)
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	pcfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error { return pgxvec.RegisterTypes(ctx, c) }
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := startPipeline(ctx, pool)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		client.Stop(sctx) //nolint:errcheck
	}()
	start := time.Now()
	base := start.Add(-time.Duration(o.sessions*o.turns) * time.Minute)
	sessions := make([]map[uuid.UUID]int, len(convs))
	for ci, c := range convs {
		if sessions[ci], err = loadSessions(ctx, pool, client, agentName(ci), c, base); err != nil {
			return err
		}
	}
	loaded := time.Since(start)
	if err := waitIdle(ctx, pool, 10*time.Minute); err != nil {
		return err
	}
	pipe := fmt.Sprintf("pipeline: sessions written in %.1f s, chunked and embedded %.1f s later",
		loaded.Seconds(), (time.Since(start) - loaded).Seconds())
	if _, err := pool.Exec(ctx, "ANALYZE"); err != nil {
		return err
	}
	store := memory.New(memory.Options{Pool: pool, Embedder: embed.NewOffline(dims)})
	var res results
	for ci, c := range convs {
		if err := ask(ctx, pool, store, agentName(ci), sessions[ci], c, splitOf(ci), &res); err != nil {
			return err
		}
	}
	sweepOut := fusions(&res)
	report(&res, o, append(slices.Clone(methods), "tuned", "rrf60"), pipe)
	fmt.Print(sweepOut)
	return nil
}

func agentName(ci int) string { return fmt.Sprintf("recall%d", ci) }

// splitOf puts even conversations in the part to tune on (fusion weights,
// say) and odd ones in the held-out part to report.
func splitOf(ci int) string {
	if ci%2 == 0 {
		return tuneSplit
	}
	return "held-out (odd conversations)"
}

// tuneSplit names the part to tune on.
const tuneSplit = "tune (even conversations)"

// ask runs a conversation's questions in every mode and BM25 over the
// chunks the pipeline made. Text and vector run at the store's candidate
// count, as hybrid's sides do, and keep each ranking for the fusion sweep;
// their recall counts their first 10 as hybrid's does.
func ask(ctx context.Context, pool *pgxpool.Pool, store *memory.Store, agent string, sessions map[uuid.UUID]int,
	c conversation, split string, res *results) error {
	ch, err := readChunks(ctx, pool, agent, sessions, c)
	if err != nil {
		return err
	}
	res.nc += len(ch.ids)
	bm := newBM25(ch.texts)
	for _, q := range c.questions {
		res.nq++
		var want []int
		fc := fusionCase{q: q, split: split, tune: split == tuneSplit}
		for _, e := range q.evidence {
			if !slices.Contains(want, ch.ofTurn[e]) {
				want = append(want, ch.ofTurn[e])
				fc.want = append(fc.want, ch.ids[ch.ofTurn[e]])
			}
		}
		sc := bm.scores(q.text)
		var ranks []int
		for _, w := range want {
			ranks = append(ranks, rankIn(sc, w))
		}
		res.add("bm25", q, split, ranks)
		for _, m := range methods[1:] {
			limit := 10
			if m != "hybrid" {
				limit = memory.DefaultSearchTuning.Candidates
			}
			start := time.Now()
			got, err := search(ctx, store, agent, m, q.text, limit)
			if err != nil {
				return fmt.Errorf("%s %q: %w", m, q.text, err)
			}
			res.lat[m] = append(res.lat[m], float64(time.Since(start).Microseconds())/1000)
			res.add(m, q, split, ranksIn(got, fc.want))
			switch m {
			case "text":
				fc.text = got
			case "vector":
				fc.vector = got
			default:
				fc.hybrid = got
			}
		}
		res.cases = append(res.cases, fc)
	}
	return nil
}

// fusions sweeps the fusion grid over the questions asked, picks the
// setting best on the tune split, and adds its recall ("tuned") and the
// offline default's ("rrf60") to res; it returns the lines to print.
func fusions(res *results) string {
	var b strings.Builder
	best := sweep(res.cases, &b)
	b.WriteString(agreement(res.cases) + "\n")
	fmt.Fprintf(&b, "tuned: offline fusion %s (chosen above); rrf60: offline fusion %s, plain reciprocal rank\n",
		best, defaultFusion)
	for _, c := range res.cases {
		res.add("tuned", c.q, c.split, ranksIn(fuse(best, c.vector, c.text), c.want))
		res.add("rrf60", c.q, c.split, ranksIn(fuse(defaultFusion, c.vector, c.text), c.want))
	}
	return b.String()
}

func report(res *results, o options, ms []string, pipe string) {
	la, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("%d conversations x %d sessions x %d turns: %d chunks, %d questions; offline embedder %s, %d dims\n",
		o.size, o.sessions, o.turns, res.nc, res.nq, embed.OfflineModel, dims)
	fmt.Printf("evidence: the chunk holding the evidence turn's user message (%d turns made %d chunks); multi-hop: two chunks, half each\n",
		o.size*o.sessions*o.turns, res.nc)
	if pipe != "" {
		fmt.Println(pipe)
	}
	fmt.Printf("load average %s", la)
	groups := slices.Sorted(maps.Keys(res.tallies["bm25"]))
	for _, g := range groups {
		fmt.Printf("-- %s (%d questions)\n", g, int(res.tallies["bm25"][g].n))
		for _, m := range ms {
			if t := res.tallies[m][g]; t != nil {
				fmt.Printf("   %-7s %s\n", m, t)
			}
		}
	}
	limits := map[string]int{"text": memory.DefaultSearchTuning.Candidates, "vector": memory.DefaultSearchTuning.Candidates,
		"hybrid": 10}
	for _, m := range ms[1:] {
		xs := res.lat[m]
		if len(xs) == 0 {
			continue
		}
		slices.Sort(xs)
		fmt.Printf("latency %-7s limit %-2d p50 %6.2f ms  p95 %6.2f ms  p99 %6.2f ms\n", m, limits[m], xs[len(xs)/2], xs[len(xs)*95/100], xs[len(xs)*99/100])
	}
}

// search runs one question in mode m and returns the chunks found, best
// first (at most limit).
func search(ctx context.Context, store *memory.Store, agent, m, text string, limit int) ([]uuid.UUID, error) {
	in := map[string]any{"store": "session", "target_agent": agent, "limit": limit, "query": text}
	switch m {
	case "text":
		in["mode"] = "text"
	case "vector":
		// The vector semantic search makes of the question, passed alone.
		vec, err := store.EmbedQuery(ctx, agent, memory.StoreSession, text)
		if err != nil {
			return nil, err
		}
		delete(in, "query")
		in["vector"] = vec
	}
	b, _ := json.Marshal(in)
	r, err := store.QueryAsOperator(ctx, b)
	if err != nil {
		return nil, err
	}
	out := make([]uuid.UUID, len(r.Chunks))
	for i, h := range r.Chunks {
		out[i] = h.DocumentID
	}
	return out, nil
}

// create makes a fresh database, migrates it and provisions one agent per
// conversation.
func create(ctx context.Context, server, name, url string, convs int) error {
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	id := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return err
	}
	plain, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer plain.Close()
	m, err := choirsql.NewMigrator(plain, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		return err
	}
	for ci := range convs {
		if _, err := seam.Queries(plain).AgentProvisionSchema(ctx, db.AgentProvisionSchemaParams{AgentID: agentName(ci),
			Dimensions: dims}); err != nil {
			return err
		}
	}
	return nil
}

func drop(server, name string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)") //nolint:errcheck
}
