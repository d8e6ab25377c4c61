//! `recall bench`: GPU and CPU figures for an op, next to PyTorch measured in the same run, written as a
//! markdown report with full provenance.

use crate::util::{COMMIT, cpu_model, grouped, threads, utc_date};
use recall::diagnostics::bench::{CosineFigures, cpu_cosine_ms, random_matrix};
use recall::{Engine, GpuStatus};
use std::fmt::Write as _;
use std::process::{Command, ExitCode};

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The op to measure: `cosine` (all scores), `knn` (cosine similarity fused with top-k), `spread`
    /// (activation spreading over a generated power-law graph), `kmeans` (one Lloyd iteration), `noise`
    /// (clip-and-noise), `candidates` (candidate scoring: `--batch-queries` queries, `--candidates` random
    /// ids each, resident corpus, cosine top-k), `stream` (out-of-core knn), `multi-gpu` (batch knn and
    /// single-query load over a
    /// corpus sharded on every GPU against GPU 0 alone), or `sweep`: every op over a ladder of sizes on CPU, GPU and the peers, with
    /// break-even sizes, written to a report directory (`--out`, default `bench-report`); `break-even`:
    /// the executor's calibrated break-even size of every op (or `--ops`) against a sweep of every grid size
    /// (x1.19) of the same calls, timed and read the same way (`--reps`); `cpu-spread`: CPU spreading (`--nodes`, `--edges`, `--hops`) against the
    /// memory bandwidth measured in the same run.
    #[arg(default_value = "cosine")]
    op: String,
    /// stream: rows per streamed chunk, in MiB of corpus (out-of-core knn).
    #[arg(long, default_value_t = 256)]
    chunk_mib: usize,
    /// sweep: small sizes and few repetitions (seconds on a laptop).
    #[arg(long)]
    quick: bool,
    /// sweep: the sizes to measure, comma-separated (default 1000,4000,16000,64000,256000; with --quick
    /// 256,1024,4096).
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<usize>>,
    /// sweep: the ops to measure, comma-separated (default all: similarity, knn, score_candidates, spread,
    /// kmeans, clip_and_noise).
    #[arg(long, value_delimiter = ',')]
    ops: Option<Vec<String>>,
    /// sweep: do not run the PyTorch/CuPy peers.
    #[arg(long)]
    no_peer: bool,
    /// spread: nodes of the generated graph.
    #[arg(long, default_value_t = 1_000_000)]
    nodes: usize,
    /// spread: edges of the generated graph.
    #[arg(long, default_value_t = 16_000_000)]
    edges: usize,
    /// spread: hops.
    #[arg(long, default_value_t = 3)]
    hops: usize,
    /// spread: decay per hop.
    #[arg(long, default_value_t = 0.5)]
    decay: f32,
    /// spread: threshold.
    #[arg(long, default_value_t = 0.01)]
    threshold: f32,
    /// kmeans: clusters.
    #[arg(long, default_value_t = 1024)]
    clusters: usize,
    /// spread: where the graph is written as .npy for the peer.
    #[arg(long, default_value = "/tmp/recall-bench-graph")]
    graph_dir: String,
    /// k for `knn`.
    #[arg(long, default_value_t = 10)]
    k: usize,
    #[arg(long, default_value_t = 1_000_000)]
    rows: usize,
    #[arg(long, default_value_t = 768)]
    dim: usize,
    #[arg(long, default_value_t = 1)]
    queries: usize,
    /// Timed repetitions (the median is reported).
    #[arg(long, default_value_t = 20)]
    iters: usize,
    /// The peer script (PyTorch); skipped when Python or torch is missing.
    #[arg(long, default_value = "benches/peers/peers.py")]
    peer_script: String,
    /// Skip the CPU measurement.
    #[arg(long)]
    no_cpu: bool,
    /// Also write the report to this file (sweep: the report directory).
    #[arg(long)]
    out: Option<String>,
    /// multi-gpu: queries of the batch knn case.
    #[arg(long, default_value_t = 1024)]
    batch_queries: usize,
    /// multi-gpu: threads issuing single-query knn at once in the independent-load case.
    #[arg(long, default_value_t = 32)]
    threads: usize,
    /// multi-gpu: single queries issued in total per run of the independent-load case.
    #[arg(long, default_value_t = 4096)]
    single_queries: usize,
    /// multi-gpu: most queries per dynamic batch (`BatchConfig::max_batch`; default: the engine's).
    #[arg(long)]
    max_batch: Option<usize>,
    /// multi-gpu: batches running at once (`BatchConfig::in_flight`; default: the engine's).
    #[arg(long)]
    batch_in_flight: Option<usize>,
    /// candidates: distinct random candidate ids per query (the queries are `--batch-queries`).
    #[arg(long, default_value_t = 1000)]
    candidates: usize,
    /// candidates: where the corpus, queries and ids are written as .npy for the peer (and the peer's
    /// answer read back).
    #[arg(long, default_value = "/tmp/recall-bench-candidates")]
    data_dir: String,
    /// break-even: timed calls per size and device, for calibration and the sweep alike (the best is
    /// kept; more where the two devices are within noise); default: what the production calibration uses.
    #[arg(long)]
    reps: Option<usize>,
    /// break-even: the GPU backends' staging payback (`STAGING_PAYBACK`: the pinned ring is made once the large
    /// copies add up to this many times its size); 0 makes it at the first large copy, so that every upload and
    /// download from `STAGED_UPLOAD_MIN_BYTES` up is staged from the first call on (a long-running process's
    /// steady state). Default: the library's.
    #[arg(long)]
    staging_payback: Option<u64>,
}

fn peer(a: &BenchArgs) -> Result<serde_free::Json, String> {
    peer_op(a, "cosine")
}

fn peer_op(a: &BenchArgs, op: &str) -> Result<serde_free::Json, String> {
    if !std::path::Path::new(&a.peer_script).exists() {
        return Err(format!("{} not found", a.peer_script));
    }
    let out = Command::new("python3")
        .arg(&a.peer_script)
        .arg(op)
        .args(["--graph-dir", &a.graph_dir, "--hops", &a.hops.to_string()])
        .args([
            "--decay",
            &a.decay.to_string(),
            "--threshold",
            &a.threshold.to_string(),
        ])
        .args(["--clusters", &a.clusters.to_string()])
        .args(["--k", &a.k.to_string()])
        .args(["--rows", &a.rows.to_string(), "--dim", &a.dim.to_string()])
        .args([
            "--queries",
            &a.queries.to_string(),
            "--iters",
            &a.iters.to_string(),
        ])
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("").to_string();
    if !out.status.success() || line.is_empty() {
        return Err(format!(
            "peer script failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(serde_free::Json(line))
}

/// Just enough JSON reading for the peer's flat object of numbers and strings (no serde dependency).
pub(crate) mod serde_free {
    pub struct Json(pub String);
    impl Json {
        fn raw(&self, key: &str) -> Option<&str> {
            let pat = format!("\"{key}\": ");
            let start = self.0.find(&pat)? + pat.len();
            let rest = &self.0[start..];
            if let Some(r) = rest.strip_prefix('"') {
                return r.find('"').map(|e| &r[..e]);
            }
            let end = rest.find([',', '}']).unwrap_or(rest.len());
            Some(rest[..end].trim())
        }
        pub fn num(&self, key: &str) -> Option<f64> {
            self.raw(key)?.parse().ok()
        }
        pub fn str(&self, key: &str) -> Option<String> {
            self.raw(key).map(str::to_string)
        }
    }
}

pub fn run(a: BenchArgs) -> Result<ExitCode, String> {
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    // Sizes no allocation can hold are one-line errors, not a "capacity overflow" panic (or an overflowing
    // multiply) in the generators: the corpus, the queries, a score matrix, the graph's edges, the centroids.
    use crate::util::check_size;
    check_size("--rows x --dim", &[a.rows, a.dim])?;
    check_size("--queries x --dim", &[a.queries, a.dim])?;
    check_size("--queries x --rows", &[a.queries, a.rows])?;
    check_size("--edges", &[a.edges, 4])?;
    check_size("--clusters x --dim", &[a.clusters, a.dim])?;
    if a.op == "break-even" {
        let (r, code) =
            crate::calib::break_even(a.ops.as_deref(), a.reps, a.staging_payback, &command)?;
        emit(&r, &a.out)?;
        return Ok(code);
    }
    if a.op == "cpu-spread" {
        let r = crate::calib::cpu_spread(a.nodes, a.edges, a.hops, a.iters.min(10), &command)?;
        emit(&r, &a.out)?;
        return Ok(ExitCode::SUCCESS);
    }
    if a.op == "sweep" {
        return run_sweep(a);
    }
    if a.op == "knn" {
        return run_knn(a);
    }
    if a.op == "spread" {
        return run_spread(a);
    }
    if a.op == "kmeans" {
        return run_kmeans(a);
    }
    if a.op == "noise" {
        return run_noise(a);
    }
    if a.op == "stream" {
        return run_stream(a);
    }
    if a.op == "multi-gpu" {
        return run_multi_gpu(a);
    }
    if a.op == "candidates" {
        return run_candidates(a);
    }
    if a.op != "cosine" {
        return Err(format!(
            "unknown op {:?} (available: cosine, knn, candidates, spread, kmeans, noise, stream, multi-gpu, sweep, break-even, cpu-spread)",
            a.op
        ));
    }
    if a.rows == 0 || a.dim == 0 || a.queries == 0 {
        return Err("--rows, --dim and --queries must be at least 1".into());
    }
    let engine = Engine::new().map_err(|e| e.to_string())?;
    eprintln!(
        "generating {} x {} corpus and {} queries",
        grouped(a.rows as u64),
        a.dim,
        a.queries
    );
    let corpus = random_matrix(1, a.rows, a.dim);
    let queries = random_matrix(2, a.queries, a.dim);
    let mut f = CosineFigures {
        n_queries: a.queries,
        n_rows: a.rows,
        dim: a.dim,
        gpu_kernel_ms: None,
        gpu_resident_call_ms: None,
        gpu_copy_gbps: None,
        cpu_ms: None,
        bit_identical: None,
    };
    let mut gpu_scores = None;
    let mut device_line = String::from("no GPU");
    if let (Some(gpu), GpuStatus::Ready(d)) = (engine.gpu_backend(), engine.gpu_status()) {
        device_line = format!(
            "{} ({}, {} SMs), driver CUDA {}, kernels {}",
            d.name, d.sm, d.sm_count, d.driver, d.image
        );
        f.gpu_copy_gbps = Some(recall::diagnostics::bench::copy_gbps(
            gpu,
            1 << 30,
            a.iters,
        )?);
        let (k, c, s) =
            recall::diagnostics::bench::cosine_ms(gpu, &queries, &corpus, a.dim, a.iters)?;
        f.gpu_kernel_ms = Some(k);
        f.gpu_resident_call_ms = Some(c);
        gpu_scores = Some(s);
    }
    if !a.no_cpu {
        let (ms, cpu_scores) = cpu_cosine_ms(&queries, &corpus, a.dim, a.iters.min(5))?;
        f.cpu_ms = Some(ms);
        if let Some(g) = &gpu_scores {
            f.bit_identical = Some(
                g.iter()
                    .zip(&cpu_scores)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
            );
        }
    }
    let peer = if gpu_scores.is_some() {
        Some(peer(&a))
    } else {
        None
    };

    let mut r = String::new();
    let _ = writeln!(
        r,
        "## cosine similarity, {} queries x {} rows x {} dims (f32, exact mode)\n",
        a.queries,
        grouped(a.rows as u64),
        a.dim
    );
    let _ = writeln!(r, "- date: {} (UTC)", utc_date());
    let _ = writeln!(r, "- device: {device_line}");
    let _ = writeln!(
        r,
        "- host CPU: {} ({} threads), SIMD path {}",
        cpu_model(),
        threads(),
        recall::cpu_simd_level()
    );
    let _ = writeln!(r, "- recall commit: {COMMIT}");
    let _ = writeln!(
        r,
        "- command: `recall bench cosine --rows {} --dim {} --queries {} --iters {}`",
        a.rows, a.dim, a.queries, a.iters
    );
    let _ = writeln!(
        r,
        "- timing: median of {} runs after warm-up; GPU work synchronised before the clock stops\n",
        a.iters
    );
    let _ = writeln!(r, "| what | time | achieved | note |");
    let _ = writeln!(r, "|---|---|---|---|");
    if let Some(c) = f.gpu_copy_gbps {
        let _ = writeln!(
            r,
            "| recall: device copy, 1 GiB (cuMemcpyDtoD) | | {c:.0} GB/s | the memory ceiling |"
        );
    }
    if let (Some(ms), Some(gbps)) = (f.gpu_kernel_ms, f.kernel_gbps()) {
        let pct = f
            .gpu_copy_gbps
            .map(|c| format!("{:.0} % of copy", 100.0 * gbps / c))
            .unwrap_or_default();
        let _ = writeln!(
            r,
            "| recall GPU: cosine kernel, corpus resident | {:.1} us | {gbps:.0} GB/s | {pct} |",
            ms * 1e3
        );
    }
    if let Some(ms) = f.gpu_resident_call_ms {
        let _ = writeln!(
            r,
            "| recall GPU: call with corpus resident (query up, kernel, {} scores down) | {:.1} us | | |",
            grouped((a.queries * a.rows) as u64),
            ms * 1e3
        );
    }
    peer_rows(&mut r, peer.as_ref(), 1, |r, name, p| {
        if let Some(ms) = p.num("copy_gbps") {
            let _ = writeln!(
                r,
                "| {name}: `dst.copy_(src)`, 1 GiB | | {ms:.0} GB/s | peer's view of the ceiling |"
            );
        }
        if let Some(ms) = p.num("similarity_ms") {
            let ratio = f
                .gpu_kernel_ms
                .map(|k| format!("recall kernel = {:.2}x peer time", k / ms))
                .unwrap_or_default();
            let _ = writeln!(
                r,
                "| {name}: `{}` | {:.1} us | {:.0} GB/s | {ratio} |",
                p.str("similarity_expr").unwrap_or_default(),
                ms * 1e3,
                f.min_bytes() / (ms * 1e-3) / 1e9
            );
        }
        if let Some(ms) = p.num("topk_ms") {
            let _ = writeln!(
                r,
                "| {name}: `{}` | {:.1} us | | for reference (top-k comes with issue 4) |",
                p.str("topk_expr").unwrap_or_default(),
                ms * 1e3
            );
        }
    });
    if let Some(ms) = f.cpu_ms {
        let gbps = f.min_bytes() / (ms * 1e-3) / 1e9;
        let _ = writeln!(
            r,
            "| recall CPU ({} threads) | {:.2} ms | {gbps:.1} GB/s | |",
            threads(),
            ms
        );
    }
    if let Some(same) = f.bit_identical {
        let _ = writeln!(
            r,
            "\nGPU and CPU scores bit-identical: **{}**",
            if same { "yes" } else { "NO" }
        );
    }
    emit(&r, &a.out)?;
    Ok(if f.bit_identical == Some(false) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `recall bench knn`: similarity fused with top-k, corpus resident, next to `torch.topk(normalize(q) @ C.T, k)`.
fn run_knn(a: BenchArgs) -> Result<ExitCode, String> {
    if a.rows == 0 || a.dim == 0 || a.queries == 0 || a.k == 0 || a.k > a.rows {
        return Err("--rows, --dim, --queries must be at least 1 and 1 <= --k <= --rows".into());
    }
    let engine = Engine::new().map_err(|e| e.to_string())?;
    let (Some(gpu), GpuStatus::Ready(d)) = (engine.gpu_backend(), engine.gpu_status()) else {
        return Err(format!("bench knn needs a GPU: {}", gpu_reason(&engine)));
    };
    eprintln!(
        "generating {} x {} corpus and {} queries",
        grouped(a.rows as u64),
        a.dim,
        a.queries
    );
    let corpus = random_matrix(1, a.rows, a.dim);
    let queries = random_matrix(2, a.queries, a.dim);
    let (sim_ms, knn_ms, gpu_top) =
        recall::diagnostics::bench::knn_ms(gpu, &queries, &corpus, a.dim, a.k, a.iters)?;
    // Many queries run the exact GEMM: each GEMM kernel alone (similarity only), with its TFLOP/s.
    let gemm = if a.queries > 8 {
        recall::diagnostics::bench::gemm_ms(gpu, &queries, &corpus, a.dim, a.iters)?
    } else {
        Vec::new()
    };
    let flop = 2.0 * (a.queries * a.rows * a.dim) as f64;
    // The CPU's answer for the same call (skipped for big batches: minutes on a CPU).
    let cpu = if a.no_cpu || (a.queries as u64) * (a.rows as u64) * (a.dim as u64) > 100_000_000_000
    {
        None
    } else {
        let cpu_engine = Engine::builder()
            .device(recall::DevicePolicy::Cpu)
            .build()
            .map_err(|e| e.to_string())?;
        // One untimed call first: it starts the thread pool, as the GPU side's warm-up loads the kernels.
        let knn = || cpu_engine.knn(&queries, &corpus, a.dim, recall::Metric::Cosine, a.k);
        knn().map_err(|e| e.to_string())?;
        let t = std::time::Instant::now();
        let r = knn().map_err(|e| e.to_string())?;
        Some((t.elapsed().as_secs_f64() * 1e3, r))
    };
    // The user's path: `Engine::knn_in` with a corpus handle (uploaded once, then resident), end to end, in
    // `mode`: the first call's answer and the median of the timed ones.
    let handle_path = |mode: recall::Mode| -> Result<(recall::Neighbors, f64), String> {
        let engine = Engine::builder()
            .device(recall::DevicePolicy::Gpu)
            .gpu_min_work(0)
            .mode(mode)
            .build()
            .map_err(|e| e.to_string())?;
        let handle = engine
            .corpus(corpus.clone(), a.dim)
            .map_err(|e| e.to_string())?;
        let run = || engine.knn_in(&queries, &handle, recall::Metric::Cosine, a.k);
        let first = run().map_err(|e| e.to_string())?;
        let mut times = Vec::new();
        for _ in 0..a.iters.max(1) {
            let t = std::time::Instant::now();
            run().map_err(|e| e.to_string())?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok((first, recall::diagnostics::bench::median(times)))
    };
    let (first, handle_ms) = handle_path(recall::Mode::Exact)?;
    if first.ids != gpu_top.ids {
        return Err("Engine::knn_in disagrees with the kernel-level knn".into());
    }
    // Fast mode (tensor cores, sm_80+, more than 8 queries): the same handle path, with its recall against
    // the exact top-k.
    let mut fast = Vec::new();
    if a.queries > 8 {
        for (mode, name) in [
            (recall::Mode::FastF16, "fast mode f16"),
            (recall::Mode::FastBf16, "fast mode bf16"),
        ] {
            let (first, ms) = handle_path(mode)?;
            let mut hits = 0usize;
            for q in 0..a.queries {
                let exact = &gpu_top.ids[q * a.k..(q + 1) * a.k];
                hits += first.ids[q * a.k..(q + 1) * a.k]
                    .iter()
                    .filter(|id| exact.contains(id))
                    .count();
            }
            fast.push((name, ms, hits as f64 / (a.queries * a.k) as f64));
        }
    }
    // Fast mode at kernel level (16-bit operands and norms resident): the fused knn against the GEMM alone
    // (its TFLOP/s) and the GEMM + separate selection.
    let mut fast_kernel = Vec::new();
    if a.queries > 8 {
        for (bf16, name) in [(false, "f16"), (true, "bf16")] {
            match recall::diagnostics::bench::fast_knn_ms(
                gpu, &queries, &corpus, a.dim, a.k, a.iters, bf16,
            ) {
                Ok(f) => fast_kernel.push((name, f)),
                Err(e) => eprintln!("fast mode {name} kernel figures skipped: {e}"),
            }
        }
    }
    let parts = if a.queries == 1 && a.rows <= 100_000 {
        recall::diagnostics::bench::knn_latency_parts(
            gpu,
            &queries,
            &corpus,
            a.dim,
            a.k,
            a.iters.max(50),
        )?
    } else {
        Vec::new()
    };
    // Few queries are memory-bound: the corpus read against the device's copy bandwidth (read + write).
    let copy = if a.queries <= 4 {
        Some(recall::diagnostics::bench::copy_gbps(
            gpu,
            1 << 30,
            a.iters,
        )?)
    } else {
        None
    };
    let corpus_bytes = (a.rows * a.dim * 4) as f64;
    let of_copy = |ms: f64| -> String {
        copy.map_or(String::new(), |c| {
            let gbps = corpus_bytes / (ms * 1e-3) / 1e9;
            format!(
                "; corpus read at {gbps:.0} GB/s = {:.0} % of copy",
                100.0 * gbps / c
            )
        })
    };
    let peer = peer(&a);
    let mut r = String::new();
    header(
        &mut r,
        &format!(
            "knn (cosine, top-{}), {} queries x {} rows x {} dims (f32, exact mode)",
            a.k,
            a.queries,
            grouped(a.rows as u64),
            a.dim
        ),
        format!(
            "recall bench knn --rows {} --dim {} --queries {} --k {} --iters {}",
            a.rows, a.dim, a.queries, a.k, a.iters
        ),
        d,
    );
    let _ = writeln!(
        r,
        "- timing: median of {} runs after warm-up, host clock around GPU work that ends in a synchronise or a download; corpus and its norms resident, queries uploaded per call\n",
        a.iters
    );
    if a.queries == 1 {
        let _ = writeln!(
            r,
            "- single-query scan above 262,144 rows: `{}` (`RECALL_SCAN1`; old: row scan + separate selection; new, new-s8: persistent `sm80_scan1_*`)\n",
            recall::diagnostics::bench::scan1_mode(gpu)
        );
        let _ = writeln!(
            r,
            "- one-query answer readback: `{}` (`RECALL_ONE_QUERY_READBACK`; mapped: the kernel writes the k pairs into mapped pinned memory; copy: a device-to-host copy after it)\n",
            recall::diagnostics::bench::one_query_readback()
        );
    }
    let _ = writeln!(r, "| what | time | note |");
    let _ = writeln!(r, "|---|---|---|");
    if let Some(c) = copy {
        let _ = writeln!(
            r,
            "| recall: device copy, 1 GiB (cuMemcpyDtoD, read + write) | | {c:.0} GB/s, the memory ceiling |"
        );
    }
    let _ = writeln!(
        r,
        "| recall GPU: similarity only (norms of queries + scores) | {:.1} us | {:.1} TFLOP/s{} |",
        sim_ms * 1e3,
        flop / (sim_ms * 1e-3) / 1e12,
        of_copy(sim_ms)
    );
    for t in &gemm {
        let _ = writeln!(
            r,
            "| recall GPU: exact GEMM `{}_cosine` alone (queries and norms resident, knn's query chunks) | {:.1} us | **{:.1} TFLOP/s**; scores bit-identical to the first GEMM row: {} |",
            t.kernel,
            t.ms * 1e3,
            t.tflops,
            if t.same_bits { "yes" } else { "NO" }
        );
    }
    let _ = writeln!(
        r,
        "| recall GPU: knn = similarity + exact top-{} (one-pass select for k <= 32, radix select above; k pairs downloaded) | {:.1} us | top-k adds {:.1} % |",
        a.k,
        knn_ms * 1e3,
        100.0 * (knn_ms - sim_ms) / sim_ms
    );
    let _ = writeln!(
        r,
        "| recall `Engine::knn_in` (corpus handle resident on the GPU; query upload, knn, k pairs back) | {:.1} us | end to end, the user's path{} |",
        handle_ms * 1e3,
        of_copy(handle_ms)
    );
    for (name, ms, rec) in &fast {
        let _ = writeln!(
            r,
            "| recall `Engine::knn_in`, {name} (tensor cores; exact below sm_80) | {:.1} us | recall@{} against exact: {:.4} |",
            ms * 1e3,
            a.k,
            rec
        );
    }
    let flop = 2.0 * a.queries as f64 * a.rows as f64 * a.dim as f64;
    // The fast-mode kernel family the device description names (`sm90a_*` on `wgmma`, else `tc_*`).
    let fam = if d.image.contains("sm90a_") {
        "sm90a"
    } else {
        "tc"
    };
    for (name, f) in &fast_kernel {
        if let Some(ms) = f.fused_ms {
            let _ = writeln!(
                r,
                "| recall GPU fast {name}, kernel level: `{}_{name}_cosine` (GEMM + fused top-{}) + `tc_knn_merge`, k pairs back | {:.1} us | {:.0} TFLOP/s effective; lists equal GEMM + select_topk: {} |",
                f.fused_family.unwrap_or("?"),
                a.k,
                ms * 1e3,
                flop / (ms * 1e-3) / 1e12,
                match f.same {
                    Some(true) => "yes",
                    Some(false) => "**NO**",
                    None => "-",
                }
            );
        }
        let _ = writeln!(
            r,
            "| recall GPU fast {name}, kernel level: `{fam}_gemm_{name}_cosine` alone (every score written) | {:.1} us | {:.0} TFLOP/s |",
            f.gemm_ms * 1e3,
            flop / (f.gemm_ms * 1e-3) / 1e12
        );
        let _ = writeln!(
            r,
            "| recall GPU fast {name}, kernel level: `{fam}_gemm_{name}_cosine` + `select_topk` (unfused) | {:.1} us | |",
            f.gemm_select_ms * 1e3
        );
        for (what, ms) in &f.query_parts {
            let _ = writeln!(
                r,
                "| recall fast {name}, before the kernel on `Engine::knn_in`'s path: {what} | {:.1} us | each step alone |",
                ms * 1e3
            );
        }
    }
    peer_rows(&mut r, Some(&peer), 0, |r, name, p| {
        if let (Some(ms), Some(fused)) = (
            p.num("topk_fp16_ms"),
            fast_kernel.first().and_then(|(_, f)| f.fused_ms),
        ) {
            let _ = writeln!(
                r,
                "| {name}: fp16 matmul + topk (below) against recall fast f16 fused, kernel level | | **{:.2}x** the peer's time |",
                fused / ms
            );
        }
        for (key, expr) in [
            ("topk_fp16_ms", "topk_fp16_expr"),
            ("topk_tf32_ms", "topk_tf32_expr"),
        ] {
            if let Some(ms) = p.num(key) {
                let f16 = fast.first().map(|f| f.1);
                let _ = writeln!(
                    r,
                    "| {name}: `{}` | {:.1} us | recall fast f16 / peer = {} |",
                    p.str(expr).unwrap_or_default(),
                    ms * 1e3,
                    f16.map_or("-".to_string(), |f| format!("{:.2}x", f / ms))
                );
            }
        }
        if let Some(ms) = p.num("topk_ms") {
            let _ = writeln!(
                r,
                "| {name}: `{}` | {:.1} us | recall / peer = {:.2}x (`Engine::knn_in`), {:.2}x (kernel-level knn) |",
                p.str("topk_expr").unwrap_or_default(),
                ms * 1e3,
                handle_ms / ms,
                knn_ms / ms
            );
        }
        if let Some(ms) = p.num("similarity_ms") {
            let _ = writeln!(
                r,
                "| {name}: `{}` | {:.1} us | {:.1} TFLOP/s; recall exact GEMM / peer = {} |",
                p.str("similarity_expr").unwrap_or_default(),
                ms * 1e3,
                flop / (ms * 1e-3) / 1e12,
                gemm.first()
                    .map_or("-".to_string(), |t| format!("{:.2}x", t.ms / ms))
            );
        }
    });
    if !parts.is_empty() {
        let _ = writeln!(
            r,
            "\nWhere one small call's time goes (each step alone, then a stream synchronise; median):\n"
        );
        let _ = writeln!(r, "| step | time |");
        let _ = writeln!(r, "|---|---|");
        for (name, us) in &parts {
            let _ = writeln!(r, "| {name} | {us:.1} us |");
        }
        let _ = writeln!(r);
    }
    let mut same = None;
    if let Some((ms, cpu_top)) = &cpu {
        let _ = writeln!(
            r,
            "| recall CPU knn ({} threads) | {:.2} ms | |",
            threads(),
            ms
        );
        let eq = cpu_top.ids == gpu_top.ids
            && cpu_top
                .scores
                .iter()
                .zip(&gpu_top.scores)
                .all(|(x, y)| x.to_bits() == y.to_bits());
        same = Some(eq);
        let _ = writeln!(
            r,
            "\nGPU and CPU top-{} lists identical (ids and score bits): **{}**",
            a.k,
            if eq { "yes" } else { "NO" }
        );
    }
    let gemm_agree = gemm.iter().all(|t| t.same_bits);
    if gemm.len() > 1 {
        let _ = writeln!(
            r,
            "\nThe GEMM kernels' scores identical (every bit of the last chunk): **{}**",
            if gemm_agree { "yes" } else { "NO" }
        );
    }
    emit(&r, &a.out)?;
    Ok(if same == Some(false) || !gemm_agree {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `recall bench candidates`: candidate scoring (the HNSW re-rank) against a resident corpus handle, cosine,
/// next to torch's `C[ids]` gather + `einsum` + `topk` on the identical data (handed over as .npy files).
fn run_candidates(a: BenchArgs) -> Result<ExitCode, String> {
    let nq = a.batch_queries;
    if a.rows == 0 || a.dim == 0 || nq == 0 || a.candidates == 0 || a.candidates > a.rows {
        return Err(
            "--rows, --dim, --batch-queries must be at least 1 and 1 <= --candidates <= --rows"
                .into(),
        );
    }
    if a.k == 0 || a.k > a.candidates {
        return Err("1 <= --k <= --candidates".into());
    }
    let engine = Engine::new().map_err(|e| e.to_string())?;
    let (Some(gpu), GpuStatus::Ready(d)) = (engine.gpu_backend(), engine.gpu_status()) else {
        return Err(format!(
            "bench candidates needs a GPU: {}",
            gpu_reason(&engine)
        ));
    };
    let m = a.candidates;
    eprintln!(
        "generating {} x {} corpus, {nq} queries, {m} distinct random candidate ids each",
        grouped(a.rows as u64),
        a.dim
    );
    let corpus = random_matrix(1, a.rows, a.dim);
    let queries = random_matrix(2, nq, a.dim);
    let mut rng = recall::diagnostics::SplitMix::new(7);
    let mut ids = Vec::with_capacity(nq * m);
    let mut seen = std::collections::HashSet::with_capacity(2 * m);
    for _ in 0..nq {
        seen.clear();
        while seen.len() < m {
            let id = rng.below(a.rows as u64) as u32;
            if seen.insert(id) {
                ids.push(id);
            }
        }
    }
    let offsets: Vec<usize> = (0..=nq).map(|q| q * m).collect();
    // The same data for the peer.
    let dir = &a.data_dir;
    std::fs::create_dir_all(dir).map_err(|e| format!("{dir}: {e}"))?;
    let _ = std::fs::remove_file(format!("{dir}/peer_ids.npy"));
    recall::io::write_npy(format!("{dir}/corpus.npy"), &corpus, &[a.rows, a.dim])
        .map_err(|e| e.to_string())?;
    recall::io::write_npy(format!("{dir}/queries.npy"), &queries, &[nq, a.dim])
        .map_err(|e| e.to_string())?;
    recall::io::write_npy(format!("{dir}/ids.npy"), &ids, &[nq, m]).map_err(|e| e.to_string())?;
    // Kernel-level parts, corpus and norms resident.
    let f = recall::diagnostics::bench::candidates_ms(
        gpu, &queries, &corpus, a.dim, &offsets, &ids, a.k, a.iters,
    )?;
    // The user's path: `Engine::score_candidates_in` with a corpus handle (uploaded once, then resident).
    let gpu_engine = Engine::builder()
        .device(recall::DevicePolicy::Gpu)
        .gpu_min_work(0)
        .build()
        .map_err(|e| e.to_string())?;
    let handle = gpu_engine
        .corpus(corpus.clone(), a.dim)
        .map_err(|e| e.to_string())?;
    let run = || {
        gpu_engine.score_candidates_in(
            &queries,
            &handle,
            recall::Metric::Cosine,
            &offsets,
            &ids,
            a.k,
        )
    };
    let first = run().map_err(|e| e.to_string())?;
    let mut times = Vec::new();
    for _ in 0..a.iters.max(1) {
        let t = std::time::Instant::now();
        run().map_err(|e| e.to_string())?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let handle_ms = recall::diagnostics::bench::median(times);
    let handle_same = first.ids == f.answer.ids
        && first
            .scores
            .iter()
            .zip(&f.answer.scores)
            .all(|(x, y)| x.to_bits() == y.to_bits());
    // The CPU's answer for the same call.
    let cpu = if a.no_cpu {
        None
    } else {
        let cpu_engine = Engine::builder()
            .device(recall::DevicePolicy::Cpu)
            .build()
            .map_err(|e| e.to_string())?;
        let cand = || {
            cpu_engine.score_candidates(
                &queries,
                &corpus,
                a.dim,
                recall::Metric::Cosine,
                &offsets,
                &ids,
                a.k,
            )
        };
        cand().map_err(|e| e.to_string())?; // starts the thread pool
        let t = std::time::Instant::now();
        let r = cand().map_err(|e| e.to_string())?;
        Some((t.elapsed().as_secs_f64() * 1e3, r))
    };
    let peer = peer_candidates(&a);
    // The peer's top-k ids (its own rounding), for the overlap with recall's.
    let peer_overlap = recall::io::read_npy_indices(format!("{dir}/peer_ids.npy"))
        .ok()
        .filter(|p| p.len() == nq * a.k)
        .map(|p| {
            let mut hits = 0usize;
            for q in 0..nq {
                let mine = &f.answer.ids[q * a.k..(q + 1) * a.k];
                hits += p[q * a.k..(q + 1) * a.k]
                    .iter()
                    .filter(|&&id| mine.contains(&(id as u32)))
                    .count();
            }
            hits as f64 / (nq * a.k) as f64
        });
    let gathered = (nq * m * a.dim * 4) as f64;
    let mut r = String::new();
    header(
        &mut r,
        &format!(
            "candidate scoring (cosine, top-{}), {nq} queries x {m} random candidate ids, corpus {} x {} (f32, exact mode)",
            a.k,
            grouped(a.rows as u64),
            a.dim
        ),
        format!(
            "recall bench candidates --rows {} --dim {} --batch-queries {nq} --candidates {m} --k {} --iters {}",
            a.rows, a.dim, a.k, a.iters
        ),
        d,
    );
    let _ = writeln!(
        r,
        "- timing: median of {} runs after warm-up, host clock around GPU work that ends with the answer on the host; corpus and its norms resident; {:.2} GB of candidate rows gathered per run\n",
        a.iters,
        gathered / 1e9
    );
    let _ = writeln!(r, "| what | time | gathered rows at | note |");
    let _ = writeln!(r, "|---|---|---|---|");
    let rate = |ms: f64| format!("{:.0} GB/s", gathered / (ms * 1e-3) / 1e9);
    let peer_ms = match &peer {
        Ok(p) if p.str("available").as_deref() != Some("false") => p.num("cand_ms"),
        _ => None,
    };
    let vs_peer = |ms: f64| peer_ms.map_or("-".to_string(), |p| format!("{:.2}x peer", ms / p));
    if let Some(ms) = f.fused_kernel_ms {
        let _ = writeln!(
            r,
            "| recall GPU: `sm80_cand_*` (gather + score + top-k in one launch), queries and ids on the device, k pairs back | {:.1} us | {} | **{}** (kernel level, as the peer) |",
            ms * 1e3,
            rate(ms),
            vs_peer(ms)
        );
    }
    if let Some(ms) = f.fused_call_ms {
        let _ = writeln!(
            r,
            "| recall GPU: the same from host lists (ids checked and staged page-locked, queries + ids uploaded) | {:.1} us | {} | {} |",
            ms * 1e3,
            rate(ms),
            vs_peer(ms)
        );
    }
    let _ = writeln!(
        r,
        "| recall GPU: separate path (ids uploaded, `gather_*` scores, radix select over ragged segments; below sm_80 and k > 64) | {:.1} us | {} | {} |",
        f.gather_select_ms * 1e3,
        rate(f.gather_select_ms),
        vs_peer(f.gather_select_ms)
    );
    let _ = writeln!(
        r,
        "| recall `Engine::score_candidates_in` (handle resident; validation incl. duplicate check, queries + ids up, k pairs back) | {:.1} us | {} | end to end, the user's path: {} |",
        handle_ms * 1e3,
        rate(handle_ms),
        vs_peer(handle_ms)
    );
    peer_rows(&mut r, Some(&peer), 1, |r, name, p| {
        if let Some(ms) = p.num("cand_ms") {
            let _ = writeln!(
                r,
                "| {name}: `{}` (ids and queries on the device) | {:.1} us | {} | the peer |",
                p.str("cand_expr").unwrap_or_default(),
                ms * 1e3,
                rate(ms)
            );
        }
        if let Some(ms) = p.num("cand_host_ms") {
            let _ = writeln!(
                r,
                "| {name}: the same with ids and queries copied from host memory each call | {:.1} us | {} | compare with the user's path |",
                ms * 1e3,
                rate(ms)
            );
        }
        if let Some(gbps) = p.num("copy_gbps") {
            let _ = writeln!(
                r,
                "| {name}: `dst.copy_(src)`, 1 GiB | | {gbps:.0} GB/s | the memory ceiling (read + write) |"
            );
        }
    });
    let mut ok = handle_same && f.paths_agree != Some(false);
    let _ = writeln!(
        r,
        "\n- fused and separate GPU paths, and the handle path, give identical lists: **{}**",
        match (f.paths_agree, handle_same) {
            (Some(true), true) => "yes",
            (None, true) => "yes (no fused path on this device)",
            _ => "NO",
        }
    );
    if let Some((ms, cpu_top)) = &cpu {
        let eq = cpu_top.ids == f.answer.ids
            && cpu_top
                .scores
                .iter()
                .zip(&f.answer.scores)
                .all(|(x, y)| x.to_bits() == y.to_bits());
        ok &= eq;
        let _ = writeln!(
            r,
            "- GPU and CPU top-{} lists identical (ids and score bits): **{}** (CPU engine, {} threads: {:.2} ms)",
            a.k,
            if eq { "yes" } else { "NO" },
            threads(),
            ms
        );
    }
    if let Some(o) = peer_overlap {
        let _ = writeln!(
            r,
            "- the peer's top-{} ids (its own fp32 rounding) overlap recall's: {:.4}",
            a.k, o
        );
    }
    emit(&r, &a.out)?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The peer of `bench candidates`: reads the .npy files of `--data-dir`, writes its top ids back there.
fn peer_candidates(a: &BenchArgs) -> Result<serde_free::Json, String> {
    if !std::path::Path::new(&a.peer_script).exists() {
        return Err(format!("{} not found", a.peer_script));
    }
    let out = Command::new("python3")
        .arg(&a.peer_script)
        .arg("candidates")
        .args(["--data-dir", &a.data_dir])
        .args(["--k", &a.k.to_string(), "--iters", &a.iters.to_string()])
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().unwrap_or("").to_string();
    if !out.status.success() || line.is_empty() {
        return Err(format!(
            "peer script failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(serde_free::Json(line))
}

/// The peer's rows of a report: `rows` when the peer ran, else one row saying why not (`blank` empty cells
/// keep the table's shape).
fn peer_rows(
    r: &mut String,
    peer: Option<&Result<serde_free::Json, String>>,
    blank: usize,
    rows: impl FnOnce(&mut String, &str, &serde_free::Json),
) {
    let cells = "| ".repeat(blank);
    match peer {
        Some(Ok(p)) if p.str("available").as_deref() != Some("false") => {
            let name = p.str("peer").unwrap_or_default();
            rows(r, &name, p);
        }
        Some(Ok(p)) => {
            let _ = writeln!(
                r,
                "| peer | unavailable | {cells}{} |",
                p.str("reason").unwrap_or_default()
            );
        }
        Some(Err(e)) => {
            let _ = writeln!(r, "| peer | unavailable | {cells}{e} |");
        }
        None => {}
    }
}

/// Print a report and write it to `--out` when given.
fn emit(r: &str, out: &Option<String>) -> Result<(), String> {
    print!("{r}");
    if let Some(path) = out {
        std::fs::write(path, r).map_err(|e| format!("{path}: {e}"))?;
    }
    Ok(())
}

fn header(r: &mut String, title: &str, command: String, d: &recall::GpuDescription) {
    let _ = writeln!(r, "## {title}\n");
    let _ = writeln!(r, "- date: {} (UTC)", utc_date());
    let _ = writeln!(
        r,
        "- device: {} ({}, {} SMs), driver CUDA {}, kernels {}",
        d.name, d.sm, d.sm_count, d.driver, d.image
    );
    let _ = writeln!(
        r,
        "- host CPU: {} ({} threads), SIMD path {}",
        cpu_model(),
        threads(),
        recall::cpu_simd_level()
    );
    let _ = writeln!(r, "- recall commit: {COMMIT}");
    let _ = writeln!(r, "- command: `{command}`\n");
}

/// Bytes a graph's upload moves to the device: the pull and push offsets (u64 per node), sources, weights and
/// targets (4 bytes per edge), the nodes binned by class (u32) and their spans (u64).
fn graph_upload_bytes(graph: &recall::SpreadGraph) -> f64 {
    let (n, e) = (graph.n_nodes() as f64, graph.n_edges() as f64);
    2.0 * 8.0 * (n + 1.0) + 3.0 * 4.0 * e + 4.0 * n + 8.0 * n
}

/// `recall bench spread`: a generated power-law graph, resident on the GPU, next to CuPy's cuSPARSE on the
/// identical graph (handed over as .npy files).
fn run_spread(a: BenchArgs) -> Result<ExitCode, String> {
    if a.nodes == 0 || a.hops == 0 || a.k == 0 || a.k > a.nodes {
        return Err("--nodes and --hops must be at least 1 and 1 <= --k <= --nodes".into());
    }
    let engine = Engine::new().map_err(|e| e.to_string())?;
    let (Some(gpu), GpuStatus::Ready(d)) = (engine.gpu_backend(), engine.gpu_status()) else {
        return Err(format!("bench spread needs a GPU: {}", gpu_reason(&engine)));
    };
    eprintln!(
        "generating a power-law graph: {} nodes, {} edges",
        grouped(a.nodes as u64),
        grouped(a.edges as u64)
    );
    let mut rng = recall::diagnostics::SplitMix::new(11);
    let (indptr, indices, weights) =
        recall::diagnostics::power_law_graph(&mut rng, a.nodes, a.edges, 0, 0);
    let graph =
        recall::SpreadGraph::from_csr(&indptr, &indices, &weights).map_err(|e| e.to_string())?;
    let mut seeds = vec![0.0f32; a.nodes];
    for _ in 0..(a.nodes / 1000).max(1) {
        seeds[rng.below(a.nodes as u64) as usize] = 1.0;
    }
    let (ptr, src, w) = graph.pull_arrays();
    std::fs::create_dir_all(&a.graph_dir).map_err(|e| format!("{}: {e}", a.graph_dir))?;
    let ptr64: Vec<u64> = ptr.iter().map(|&p| p as u64).collect();
    recall::io::write_npy(
        format!("{}/in_ptr.npy", a.graph_dir),
        &ptr64,
        &[ptr64.len()],
    )
    .map_err(|e| e.to_string())?;
    recall::io::write_npy(format!("{}/in_src.npy", a.graph_dir), src, &[src.len()])
        .map_err(|e| e.to_string())?;
    recall::io::write_npy(format!("{}/in_w.npy", a.graph_dir), w, &[w.len()])
        .map_err(|e| e.to_string())?;
    recall::io::write_npy(format!("{}/seeds.npy", a.graph_dir), &seeds, &[seeds.len()])
        .map_err(|e| e.to_string())?;
    // The staging ring made at the graph's first large copy, as a process that has made it (a plain spread over
    // this graph would make it within a few calls, `STAGING_PAYBACK`): the staged upload row is its steady state.
    gpu.set_staging_payback(0);
    let times = recall::diagnostics::bench::spread_ms(
        gpu,
        &graph,
        &seeds,
        a.decay,
        a.threshold,
        a.hops,
        a.k,
        a.iters,
    )?;
    // Both devices' answers, compared (the CPU's is the reference).
    let params = recall::SpreadParams {
        decay: a.decay,
        threshold: a.threshold,
        hops: a.hops,
        k: a.k,
    };
    let (hop_ms, spread_ms, dense_ms) = (times.one_hop_ms, times.full_ms, times.full_dense_ms);
    let cpu_engine = Engine::builder()
        .device(recall::DevicePolicy::Cpu)
        .build()
        .map_err(|e| e.to_string())?;
    let t = std::time::Instant::now();
    let cpu = cpu_engine
        .spread(&graph, &seeds, &params)
        .map_err(|e| e.to_string())?;
    let cpu_ms = t.elapsed().as_secs_f64() * 1e3;
    let gpu_engine = Engine::builder()
        .device(recall::DevicePolicy::Gpu)
        .build()
        .map_err(|e| e.to_string())?;
    let g = gpu_engine
        .spread(&graph, &seeds, &params)
        .map_err(|e| e.to_string())?;
    // The handle paths as a user calls them: the dense vector (`spread_in`) and the seed list of its nonzero
    // values (`spread_from`, listed from the last node down: the executor sorts its copy), graph resident.
    let handle = recall::Graph::new(graph.clone());
    let mut list: Vec<(u32, f32)> = seeds
        .iter()
        .enumerate()
        .filter(|p| *p.1 != 0.0)
        .map(|(v, &x)| (v as u32, x))
        .collect();
    list.reverse();
    let g_in = gpu_engine
        .spread_in(&handle, &seeds, &params)
        .map_err(|e| e.to_string())?;
    let g_from = gpu_engine
        .spread_from(&handle, &list, &params)
        .map_err(|e| e.to_string())?;
    let (mut in_times, mut from_times) = (Vec::new(), Vec::new());
    for _ in 0..a.iters.max(1) {
        let t = std::time::Instant::now();
        gpu_engine
            .spread_in(&handle, &seeds, &params)
            .map_err(|e| e.to_string())?;
        in_times.push(t.elapsed().as_secs_f64() * 1e3);
        let t = std::time::Instant::now();
        gpu_engine
            .spread_from(&handle, &list, &params)
            .map_err(|e| e.to_string())?;
        from_times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let median = recall::diagnostics::bench::median;
    let (in_ms, from_ms) = (median(in_times), median(from_times));
    let same_as_cpu = |activation: &[f32], top: &recall::TopK| {
        cpu.activation.len() == activation.len()
            && cpu
                .activation
                .iter()
                .zip(activation)
                .all(|(x, y)| x.to_bits() == y.to_bits())
            && cpu.top == *top
    };
    let same_dense = same_as_cpu(&g.activation, &g.top) && same_as_cpu(&g_in.activation, &g_in.top);
    let same_list = same_as_cpu(&g_from.activation, &g_from.top);
    let on_gpu = g.device != recall::Device::Cpu
        && g_in.device != recall::Device::Cpu
        && g_from.device != recall::Device::Cpu;
    let same = same_dense && same_list && on_gpu;
    let peer = peer_op(&a, "spread");
    let mut r = String::new();
    header(
        &mut r,
        &format!(
            "activation spreading, {} nodes, {} edges (power law), {} hops, top-{}",
            grouped(a.nodes as u64),
            grouped(graph.n_edges() as u64),
            a.hops,
            a.k
        ),
        format!(
            "recall bench spread --nodes {} --edges {} --hops {} --decay {} --threshold {} --k {} --iters {}",
            a.nodes, a.edges, a.hops, a.decay, a.threshold, a.k, a.iters
        ),
        d,
    );
    let _ = writeln!(r, "| what | time | note |");
    let _ = writeln!(r, "|---|---|---|");
    let _ = writeln!(
        r,
        "| recall GPU: 1 hop (pinned seed upload, the hop, synchronise), graph resident | {:.1} us | |",
        hop_ms * 1e3
    );
    let _ = writeln!(
        r,
        "| recall GPU: {} hops + exact top-{} + activation download, graph resident | {:.1} us | sparse hops while the frontier is small |",
        a.hops,
        a.k,
        spread_ms * 1e3
    );
    let _ = writeln!(
        r,
        "| recall GPU: {} hops + exact top-{} + activation download from the seed list (spread_from), graph resident | {:.1} us | {} pairs, no dense seed vector scanned; {:.2}x the dense row |",
        a.hops,
        a.k,
        times.full_list_ms * 1e3,
        list.len(),
        times.full_list_ms / spread_ms
    );
    let _ = writeln!(
        r,
        "| recall GPU: the same, every hop dense | {:.1} us | pull over all nodes |",
        dense_ms * 1e3
    );
    let _ = writeln!(
        r,
        "| recall GPU through the engine, graph resident: `Engine::spread_in` (dense vector) / `Engine::spread_from` (seed list) | {:.1} / {:.1} us | validation, dispatch and the list's sort included |",
        in_ms * 1e3,
        from_ms * 1e3
    );
    let _ = writeln!(
        r,
        "| recall GPU: one dense hop on the device, activation resident ((5 dense hops - 1) / 4) | {:.1} us | all nodes pulled, as an SpMV |",
        times.dense_hop_ms * 1e3
    );
    let _ = writeln!(
        r,
        "| recall GPU: parts of a call: 1 dense hop with seeds in and the wait / + top-{} / + activation download / + both (overlapped) | {:.1} / +{:.1} / +{:.1} / +{:.1} us | host seed scan {:.1} us of the first |",
        a.k,
        times.dense1_ms * 1e3,
        times.top_ms * 1e3,
        times.download_ms * 1e3,
        times.top_download_ms * 1e3,
        times.seed_scan_ms * 1e3
    );
    let upload_bytes = graph_upload_bytes(&graph);
    let _ = writeln!(
        r,
        "| recall GPU: the graph's upload ({:.0} MB: pull arrays, out-edges, binned nodes), every array pageable / arrays of {} MiB or more through the pinned staging ring | {:.2} / {:.2} ms | {:.1} / {:.1} GB/s; what a plain `spread` pays each call, a handle once; {} |",
        upload_bytes / 1e6,
        recall::executor::STAGED_UPLOAD_MIN_BYTES >> 20,
        times.upload_pageable_ms,
        times.upload_staged_ms,
        upload_bytes / (times.upload_pageable_ms * 1e-3) / 1e9,
        upload_bytes / (times.upload_staged_ms * 1e-3) / 1e9,
        if times.upload_ring {
            "ring made at the first large copy"
        } else {
            "**no staging ring** (no pinned memory to be had: both pageable)"
        }
    );
    peer_rows(&mut r, Some(&peer), 0, |r, name, p| {
        if let Some(ms) = p.num("hop_ms") {
            let _ = writeln!(
                r,
                "| {name}: `{}` | {:.1} us | recall 1 hop / peer = {:.2}x; dense device hop / peer = {:.2}x |",
                p.str("hop_expr").unwrap_or_default(),
                ms * 1e3,
                hop_ms / ms,
                times.dense_hop_ms / ms
            );
        }
        if let Some(ms) = p.num("spread_ms") {
            let _ = writeln!(
                r,
                "| {name}: `{}` | {:.1} us | recall / peer = {:.2}x; from the seed list / peer = {:.2}x |",
                p.str("spread_expr").unwrap_or_default(),
                ms * 1e3,
                spread_ms / ms,
                times.full_list_ms / ms
            );
        }
    });
    let _ = writeln!(
        r,
        "| recall CPU ({} threads), {} hops + top-{} | {:.2} ms | |",
        threads(),
        a.hops,
        a.k,
        cpu_ms
    );
    let _ = writeln!(
        r,
        "\nGPU and CPU activations and top-{} identical (bits): **{}** (GPU from the dense vector: {}; from the seed list: {}; every GPU call answered on the GPU: {})",
        a.k,
        if same { "yes" } else { "NO" },
        if same_dense { "yes" } else { "NO" },
        if same_list { "yes" } else { "NO" },
        if on_gpu { "yes" } else { "NO" }
    );
    emit(&r, &a.out)?;
    Ok(if same {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `recall bench kmeans`: one Lloyd iteration with the points resident, next to PyTorch.
fn run_kmeans(a: BenchArgs) -> Result<ExitCode, String> {
    if a.rows == 0 || a.dim == 0 || a.clusters == 0 || a.clusters > a.rows {
        return Err("--rows and --dim must be at least 1 and 1 <= --clusters <= --rows".into());
    }
    let engine = Engine::new().map_err(|e| e.to_string())?;
    let (Some(gpu), GpuStatus::Ready(d)) = (engine.gpu_backend(), engine.gpu_status()) else {
        return Err(format!("bench kmeans needs a GPU: {}", gpu_reason(&engine)));
    };
    eprintln!("generating {} x {} points", grouped(a.rows as u64), a.dim);
    let points = random_matrix(3, a.rows, a.dim);
    let (ms, parts) =
        recall::diagnostics::bench::kmeans_iter_ms(gpu, &points, a.dim, a.clusters, a.iters)?;
    let peer = peer_op(&a, "kmeans");
    let mut r = String::new();
    header(
        &mut r,
        &format!(
            "k-means, one Lloyd iteration, {} x {} points, K = {} (exact f32)",
            grouped(a.rows as u64),
            a.dim,
            a.clusters
        ),
        format!(
            "recall bench kmeans --rows {} --dim {} --clusters {} --iters {}",
            a.rows, a.dim, a.clusters, a.iters
        ),
        d,
    );
    let _ = writeln!(r, "| what | time | note |");
    let _ = writeln!(r, "|---|---|---|");
    let _ = writeln!(
        r,
        "| recall GPU: assignment (GEMM l2 + argmin, fused), inertia, member sort (host), update; points resident | {:.2} ms | |",
        ms
    );
    for (what, part) in &parts {
        let _ = writeln!(
            r,
            "| recall GPU, part of the iteration: {what} | {part:.2} ms | each part alone |"
        );
    }
    peer_rows(&mut r, Some(&peer), 0, |r, _name, p| {
        if let Some(pm) = p.num("kmeans_ms") {
            let _ = writeln!(
                r,
                "| {}: `{}` | {:.2} ms | recall / peer = {:.2}x |",
                p.str("peer").unwrap_or_default(),
                p.str("kmeans_expr").unwrap_or_default(),
                pm,
                ms / pm
            );
        }
    });
    emit(&r, &a.out)?;
    Ok(ExitCode::SUCCESS)
}

/// `recall bench noise`: clip-and-noise over resident rows, next to PyTorch, against the copy ceiling.
fn run_noise(a: BenchArgs) -> Result<ExitCode, String> {
    if a.rows == 0 || a.dim == 0 {
        return Err("--rows and --dim must be at least 1".into());
    }
    let engine = Engine::new().map_err(|e| e.to_string())?;
    let (Some(gpu), GpuStatus::Ready(d)) = (engine.gpu_backend(), engine.gpu_status()) else {
        return Err(format!("bench noise needs a GPU: {}", gpu_reason(&engine)));
    };
    let x = random_matrix(5, a.rows, a.dim);
    let copy = recall::diagnostics::bench::copy_gbps(gpu, 1 << 30, a.iters)?;
    let (ms, kernels) = recall::diagnostics::bench::noise_ms(gpu, &x, a.dim, a.iters, true)?;
    let (two_pass, _) = recall::diagnostics::bench::noise_ms(gpu, &x, a.dim, a.iters, false)?;
    // The user's call with the rows in host memory (upload, op, download): a fresh output each call, or one
    // output reused. At most 5 timed calls each (a call moves the rows over the bus twice).
    let host_ms = |into: bool| -> Result<(f64, String), String> {
        let mut out = vec![0.0f32; x.len()];
        let mut call = || -> Result<String, String> {
            let device = if into {
                engine
                    .clip_and_noise_into(&x, a.dim, 1.0, 0.1, 7, &mut out)
                    .map_err(|e| e.to_string())?
                    .device
            } else {
                let n = engine
                    .clip_and_noise(&x, a.dim, 1.0, 0.1, 7)
                    .map_err(|e| e.to_string())?;
                std::hint::black_box(&n.values);
                n.device
            };
            Ok(device.to_string())
        };
        let device = call()?;
        let mut times = Vec::new();
        for _ in 0..a.iters.clamp(1, 5) {
            let t = std::time::Instant::now();
            call()?;
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        Ok((recall::diagnostics::bench::median(times), device))
    };
    let (fresh_ms, fresh_dev) = host_ms(false)?;
    let (into_ms, into_dev) = host_ms(true)?;
    let bytes = 2.0 * (a.rows * a.dim * 4) as f64;
    let gbps = bytes / (ms * 1e-3) / 1e9;
    let peer = peer_op(&a, "noise");
    let mut r = String::new();
    header(
        &mut r,
        &format!(
            "clip-and-noise, {} x {} (f32, exact)",
            grouped(a.rows as u64),
            a.dim
        ),
        format!(
            "recall bench noise --rows {} --dim {} --iters {}",
            a.rows, a.dim, a.iters
        ),
        d,
    );
    let _ = writeln!(
        r,
        "| what | time | achieved (bytes read + written) | note |"
    );
    let _ = writeln!(r, "|---|---|---|---|");
    let _ = writeln!(
        r,
        "| recall: device copy, 1 GiB | | {copy:.0} GB/s | the ceiling |"
    );
    let _ = writeln!(
        r,
        "| recall GPU: `{kernels}` (the default: norms and noise in one pass where dim is a multiple of 4 on sm_80+), data resident | {:.1} us | {gbps:.0} GB/s | {:.0} % of copy |",
        ms * 1e3,
        100.0 * gbps / copy
    );
    let gbps2 = bytes / (two_pass * 1e-3) / 1e9;
    let _ = writeln!(
        r,
        "| recall GPU: `row_norms_f32` + `clip_noise` (two passes), data resident | {:.1} us | {gbps2:.0} GB/s | {:.0} % of copy |",
        two_pass * 1e3,
        100.0 * gbps2 / copy
    );
    let _ = writeln!(
        r,
        "| recall `Engine::clip_and_noise`, rows in host memory, a fresh output each call ({fresh_dev}) | {:.1} us | {:.0} GB/s | upload, op, download; median of {} |",
        fresh_ms * 1e3,
        bytes / (fresh_ms * 1e-3) / 1e9,
        a.iters.clamp(1, 5)
    );
    let _ = writeln!(
        r,
        "| recall `Engine::clip_and_noise_into`, rows in host memory, one output reused ({into_dev}) | {:.1} us | {:.0} GB/s | the same; fresh / into = {:.2}x |",
        into_ms * 1e3,
        bytes / (into_ms * 1e-3) / 1e9,
        fresh_ms / into_ms
    );
    peer_rows(&mut r, Some(&peer), 1, |r, _name, p| {
        if let Some(pm) = p.num("noise_ms") {
            let _ = writeln!(
                r,
                "| {}: `{}` | {:.1} us | {:.0} GB/s | recall / peer = {:.2}x |",
                p.str("peer").unwrap_or_default(),
                p.str("noise_expr").unwrap_or_default(),
                pm * 1e3,
                bytes / (pm * 1e-3) / 1e9,
                ms / pm
            );
        }
    });
    emit(&r, &a.out)?;
    Ok(ExitCode::SUCCESS)
}

/// `recall bench sweep`: see `crate::sweep`.
fn run_sweep(a: BenchArgs) -> Result<ExitCode, String> {
    let ops = match &a.ops {
        None => None,
        Some(names) => Some(
            names
                .iter()
                .map(|n| {
                    crate::sweep::SweepOp::from_name(n).ok_or_else(|| {
                        format!(
                            "--ops: unknown op {n:?} (available: similarity, knn, score_candidates, spread, kmeans, clip_and_noise)"
                        )
                    })
                })
                .collect::<Result<Vec<_>, String>>()?,
        ),
    };
    let command = std::iter::once("recall".to_string())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    crate::sweep::run(crate::sweep::SweepArgs {
        quick: a.quick,
        sizes: a.sizes,
        ops,
        out: a.out.unwrap_or_else(|| "bench-report".into()).into(),
        iters: a.iters,
        peer_script: a.peer_script,
        no_peer: a.no_peer,
        command,
    })
}

/// Why `engine` has no GPU, in words.
fn gpu_reason(engine: &Engine) -> String {
    match engine.gpu_status() {
        GpuStatus::Unavailable(why) => why.clone(),
        GpuStatus::Ready(_) => "the GPU was taken out of use after a failure".into(),
    }
}

/// `recall bench stream`: out-of-core knn (the corpus in host memory, streamed through the GPU in chunks)
/// against the host-to-device bandwidth the bench measures itself, and the answer against in-memory knn.
fn run_stream(a: BenchArgs) -> Result<ExitCode, String> {
    if a.rows == 0 || a.dim == 0 || a.queries == 0 || a.k == 0 || a.k > a.rows || a.chunk_mib == 0 {
        return Err(
            "--rows, --dim, --queries, --chunk-mib must be at least 1 and 1 <= --k <= --rows"
                .into(),
        );
    }
    let engine = Engine::new().map_err(|e| e.to_string())?;
    let (Some(gpu), GpuStatus::Ready(d)) = (engine.gpu_backend(), engine.gpu_status()) else {
        return Err("recall bench stream needs a GPU".into());
    };
    eprintln!(
        "generating {} x {} corpus ({:.1} GB) and {} queries",
        grouped(a.rows as u64),
        a.dim,
        (a.rows * a.dim * 4) as f64 / 1e9,
        a.queries
    );
    let corpus = random_matrix(1, a.rows, a.dim);
    let queries = random_matrix(2, a.queries, a.dim);
    let chunk_rows = ((a.chunk_mib << 20) / (4 * a.dim)).max(1);
    let handle = engine
        .corpus(corpus.clone(), a.dim)
        .map_err(|e| e.to_string())?;
    let f = recall::diagnostics::bench::stream_figures(
        gpu, &queries, &handle, a.k, chunk_rows, a.iters,
    )?;
    drop(handle);
    // The same call in memory (kernel level, corpus resident) for the answer.
    let (_, _, in_memory) =
        recall::diagnostics::bench::knn_ms(gpu, &queries, &corpus, a.dim, a.k, 1)?;
    let streamed = &f.answer;
    let same = streamed.ids == in_memory.ids
        && streamed
            .scores
            .iter()
            .zip(&in_memory.scores)
            .all(|(x, y)| x.to_bits() == y.to_bits());
    let bytes = (a.rows * a.dim * 4) as f64;
    let gbps = |ms: f64| bytes / (ms * 1e-3) / 1e9;
    let h2d = f.h2d_gbps;
    let mut r = String::new();
    header(
        &mut r,
        &format!(
            "out-of-core knn (cosine, top-{}), {} queries x {} rows x {} dims streamed from host memory",
            a.k,
            a.queries,
            grouped(a.rows as u64),
            a.dim
        ),
        format!(
            "recall bench stream --rows {} --dim {} --queries {} --k {} --chunk-mib {} --iters {}",
            a.rows, a.dim, a.queries, a.k, a.chunk_mib, a.iters
        ),
        d,
    );
    let path = if f.registered {
        "registered: chunks DMA'd straight from the page-locked corpus"
    } else {
        "staged: page-locking failed (see the log), chunks copied through pinned staging buffers"
    };
    let _ = writeln!(r, "| what | figure |");
    let _ = writeln!(r, "|---|---|");
    let _ = writeln!(
        r,
        "| host-to-device bandwidth from pinned memory (1 GiB copies, median) | {h2d:.1} GB/s |"
    );
    let _ = writeln!(
        r,
        "| streamed knn through the corpus handle over {:.2} GB in chunks of {} MiB (median of {}; path: {path}) | {:.1} ms, {:.1} GB/s = {:.0} % of the measured bandwidth |",
        bytes / 1e9,
        a.chunk_mib,
        a.iters,
        f.handle_ms,
        gbps(f.handle_ms),
        100.0 * gbps(f.handle_ms) / h2d
    );
    let _ = writeln!(
        r,
        "| the same through the plain slice (staged: host copy into pinned buffers, then DMA; chunks of at most {} MiB) | {:.1} ms, {:.1} GB/s = {:.0} % of the measured bandwidth |",
        a.chunk_mib
            .min(recall::diagnostics::STAGED_CHUNK_BYTES >> 20),
        f.staged_ms,
        gbps(f.staged_ms),
        100.0 * gbps(f.staged_ms) / h2d
    );
    let _ = writeln!(
        r,
        "\nstreamed path: **{}**",
        if f.registered { "registered" } else { "staged" }
    );
    let _ = writeln!(
        r,
        "\nstreamed (both paths) and in-memory top-{} identical (ids and score bits): **{}**",
        a.k,
        if same { "yes" } else { "NO" }
    );
    emit(&r, &a.out)?;
    Ok(if same {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// One load thread's answers: its first query, then the ids and score bits of its queries.
type LoadPart = (usize, Vec<u32>, Vec<u32>);

/// Median of `iters` timed runs of `f` (milliseconds), after one untimed warm-up run.
fn timed_ms<T>(iters: usize, mut f: impl FnMut() -> Result<T, String>) -> Result<(f64, T), String> {
    let mut last = f()?;
    let mut t = Vec::new();
    for _ in 0..iters.max(1) {
        let s = std::time::Instant::now();
        last = f()?;
        t.push(s.elapsed().as_secs_f64() * 1e3);
    }
    Ok((recall::diagnostics::bench::median(t), last))
}

/// `recall bench multi-gpu`: batch knn (`--batch-queries` x `--rows` x `--dim`, cosine, top `--k`) and
/// independent single-query load (`--threads` threads issuing `--single-queries` single queries in all),
/// each through a corpus handle, on every GPU (the corpus sharded over them) against GPU 0 alone, with the
/// answers of both compared bit for bit.
fn run_multi_gpu(a: BenchArgs) -> Result<ExitCode, String> {
    if a.rows == 0
        || a.dim == 0
        || a.batch_queries == 0
        || a.threads == 0
        || a.single_queries == 0
        || a.k == 0
        || a.k > a.rows
    {
        return Err("--rows, --dim, --batch-queries, --threads, --single-queries must be at least 1 and 1 <= --k <= --rows".into());
    }
    let d = recall::BatchConfig::default();
    let batching = recall::BatchConfig {
        max_batch: a.max_batch.unwrap_or(d.max_batch).max(1),
        in_flight: a.batch_in_flight.unwrap_or(d.in_flight).max(1),
        ..d
    };
    let all = Engine::builder()
        .device(recall::DevicePolicy::Gpu)
        .batching(batching)
        .build()
        .map_err(|e| e.to_string())?;
    let gpus = all.gpus();
    if gpus.len() < 2 {
        return Err(format!(
            "recall bench multi-gpu needs at least two GPUs; found {} (RECALL_GPUS chooses them)",
            gpus.len()
        ));
    }
    let one = Engine::builder()
        .device(recall::DevicePolicy::Gpu)
        .gpus(&[gpus[0].ordinal])
        .batching(batching)
        .build()
        .map_err(|e| e.to_string())?;
    eprintln!(
        "generating {} x {} corpus ({:.1} GB), {} batch queries, {} single queries",
        grouped(a.rows as u64),
        a.dim,
        (a.rows * a.dim * 4) as f64 / 1e9,
        a.batch_queries,
        a.single_queries
    );
    let corpus = all
        .corpus(random_matrix(1, a.rows, a.dim), a.dim)
        .map_err(|e| e.to_string())?;
    let batch = random_matrix(2, a.batch_queries, a.dim);
    let singles = random_matrix(3, a.single_queries, a.dim);
    let metric = recall::Metric::Cosine;
    let dim = a.dim;
    let knn = |e: &Engine, q: &[f32]| -> Result<recall::Neighbors, String> {
        let r = e
            .knn_in(q, &corpus, metric, a.k)
            .map_err(|x| x.to_string())?;
        if let Some(why) = &r.fallback {
            return Err(format!("a call fell back to the CPU: {why}"));
        }
        Ok(r)
    };
    // Where a sharded call's time goes: the multi-GPU layer's counters around the batch case.
    let counters = |e: &Engine| {
        e.executor().multi_gpu().map(|m| {
            let busy: Vec<u64> = m.loads().iter().map(|l| l.busy_ns).collect();
            (m.sharded(), busy)
        })
    };
    knn(&all, &batch)?; // the shards' first call uploads them: not part of the split below
    let before = counters(&all);
    let (batch_all_ms, batch_all) = timed_ms(a.iters, || knn(&all, &batch))?;
    let sharded_parts = match (before, counters(&all)) {
        (Some(((c0, t0), b0)), Some(((c1, t1), b1))) if c1 > c0 => {
            let calls = (c1 - c0) as f64;
            let busy: Vec<String> = b1
                .iter()
                .zip(&b0)
                .map(|(x, y)| format!("{:.3}", (x - y) as f64 / calls / 1e6))
                .collect();
            Some(format!(
                "sharded batch call (mean of {}): {:.3} ms from the call to the merged answer; each GPU's shard: {} ms",
                c1 - c0,
                (t1 - t0) as f64 / calls / 1e6,
                busy.join(" / ")
            ))
        }
        _ => None,
    };
    let (batch_one_ms, batch_one) = timed_ms(a.iters, || knn(&one, &batch))?;
    let load = |e: &Engine| -> Result<(f64, Vec<u32>, Vec<u32>), String> {
        let per = a.single_queries.div_ceil(a.threads);
        let start = std::time::Instant::now();
        let parts: Vec<Result<LoadPart, String>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..a.threads)
                .map(|t| {
                    let knn = &knn;
                    let singles = &singles;
                    s.spawn(move || {
                        let (q0, q1) = (
                            (t * per).min(a.single_queries),
                            ((t + 1) * per).min(a.single_queries),
                        );
                        let (mut ids, mut bits) = (Vec::new(), Vec::new());
                        for q in q0..q1 {
                            let r = knn(e, &singles[q * dim..(q + 1) * dim])?;
                            ids.extend(r.ids);
                            bits.extend(r.scores.iter().map(|x| x.to_bits()));
                        }
                        Ok((q0, ids, bits))
                    })
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a load thread panicked".into()))
                })
                .collect()
        });
        let secs = start.elapsed().as_secs_f64();
        let mut parts = parts.into_iter().collect::<Result<Vec<_>, String>>()?;
        parts.sort_by_key(|p| p.0);
        let (ids, bits) = parts
            .into_iter()
            .fold((Vec::new(), Vec::new()), |(mut i, mut b), p| {
                i.extend(p.1);
                b.extend(p.2);
                (i, b)
            });
        Ok((a.single_queries as f64 / secs, ids, bits))
    };
    let runs = a.iters.clamp(1, 5);
    let best = |e: &Engine| -> Result<(f64, Vec<u32>, Vec<u32>), String> {
        let mut qps = Vec::new();
        let mut last = load(e)?; // warm-up
        for _ in 0..runs {
            last = load(e)?;
            qps.push(last.0);
        }
        Ok((recall::diagnostics::bench::median(qps), last.1, last.2))
    };
    let (qps_all, ids_all, bits_all) = best(&all)?;
    let (qps_one, ids_one, bits_one) = best(&one)?;
    let score_bits =
        |n: &recall::Neighbors| n.scores.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let batch_same =
        batch_all.ids == batch_one.ids && score_bits(&batch_all) == score_bits(&batch_one);
    let load_same = ids_all == ids_one && bits_all == bits_one;
    let batch_ratio = batch_one_ms / batch_all_ms;
    let load_ratio = qps_all / qps_one;
    let mut r = String::new();
    header(
        &mut r,
        &format!(
            "multi-GPU knn (cosine, top-{}) over {} x {} rows sharded on {} GPUs, against GPU {} alone",
            a.k,
            grouped(a.rows as u64),
            a.dim,
            gpus.len(),
            gpus[0].ordinal
        ),
        format!(
            "recall bench multi-gpu --rows {} --dim {} --k {} --batch-queries {} --threads {} --single-queries {} --iters {} --max-batch {} --batch-in-flight {}",
            a.rows,
            a.dim,
            a.k,
            a.batch_queries,
            a.threads,
            a.single_queries,
            a.iters,
            batching.max_batch,
            batching.in_flight
        ),
        &gpus[0],
    );
    let _ = writeln!(
        r,
        "- GPUs used: {}\n",
        gpus.iter()
            .map(|g| format!("{} ({}, {} GiB)", g.ordinal, g.name, g.total_memory >> 30))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        r,
        "| case | GPU {} alone | all {} GPUs | ratio (target >= 1.8x) |",
        gpus[0].ordinal,
        gpus.len()
    );
    let _ = writeln!(r, "|---|---|---|---|");
    let _ = writeln!(
        r,
        "| batch knn, {} queries (median of {}) | {:.2} ms | {:.2} ms | **{:.2}x** |",
        a.batch_queries, a.iters, batch_one_ms, batch_all_ms, batch_ratio
    );
    if let Some(parts) = &sharded_parts {
        let _ = writeln!(r, "| {parts} | | | |");
    }
    let _ = writeln!(
        r,
        "| independent single-query load, {} threads, {} queries (median of {} runs) | {:.0} queries/s | {:.0} queries/s | **{:.2}x** |",
        a.threads, a.single_queries, runs, qps_one, qps_all, load_ratio
    );
    let _ = writeln!(
        r,
        "\nanswers identical on all GPUs and on GPU {} alone (ids and score bits): batch **{}**, single queries **{}**",
        gpus[0].ordinal,
        if batch_same { "yes" } else { "NO" },
        if load_same { "yes" } else { "NO" }
    );
    let _ = writeln!(
        r,
        "\n```\n{}```",
        all.executor()
            .prometheus_text()
            .lines()
            .filter(|l| l.starts_with("recall_multi_gpu"))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
    emit(&r, &a.out)?;
    Ok(if batch_same && load_same {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
