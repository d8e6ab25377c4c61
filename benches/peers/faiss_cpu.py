#!/usr/bin/env python3
"""FAISS on the CPU, the peer of the CPU bench's knn and k-means rows (benches/benches/cpu.rs), same shapes.

Prints one JSON object on stdout: the median milliseconds of each case over --iters runs, after warm-up.
Needs `faiss-cpu` (pip); prints {"available": false, ...} without it. By hand:
    python3 benches/peers/faiss_cpu.py --iters 20

Cases (all cores, FAISS's OpenMP default):
- `cosine_top10_q{1,64}`: IndexFlatIP over the corpus normalised once (not timed); each timed call
  normalises its queries and searches top-10, as a cosine search through FAISS runs.
- `..._blas`: the same with `distance_compute_blas_threshold = 20`. With FAISS 1.15's default (128,000) 64
  queries of 768 dims ran about 15x slower than with 20 or 1,000 on the development VM: off BLAS, one pair at a
  time (inferred from the timings, not from FAISS's source). This knob sends them to BLAS (sgemm), as older
  releases did from 20 queries on.
- `kmeans_assign`: the assignment step of a k-means iteration, 100,000 x 128 points against 1,024
  centroids (IndexFlatL2 search, k = 1: BLAS and an argmin).
- `kmeans_1_iteration`: faiss.Kmeans(niter=1) training on the same points (its own sampling and seeding, one
  assignment, one update).
"""
import argparse
import json
import time


def median_ms(fn, iters):
    for _ in range(2):
        fn()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return times[len(times) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--kmeans-dim", type=int, default=128)
    ap.add_argument("--clusters", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    try:
        import faiss
        import numpy as np
    except Exception as e:  # noqa: BLE001
        print(json.dumps({"available": False, "reason": f"faiss not importable: {e}"}))
        return 0
    rng = np.random.default_rng(1)
    out = {
        "available": True,
        "peer": f"faiss-cpu {faiss.__version__}",
        "threads": faiss.omp_get_max_threads(),
        "default_blas_threshold": faiss.cvar.distance_compute_blas_threshold,
        "ms": {},
    }
    corpus = rng.standard_normal((a.rows, a.dim), dtype=np.float32)
    faiss.normalize_L2(corpus)
    index = faiss.IndexFlatIP(a.dim)
    index.add(corpus)
    default_threshold = faiss.cvar.distance_compute_blas_threshold
    for nq in (1, 64):
        queries = rng.standard_normal((nq, a.dim), dtype=np.float32)

        def search():
            q = queries.copy()
            faiss.normalize_L2(q)
            index.search(q, 10)

        faiss.cvar.distance_compute_blas_threshold = default_threshold
        out["ms"][f"cosine_top10_q{nq}"] = median_ms(search, a.iters)
        faiss.cvar.distance_compute_blas_threshold = 20
        out["ms"][f"cosine_top10_q{nq}_blas"] = median_ms(search, a.iters)
    faiss.cvar.distance_compute_blas_threshold = default_threshold
    del index, corpus

    points = rng.standard_normal((a.rows, a.kmeans_dim), dtype=np.float32)
    centroids = points[rng.choice(a.rows, a.clusters, replace=False)].copy()
    flat = faiss.IndexFlatL2(a.kmeans_dim)
    flat.add(centroids)
    out["ms"]["kmeans_assign"] = median_ms(lambda: flat.search(points, 1), a.iters)

    def train():
        km = faiss.Kmeans(a.kmeans_dim, a.clusters, niter=1, seed=42, max_points_per_centroid=1 << 30)
        km.train(points)

    out["ms"]["kmeans_1_iteration"] = median_ms(train, max(3, a.iters // 4))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
