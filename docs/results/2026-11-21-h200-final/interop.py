"""NumPy/SciPy interop check for recall's file commands (run on a machine with numpy; scipy optional)."""
import os
import subprocess
import sys

import numpy as np

B = sys.argv[1]
d = sys.argv[2]
os.makedirs(d, exist_ok=True)
rng = np.random.default_rng(7)
corpus = rng.standard_normal((5000, 64)).astype(np.float32)
queries = corpus[:16] + 0.001 * rng.standard_normal((16, 64)).astype(np.float32)
np.save(f"{d}/corpus.npy", corpus)
np.save(f"{d}/queries.npy", queries)
ok = True


def run(*args):
    r = subprocess.run([B, *args], capture_output=True, text=True)
    print("$ recall", " ".join(args), "->", r.returncode, (r.stdout + r.stderr).strip().splitlines()[-1:] if (r.stdout + r.stderr).strip() else "")
    return r.returncode


run("knn", "--corpus", f"{d}/corpus.npy", "--queries", f"{d}/queries.npy", "-k", "5", "--metric", "cosine", "--out", f"{d}/knn")
ids = np.load(f"{d}/knn/ids.npy")
scores = np.load(f"{d}/knn/scores.npy")
print("knn ids", ids.dtype, ids.shape, "scores", scores.dtype, scores.shape)
ok &= ids.shape == (16, 5) and scores.shape == (16, 5) and ids.dtype == np.uint32 and scores.dtype == np.float32
ok &= bool((ids[:, 0] == np.arange(16)).all())
cn = corpus / np.linalg.norm(corpus, axis=1, keepdims=True)
qn = queries / np.linalg.norm(queries, axis=1, keepdims=True)
ref = np.argsort(-(qn.astype(np.float64) @ cn.T.astype(np.float64)), axis=1)[:, :5]
agree = (ref == ids).mean()
print(f"top-5 ids equal to a float64 NumPy reference: {agree:.3f}")
ok &= agree > 0.95

run("kmeans", "--data", f"{d}/corpus.npy", "-k", "8", "--iters", "3", "--out", f"{d}/km")
c = np.load(f"{d}/km/centroids.npy")
a = np.load(f"{d}/km/assignments.npy")
inertia = np.load(f"{d}/km/inertia.npy")
print("kmeans", c.shape, c.dtype, a.shape, a.dtype, inertia.shape, inertia.dtype)
ok &= c.shape == (8, 64) and a.shape == (5000,) and int(a.max()) < 8 and inertia.shape == (3,)

try:
    import scipy.sparse as sp

    n = 1000
    rows = rng.integers(0, n, 8000)
    cols = rng.integers(0, n, 8000)
    w = rng.random(8000).astype(np.float32)
    g = sp.csr_matrix((w, (rows, cols)), shape=(n, n))
    sp.save_npz(f"{d}/g.npz", g)
    seeds = np.zeros(n, dtype=np.float32)
    seeds[:5] = 1.0
    np.save(f"{d}/seeds.npy", seeds)
    run("spread", "--graph", f"{d}/g.npz", "--seeds", f"{d}/seeds.npy", "--decay", "0.5", "--threshold", "0.0", "--hops", "2", "-k", "10", "--out", f"{d}/sp")
    act = np.load(f"{d}/sp/activation.npy")
    # float64 reference of the same recurrence (pull over the transpose), loose tolerance
    gt = g.T.tocsr().astype(np.float64)
    prev = seeds.astype(np.float64)
    total = prev.copy()
    for _ in range(2):
        prev = 0.5 * (gt @ prev)
        total += prev
    err = np.abs(act - total).max()
    print("spread activation", act.shape, act.dtype, f"max |recall - float64 scipy| = {err:.2e}")
    ok &= act.shape == (n,) and err < 1e-4
except ImportError as e:
    print("scipy not available, spread interop skipped:", e)

print("INTEROP", "PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
