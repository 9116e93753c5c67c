package main

// A figure is one number of the report: where it is measured, the
// metric read off the benchmark's output, its target, and the floor it
// is compared with (the same work done by bare means, in the same run).
type figure struct {
	// ID names the figure in report.json.
	ID string `json:"id"`
	// Title is the figure's line in report.md.
	Title string `json:"title"`
	// Source is where the value comes from.
	Source source `json:"source"`
	// Target is the value the figure must reach; Higher says whether
	// more is better (throughput) or worse (latency, memory). Measured
	// figures have none: they are reported, never passed or failed.
	Target   float64 `json:"target"`
	Measured bool    `json:"measured_only,omitempty"`
	Higher   bool    `json:"higher_is_better"`
	// Unit is the unit of the value and of the target.
	Unit string `json:"unit"`
	// Floor, when set, is the bare-means counterpart measured in the
	// same run; the report gives the ratio value/floor.
	Floor *source `json:"floor,omitempty"`
}

// A source says how to obtain a value: a go benchmark's metric (Pkg,
// Bench, Metric), or a named measurement of this program (Probe).
type source struct {
	// Pkg is the package directory, relative to the module root.
	Pkg string `json:"pkg,omitempty"`
	// Moved lists Pkg's earlier directories, tried in order in a tree
	// that lacks Pkg (a -compare revision from before a move).
	Moved []string `json:"moved,omitempty"`
	// Bench is the -test.bench pattern; it selects one benchmark.
	Bench string `json:"bench,omitempty"`
	// Metric is the unit of the benchmark's output to read, such as
	// "p99-µs" or "ns/op".
	Metric string `json:"metric,omitempty"`
	// Scale multiplies the metric to give the figure's unit.
	Scale float64 `json:"scale,omitempty"`
	// Invert takes 1/(metric*Scale): ns/op to operations per second.
	Invert bool `json:"invert,omitempty"`
	// CPU is -test.cpu for the run, when the figure is per core.
	CPU int `json:"cpu,omitempty"`
	// Benchtime is -test.benchtime, when the default does not suit.
	Benchtime string `json:"benchtime,omitempty"`
	// Probe names a measurement made by this program: "hybrid:<class>",
	// "rss:choird", "rss:choir-agent".
	Probe string `json:"probe,omitempty"`
}

// suite is what `make bench` measures. Targets are those of the issues
// that built each part; the idle-memory targets are this report's own
// (no issue set one): 64 MiB for choird and 32 MiB for choir-agent.
var suite = []figure{
	{ID: "rpc_rtt_p50", Title: "RPC round trip over the Unix socket, p50", Unit: "µs", Target: 50,
		Source: source{Pkg: "rpc", Bench: "^BenchmarkRoundTrip$/^UDS$", Metric: "p50-µs"},
		Floor:  &source{Pkg: "rpc/internal/fastpath", Bench: "^BenchmarkCall$/^Plain$/^unix$", Metric: "p50-µs"}},
	{ID: "rpc_rtt_p99", Title: "RPC round trip over the Unix socket, p99", Unit: "µs", Target: 250,
		Source: source{Pkg: "rpc", Bench: "^BenchmarkRoundTrip$/^UDS$", Metric: "p99-µs"},
		Floor:  &source{Pkg: "rpc/internal/fastpath", Bench: "^BenchmarkCall$/^Plain$/^unix$", Metric: "p99-µs"}},
	{ID: "heartbeat_events", Title: "Heartbeat persistence, 32 sessions x 10 events", Unit: "events/s", Target: 20000, Higher: true,
		Source: source{Pkg: "daemon", Bench: "^BenchmarkHeartbeatRPC$/^32x10$", Metric: "events/s", Benchtime: "3s"},
		Floor:  &source{Pkg: "daemon", Bench: "^BenchmarkHeartbeatBareSQL$/^32x10$", Metric: "events/s", Benchtime: "3s"}},
	{ID: "heartbeat_tx_p99", Title: "Heartbeat transaction, p99", Unit: "ms", Target: 50,
		Source: source{Pkg: "daemon", Bench: "^BenchmarkHeartbeatRPC$/^32x10$", Metric: "tx-p99-ms", Benchtime: "3s"},
		Floor:  &source{Pkg: "daemon", Bench: "^BenchmarkHeartbeatBareSQL$/^32x10$", Metric: "tx-p99-ms", Benchtime: "3s"}},
	{ID: "crash_detection_late_p99", Title: "Crash detection, lateness past the threshold, p99", Unit: "ms", Target: 1000,
		Source: source{Pkg: "daemon/session", Moved: []string{"jobs"}, Bench: "^BenchmarkCrashDetection$", Metric: "late-p99-ms"}},
	{ID: "recovery_100k", Title: "Recovery of a 100k-event session", Unit: "ms", Target: 1000,
		Source: source{Pkg: "daemon", Bench: "^BenchmarkRecovery100k$/^SnapshotEvery100$", Metric: "ns/op", Scale: 1e-6}},
	{ID: "hybrid_selective_p95", Title: "Hybrid search at 100k chunks, selective terms, p95", Unit: "ms", Target: 5,
		Source: source{Probe: "hybrid:selective"}},
	{ID: "hybrid_mid_p95", Title: "Hybrid search at 100k chunks, mid terms, p95", Unit: "ms", Target: 5,
		Source: source{Probe: "hybrid:mid"}},
	{ID: "hybrid_broad_p95", Title: "Hybrid search at 100k chunks, broad terms, p95", Unit: "ms", Target: 5,
		Source: source{Probe: "hybrid:broad"}},
	{ID: "hybrid_multi_p95", Title: "Hybrid search at 100k chunks, question-like queries of 4-5 words, p95", Unit: "ms",
		Target: 5, Source: source{Probe: "hybrid:multi"}},
	{ID: "gateway_ingress_p99", Title: "Gateway ingress: update to the edge's inbox, p99", Unit: "ms", Target: 20,
		Source: source{Pkg: "e2e", Bench: "^BenchmarkGatewayIngress$", Metric: "p99-ms"}},
	{ID: "gateway_egress_p99", Title: "Gateway egress: outbox commit to sendMessage, p99", Unit: "ms", Target: 50,
		Source: source{Pkg: "e2e", Bench: "^BenchmarkGatewayEgress$", Metric: "p99-ms"}},
	{ID: "egress_model_added_p50", Title: "Model call through the egress gateway's service route, added to a direct call, p50 (floor: the direct call)",
		Unit: "µs", Target: 1000,
		Source: source{Pkg: "daemon/egress/svc", Bench: "^BenchmarkModelCallThroughGateway$/^Plain$", Metric: "added-p50-µs"},
		Floor:  &source{Pkg: "daemon/egress/svc", Bench: "^BenchmarkModelCallThroughGateway$/^Plain$", Metric: "direct-p50-µs"}},
	{ID: "egress_model_added_p99", Title: "Model call through the egress gateway's service route, added to a direct call, p99 (floor: the direct call)",
		Unit: "µs", Target: 5000,
		Source: source{Pkg: "daemon/egress/svc", Bench: "^BenchmarkModelCallThroughGateway$/^Plain$", Metric: "added-p99-µs"},
		Floor:  &source{Pkg: "daemon/egress/svc", Bench: "^BenchmarkModelCallThroughGateway$/^Plain$", Metric: "direct-p99-µs"}},
	{ID: "egress_ttft_added_p50", Title: "Streamed model call through the egress gateway, time to first token added, p50 (floor: direct)",
		Unit: "µs", Target: 1000,
		Source: source{Pkg: "daemon/egress/svc", Bench: "^BenchmarkModelCallThroughGateway$/^Stream$", Metric: "added-ttft-p50-µs"},
		Floor:  &source{Pkg: "daemon/egress/svc", Bench: "^BenchmarkModelCallThroughGateway$/^Stream$", Metric: "direct-ttft-p50-µs"}},
	{ID: "egress_ttft_added_p99", Title: "Streamed model call through the egress gateway, time to first token added, p99 (floor: direct)",
		Unit: "µs", Target: 5000,
		Source: source{Pkg: "daemon/egress/svc", Bench: "^BenchmarkModelCallThroughGateway$/^Stream$", Metric: "added-ttft-p99-µs"},
		Floor:  &source{Pkg: "daemon/egress/svc", Bench: "^BenchmarkModelCallThroughGateway$/^Stream$", Metric: "direct-ttft-p99-µs"}},
	{ID: "egress_download_share", Title: "50 MB HTTPS download through the tools' proxy and the egress gateway, share of the direct download in the same run",
		Unit: "%", Target: 80, Higher: true,
		Source: source{Pkg: "daemon/egress", Bench: "^BenchmarkProxiedDownload$", Metric: "proxied-%-of-direct", Benchtime: "6x"}},
	{ID: "start_process_p95", Title: "Start to first acknowledged heartbeat, process runtime, p95", Unit: "ms", Target: 200,
		Source: source{Pkg: "daemon", Bench: "^BenchmarkStartToFirstHeartbeat$/^Process$", Metric: "p95-ms"}},
	{ID: "start_docker_p95", Title: "Start to first acknowledged heartbeat, docker runtime, p95", Unit: "ms", Target: 1000,
		Source: source{Pkg: "daemon", Bench: "^BenchmarkStartToFirstHeartbeat$/^Docker$", Metric: "p95-ms"}},
	{ID: "lock_uncontended", Title: "Lock acquire and release, uncontended, one core", Unit: "ops/s", Target: 1e6, Higher: true,
		Source: source{Pkg: "agent/lock", Bench: "^BenchmarkAcquireUncontended$/^Exec$/^Others0$", Metric: "ns/op",
			Scale: 1e-9, Invert: true, CPU: 1}},
	{ID: "arbiter_overhead_p99", Title: "Arbiter overhead per tool call, p99", Unit: "µs", Target: 100,
		Source: source{Pkg: "agent/arbiter", Bench: "^BenchmarkProposeOverhead$", Metric: "p99-µs"}},
	{ID: "arbiter_overhead_p50", Title: "Arbiter overhead per tool call, p50", Unit: "µs", Target: 30,
		Source: source{Pkg: "agent/arbiter", Bench: "^BenchmarkProposeOverhead$", Metric: "p50-µs"}},
	{ID: "tool_schema_share", Title: "Tool schemas per model call with 150 tools, share of a 32K window (floor: the tools sent whole)",
		Unit: "%", Target: 20,
		Source: source{Pkg: "agent/lane", Bench: "^BenchmarkOfferTools$/^auto$", Metric: "schema_tokens", Scale: 100.0 / 32768,
			Benchtime: "100x"},
		Floor: &source{Pkg: "agent/lane", Bench: "^BenchmarkOfferTools$/^direct$", Metric: "schema_tokens", Scale: 100.0 / 32768,
			Benchtime: "100x"}},
	{ID: "step_four_disjoint", Title: "One step of 4 disjoint 200 ms tool calls (floor: the same calls one by one)", Unit: "ms",
		Target: 300,
		Source: source{Pkg: "agent/arbiter", Bench: "^BenchmarkStepFourDisjointCalls$", Metric: "ns/op", Scale: 1e-6, Benchtime: "5x"},
		Floor:  &source{Pkg: "agent/arbiter", Bench: "^BenchmarkStepFourCallsOneByOne$", Metric: "ns/op", Scale: 1e-6, Benchtime: "5x"}},
	{ID: "step_four_writes", Title: "One model step of 4 file writes through the agent and choird, p50, each writing its intent ahead (floor: 4 reads, no intent)",
		Unit: "ms", Measured: true,
		Source: source{Pkg: "agent", Bench: "^BenchmarkStepOfFourCalls$/^Writes$", Metric: "step-p50-ms", Benchtime: "40x"},
		Floor:  &source{Pkg: "agent", Bench: "^BenchmarkStepOfFourCalls$/^Reads$", Metric: "step-p50-ms", Benchtime: "40x"}},
	{ID: "edge_reply_busy", Title: "Edge reply while two core jobs run tool scripts, as a multiple of idle in the same run",
		Unit: "×", Target: 2,
		Source: source{Pkg: "agent/lane/core", Bench: "^BenchmarkEdgeReplyWithCores$/^ToolScripts$", Metric: "busy/idle"}},
	{ID: "browse_text_warm_p95", Title: "Browse text of a local 200 KB page, warm, p95 (floor: a plain fetch and extraction)",
		Unit: "ms", Target: 500,
		Source: source{Pkg: "daemon/browser", Bench: "^BenchmarkBrowseTextWarm$", Metric: "p95-ms", Benchtime: "20x"},
		Floor:  &source{Pkg: "daemon/browser", Bench: "^BenchmarkFetchTextFloor$", Metric: "p95-ms", Benchtime: "20x"}},
	{ID: "recall_hybrid_r1", Title: "Retrieval, held-out questions, hybrid R@1 (floor: BM25 over the same turns)", Unit: "",
		Higher: true, Measured: true, Source: source{Probe: "recall:hybrid:1"}, Floor: &source{Probe: "recall:bm25:1"}},
	{ID: "recall_hybrid_r5", Title: "Retrieval, held-out questions, hybrid R@5 (floor: BM25 over the same turns)", Unit: "",
		Higher: true, Measured: true, Source: source{Probe: "recall:hybrid:5"}, Floor: &source{Probe: "recall:bm25:5"}},
	{ID: "recall_hybrid_r10", Title: "Retrieval, held-out questions, hybrid R@10 (floor: BM25 over the same turns)", Unit: "",
		Higher: true, Measured: true, Source: source{Probe: "recall:hybrid:10"}, Floor: &source{Probe: "recall:bm25:10"}},
	{ID: "recall_text_r1", Title: "Retrieval, held-out questions, full text R@1 (floor: BM25 over the same turns)", Unit: "",
		Higher: true, Measured: true, Source: source{Probe: "recall:text:1"}, Floor: &source{Probe: "recall:bm25:1"}},
	{ID: "recall_text_r5", Title: "Retrieval, held-out questions, full text R@5 (floor: BM25 over the same turns)", Unit: "",
		Higher: true, Measured: true, Source: source{Probe: "recall:text:5"}, Floor: &source{Probe: "recall:bm25:5"}},
	{ID: "recall_text_r10", Title: "Retrieval, held-out questions, full text R@10 (floor: BM25 over the same turns)", Unit: "",
		Higher: true, Measured: true, Source: source{Probe: "recall:text:10"}, Floor: &source{Probe: "recall:bm25:10"}},
	{ID: "recall_vector_r1", Title: "Retrieval, held-out questions, vector R@1 (floor: BM25 over the same turns)", Unit: "",
		Higher: true, Measured: true, Source: source{Probe: "recall:vector:1"}, Floor: &source{Probe: "recall:bm25:1"}},
	{ID: "recall_vector_r5", Title: "Retrieval, held-out questions, vector R@5 (floor: BM25 over the same turns)", Unit: "",
		Higher: true, Measured: true, Source: source{Probe: "recall:vector:5"}, Floor: &source{Probe: "recall:bm25:5"}},
	{ID: "recall_vector_r10", Title: "Retrieval, held-out questions, vector R@10 (floor: BM25 over the same turns)", Unit: "",
		Higher: true, Measured: true, Source: source{Probe: "recall:vector:10"}, Floor: &source{Probe: "recall:bm25:10"}},
	{ID: "rss_choird", Title: "Idle resident memory of choird (one agent running)", Unit: "MiB", Target: 64,
		Source: source{Probe: "rss:choird"}},
	{ID: "rss_agent", Title: "Idle resident memory of choir-agent (process runtime)", Unit: "MiB", Target: 32,
		Source: source{Probe: "rss:choir-agent"}},
}
