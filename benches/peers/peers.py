#!/usr/bin/env python3
"""Peer measurements for recall's bench harness, run in the same session on the same GPU.

Prints one JSON object on stdout. Used by `recall bench`; runnable by hand:
    python3 benches/peers/peers.py cosine --rows 1000000 --dim 768 --queries 1 --k 10 --iters 20
    python3 benches/peers/peers.py candidates --data-dir /tmp/recall-bench-candidates --k 10 --iters 20
"""
import argparse
import json
import sys


def timed(torch, fn, iters):
    """Median milliseconds of fn() over iters runs, measured with CUDA events after warm-up."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("op", choices=["cosine", "copy", "spread", "kmeans", "noise", "candidates"])
    ap.add_argument("--data-dir", default="")
    ap.add_argument("--graph-dir", default="")
    ap.add_argument("--hops", type=int, default=3)
    ap.add_argument("--decay", type=float, default=0.5)
    ap.add_argument("--threshold", type=float, default=0.01)
    ap.add_argument("--clusters", type=int, default=1024)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--queries", type=int, default=1)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--copy-bytes", type=int, default=1 << 30)
    a = ap.parse_args()
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"available": False, "reason": f"torch not importable: {e}"}))
        return 0
    if not torch.cuda.is_available():
        print(json.dumps({"available": False, "reason": "torch sees no CUDA device"}))
        return 0
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device("cuda")
    out = {"available": True, "peer": f"torch {torch.__version__}", "device": torch.cuda.get_device_name(0)}
    n = a.copy_bytes // 4
    src = torch.empty(n, dtype=torch.float32, device=dev).uniform_()
    dst = torch.empty_like(src)
    ms = timed(torch, lambda: dst.copy_(src), a.iters)
    out["copy_ms"] = ms
    out["copy_gbps"] = 2 * a.copy_bytes / (ms * 1e-3) / 1e9
    del src, dst
    if a.op == "cosine":
        g = torch.Generator(device=dev).manual_seed(1)
        corpus = torch.rand((a.rows, a.dim), device=dev, generator=g) * 2 - 1
        q = torch.rand((a.queries, a.dim), device=dev, generator=g) * 2 - 1
        nf = torch.nn.functional
        out["similarity_ms"] = timed(torch, lambda: nf.normalize(q) @ corpus.T, a.iters)
        out["similarity_expr"] = "normalize(q) @ corpus.T (fp32, TF32 off)"
        out["topk_ms"] = timed(torch, lambda: torch.topk(nf.normalize(q) @ corpus.T, a.k), a.iters)
        out["topk_expr"] = f"torch.topk(normalize(q) @ corpus.T, {a.k})"
        if a.queries > 8:
            # The fast-mode peers: fp16 operands (corpus converted once, outside the timing), and TF32.
            c16, q16 = corpus.half(), q.half()
            out["topk_fp16_ms"] = timed(torch, lambda: torch.topk(nf.normalize(q16) @ c16.T, a.k), a.iters)
            out["topk_fp16_expr"] = f"torch.topk(normalize(q16) @ corpus16.T, {a.k}) (fp16)"
            del c16, q16
            torch.backends.cuda.matmul.allow_tf32 = True
            out["topk_tf32_ms"] = timed(torch, lambda: torch.topk(nf.normalize(q) @ corpus.T, a.k), a.iters)
            out["topk_tf32_expr"] = f"torch.topk(normalize(q) @ corpus.T, {a.k}) (TF32 on)"
            torch.backends.cuda.matmul.allow_tf32 = False
    if a.op == "spread":
        try:
            import cupy as cp
            import cupyx.scipy.sparse as cps
            import numpy as np
        except Exception as e:  # noqa: BLE001
            print(json.dumps({"available": False, "reason": f"cupy not importable: {e}"}))
            return 0
        ptr = np.load(f"{a.graph_dir}/in_ptr.npy").astype(np.int64)
        src = np.load(f"{a.graph_dir}/in_src.npy").astype(np.int32)
        w = np.load(f"{a.graph_dir}/in_w.npy")
        seeds = np.load(f"{a.graph_dir}/seeds.npy")
        n = ptr.shape[0] - 1
        # Rows are targets, columns sources: y = M @ x is the pulled sum of every target (the same graph
        # recall uses, in its pull order).
        m = cps.csr_matrix((cp.asarray(w), cp.asarray(src), cp.asarray(ptr)), shape=(n, n))
        x0 = cp.asarray(seeds)
        out["peer"] = f"cupy {cp.__version__} (cuSPARSE)"
        start, end = cp.cuda.Event(), cp.cuda.Event()

        def cp_timed(fn, iters):
            for _ in range(3):
                fn()
            cp.cuda.Device().synchronize()
            ts = []
            for _ in range(iters):
                start.record()
                fn()
                end.record()
                end.synchronize()
                ts.append(cp.cuda.get_elapsed_time(start, end))
            ts.sort()
            return ts[len(ts) // 2]

        out["hop_ms"] = cp_timed(lambda: m @ x0, a.iters)
        out["hop_expr"] = "csr_matrix @ x (one SpMV)"

        def hops():
            prev = x0
            total = x0.copy()
            for _ in range(a.hops):
                x = (m @ prev) * a.decay
                x[x < a.threshold] = 0
                total += x
                prev = x
            idx = cp.argpartition(-total, a.k)[: a.k]
            top = idx[cp.argsort(-total[idx])]
            return top, cp.asnumpy(total)

        out["spread_ms"] = cp_timed(hops, a.iters)
        out["spread_expr"] = f"{a.hops} x (SpMV, *decay, threshold, +=) + argpartition top-{a.k} + download"
        out["edges"] = int(src.shape[0])
    if a.op == "candidates":
        # recall bench candidates wrote the data: corpus (n x d f32), queries (q x d f32), ids (q x m u32).
        import numpy as np

        nf = torch.nn.functional
        corpus = torch.from_numpy(np.load(f"{a.data_dir}/corpus.npy")).to(dev)
        q_host = torch.from_numpy(np.load(f"{a.data_dir}/queries.npy"))
        ids_host = torch.from_numpy(np.load(f"{a.data_dir}/ids.npy").astype(np.int64))
        q, ids = q_host.to(dev), ids_host.to(dev)
        # The corpus norms once, outside the timing (recall's handle keeps its norms resident too).
        norms = corpus.norm(dim=1)

        def rescore(q, ids):
            rows = corpus[ids]  # (q, m, d): the gather
            s = torch.einsum("qd,qmd->qm", nf.normalize(q, dim=1), rows) / norms[ids]
            top = torch.topk(s, a.k, dim=1)
            return ids.gather(1, top.indices), top.values

        out["cand_ms"] = timed(torch, lambda: rescore(q, ids), a.iters)
        out["cand_expr"] = f"topk(einsum('qd,qmd->qm', normalize(q), C[ids]) / norms[ids], {a.k})"
        # The same with queries and ids coming from host memory each call (as recall's user path does).
        out["cand_host_ms"] = timed(torch, lambda: rescore(q_host.to(dev), ids_host.to(dev)), a.iters)
        top_ids, _ = rescore(q, ids)
        np.save(f"{a.data_dir}/peer_ids.npy", top_ids.cpu().numpy().reshape(-1))
        out["cand_gathered_gb"] = ids.numel() * corpus.shape[1] * 4 / 1e9
    if a.op == "noise":
        g = torch.Generator(device=dev).manual_seed(5)
        x = torch.rand((a.rows, a.dim), device=dev, generator=g) * 2 - 1
        clip, sigma = 1.0, 0.1

        def noise():
            scale = (clip / x.norm(dim=1, keepdim=True)).clamp(max=1.0)
            return x * scale + sigma * torch.randn_like(x)

        out["noise_ms"] = timed(torch, noise, a.iters)
        out["noise_expr"] = "x * clamp(clip / x.norm(dim=1), max=1) + sigma * randn_like(x)"
    if a.op == "kmeans":
        g = torch.Generator(device=dev).manual_seed(3)
        x = torch.rand((a.rows, a.dim), device=dev, generator=g) * 2 - 1
        c = x[torch.randperm(a.rows, device=dev, generator=g)[: a.clusters]].clone()

        def iteration():
            d = (x * x).sum(1, keepdim=True) - 2 * (x @ c.T) + (c * c).sum(1)
            assign = d.argmin(1)
            sums = torch.zeros_like(c).index_add_(0, assign, x)
            counts = torch.bincount(assign, minlength=a.clusters).clamp(min=1).to(x.dtype)
            return sums / counts[:, None]

        out["kmeans_ms"] = timed(torch, iteration, a.iters)
        out["kmeans_expr"] = "matmul distances (fp32, TF32 off) + argmin + index_add_ + bincount"
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
