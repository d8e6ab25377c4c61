#!/usr/bin/env python3
"""Write the seed corpora of recall's fuzz targets into fuzz/corpus/<target>/ (standard library only).

The files are what NumPy's np.save, SciPy's save_npz and the .fvecs convention produce, written byte for byte
here so that no NumPy is needed: the fuzzer mutates from well-formed files of every kind the readers take.
The csr and candidates targets take structured input (arbitrary); a few random byte strings start them.
"""
import os
import random
import struct
import sys
import zipfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def npy(descr, shape, payload, version=1, fortran=False):
    shape_txt = "()" if not shape else "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    d = "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (descr, "True" if fortran else "False", shape_txt)
    len_size = 2 if version == 1 else 4
    hlen = len(d) + 1
    pad = (64 - (6 + 2 + len_size + hlen) % 64) % 64
    header = d + " " * pad + "\n"
    enc = "latin1" if version < 3 else "utf8"
    out = b"\x93NUMPY" + bytes([version, 0])
    out += struct.pack("<H" if version == 1 else "<I", len(header))
    return out + header.encode(enc) + payload


def pack(fmt, values):
    return b"".join(struct.pack("<" + fmt, v) for v in values)


def npy_seeds():
    f = [1.0, -2.5, 0.0, 3.25, 1e-30, 7.0]
    return {
        "f4_2x3": npy("<f4", [2, 3], pack("f", f)),
        "f4_vec": npy("<f4", [4], pack("f", f[:4])),
        "f8_vec": npy("<f8", [3], pack("d", f[:3])),
        "i4_vec": npy("<i4", [3], pack("i", [0, 5, -1])),
        "i8_vec": npy("<i8", [2], pack("q", [1, 2])),
        "u4_vec": npy("<u4", [3], pack("I", [0, 1, 2])),
        "u8_vec": npy("<u8", [2], pack("Q", [3, 4])),
        "f4_v2": npy("<f4", [1, 2], pack("f", f[:2]), version=2),
        "f4_v3": npy("<f4", [2, 1], pack("f", f[:2]), version=3),
        "f4_empty": npy("<f4", [0, 4], b""),
        "f4_scalar": npy("<f4", [], pack("f", [1.5])),
        "s3": npy("|S3", [], b"csr"),
        "u3": npy("<U3", [], "csr".encode("utf-32-le")),
        "fortran": npy("<f4", [2, 2], pack("f", f[:4]), fortran=True),
        "big_endian": npy(">f4", [2], struct.pack(">2f", 1.0, 2.0)),
    }


def fvecs(rows):
    return b"".join(struct.pack("<i", len(r)) + pack("f", r) for r in rows)


def fvecs_seeds():
    return {
        "one": fvecs([[1.0]]),
        "three_by_four": fvecs([[1.0, -2.0, 0.5, 8.0]] * 3),
        "ragged": fvecs([[1.0, 2.0], [3.0]]),
    }


def npz(members, method):
    import io

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as z:
        for name, data in members:
            z.writestr(name, data)
    return buf.getvalue()


def csr_members(indptr, indices, data, n, idx="<i4", dat="<f4", fmt=True):
    ifmt = {"<i4": "i", "<i8": "q"}[idx]
    dfmt = {"<f4": "f", "<f8": "d"}[dat]
    m = [
        ("indices.npy", npy(idx, [len(indices)], pack(ifmt, indices))),
        ("indptr.npy", npy(idx, [len(indptr)], pack(ifmt, indptr))),
        ("data.npy", npy(dat, [len(data)], pack(dfmt, data))),
        ("shape.npy", npy("<i8", [2], pack("q", [n, n]))),
    ]
    if fmt:
        m.insert(0, ("format.npy", npy("|S3", [], b"csr")))
    return m


def npz_seeds():
    g = ([0, 2, 3, 3], [1, 2, 0], [0.5, 1.0, 0.25], 3)
    return {
        "stored": npz(csr_members(*g), zipfile.ZIP_STORED),
        "deflated": npz(csr_members(*g), zipfile.ZIP_DEFLATED),
        "i8_f8": npz(csr_members(*g, idx="<i8", dat="<f8"), zipfile.ZIP_DEFLATED),
        "no_format": npz(csr_members(*g, fmt=False), zipfile.ZIP_STORED),
        "one_node": npz(csr_members([0, 1], [0], [1.0], 1), zipfile.ZIP_STORED),
    }


def random_seeds(seed):
    r = random.Random(seed)
    return {"random%d" % i: bytes(r.randrange(256) for _ in range(r.randrange(8, 200))) for i in range(6)}


def main():
    sets = {
        "npy": npy_seeds(),
        "fvecs": fvecs_seeds(),
        "npz": npz_seeds(),
        "csr": random_seeds(1),
        "candidates": random_seeds(2),
    }
    wanted = sys.argv[1:] or list(sets)
    for target in wanted:
        d = os.path.join(ROOT, target)
        os.makedirs(d, exist_ok=True)
        for name, data in sets[target].items():
            with open(os.path.join(d, "seed_" + name), "wb") as fh:
                fh.write(data)
        print("%s: %d seeds in %s" % (target, len(sets[target]), d))


if __name__ == "__main__":
    main()
