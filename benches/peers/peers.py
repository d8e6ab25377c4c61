#!/usr/bin/env python3
"""Peer measurements for recall's bench harness, run in the same session on the same GPU.

Prints one JSON object on stdout. Used by `recall bench`; runnable by hand:
    python3 benches/peers/peers.py cosine --rows 1000000 --dim 768 --queries 1 --k 10 --iters 20
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
    ap.add_argument("op", choices=["cosine", "copy"])
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
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
