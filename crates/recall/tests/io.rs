//! `recall::io`: round trips, NumPy's exact bytes, explicit bad files, and hostile-input property tests.
#![allow(clippy::unwrap_used)] // a test crate: helpers panic on failure like the tests do

use std::io::{Cursor, Write};

use proptest::prelude::*;
use recall::io::{self, Dtype, IoError, NpyData};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

// ---------------------------------------------------------------------------------------------------
// Builders

/// A `.npy` with a hand-written header (version `v`), padded like NumPy.
fn npy_raw(version: u8, dict: &str, data: &[u8]) -> Vec<u8> {
    let len_field = if version == 1 { 2 } else { 4 };
    let unpadded = 6 + 2 + len_field + dict.len() + 1;
    let pad = unpadded.next_multiple_of(64) - unpadded;
    let header = format!("{dict}{}\n", " ".repeat(pad));
    let mut out = b"\x93NUMPY".to_vec();
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(header.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn dict(descr: &str, shape: &str) -> String {
    format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}")
}

fn le<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

fn zip_of(members: &[(&str, Vec<u8>)], method: CompressionMethod) -> Vec<u8> {
    let mut w = ZipWriter::new(Cursor::new(Vec::new()));
    for (name, bytes) in members {
        w.start_file(
            *name,
            SimpleFileOptions::default().compression_method(method),
        )
        .unwrap();
        w.write_all(bytes).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// SciPy's `save_npz` layout for a CSR matrix: int32 indices, `format` as `|S3`, `shape` as int64.
fn csr_npz(
    indptr: &[i32],
    indices: &[i32],
    data: &[f64],
    n: i64,
    method: CompressionMethod,
) -> Vec<u8> {
    let members = vec![
        (
            "indices.npy",
            npy_raw(
                1,
                &dict("<i4", &format!("({},)", indices.len())),
                &le(indices, i32::to_le_bytes),
            ),
        ),
        (
            "indptr.npy",
            npy_raw(
                1,
                &dict("<i4", &format!("({},)", indptr.len())),
                &le(indptr, i32::to_le_bytes),
            ),
        ),
        ("format.npy", npy_raw(1, &dict("|S3", "()"), b"csr")),
        (
            "shape.npy",
            npy_raw(1, &dict("<i8", "(2,)"), &le(&[n, n], i64::to_le_bytes)),
        ),
        (
            "data.npy",
            npy_raw(
                1,
                &dict("<f8", &format!("({},)", data.len())),
                &le(data, f64::to_le_bytes),
            ),
        ),
    ];
    zip_of(&members, method)
}

fn small_graph(method: CompressionMethod) -> Vec<u8> {
    // 0 -> 1 (0.5), 0 -> 2 (1.0), 1 -> 2 (2.0), 2 -> 0 (0.25)
    csr_npz(
        &[0, 2, 3, 4],
        &[1, 2, 2, 0],
        &[0.5, 1.0, 2.0, 0.25],
        3,
        method,
    )
}

// ---------------------------------------------------------------------------------------------------
// NumPy's exact bytes

/// `np.save(f, np.zeros((2, 3), '<f4'))`: a 128-byte header (NumPy 1.x and 2.x agree on this one).
#[test]
fn header_bytes_match_numpy_for_a_2d_f32() {
    let bytes = io::npy_to_bytes(&[0f32; 6], &[2, 3]).unwrap();
    let mut expected = b"\x93NUMPY\x01\x00\x76\x00".to_vec();
    let d = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    expected.extend_from_slice(d.as_bytes());
    expected.extend(std::iter::repeat_n(b' ', 128 - 10 - d.len() - 1));
    expected.push(b'\n');
    assert_eq!(&bytes[..128], &expected[..]);
    assert_eq!(bytes.len(), 128 + 24);
}

#[test]
fn header_bytes_match_numpy_for_1d_u32_and_f64() {
    for (bytes, d) in [
        (
            io::npy_to_bytes(&[1u32, 2, 3, 4, 5], &[5]).unwrap(),
            "{'descr': '<u4', 'fortran_order': False, 'shape': (5,), }",
        ),
        (
            io::npy_to_bytes(&[1.5f64], &[1]).unwrap(),
            "{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }",
        ),
    ] {
        assert_eq!(&bytes[..10], b"\x93NUMPY\x01\x00\x76\x00");
        assert_eq!(&bytes[10..10 + d.len()], d.as_bytes());
        assert!(bytes[10 + d.len()..127].iter().all(|&b| b == b' '));
        assert_eq!(bytes[127], b'\n');
    }
}

/// NumPy pads to a full extra 64 bytes when the header would end exactly on a boundary, and leaves
/// room for 21 digits on the first axis; a long first dimension moves the boundary.
#[test]
fn header_is_always_aligned_and_ends_in_newline() {
    for shape in [
        vec![0usize],
        vec![7],
        vec![123_456_789, 0],
        vec![3, 4, 5],
        vec![],
    ] {
        let n: usize = shape.iter().product();
        let bytes = io::npy_to_bytes(&vec![0f32; n], &shape).unwrap();
        let hlen = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + hlen) % 64, 0, "{shape:?}");
        assert_eq!(bytes[10 + hlen - 1], b'\n');
        assert_eq!(bytes.len(), 10 + hlen + 4 * n);
        let back = io::npy_from_bytes(&bytes).unwrap();
        assert_eq!(
            back.shape,
            shape.iter().map(|&d| d as u64).collect::<Vec<_>>()
        );
    }
}

#[test]
fn shape_mismatch_on_write_is_an_error() {
    assert!(matches!(
        io::npy_to_bytes(&[1f32, 2.0, 3.0], &[2, 2]),
        Err(IoError::BadWrite { .. })
    ));
}

#[test]
fn a_csr_write_for_usize_max_nodes_is_an_error() {
    // `n_nodes + 1` overflowed: a panic where overflow is checked (tests, debug builds).
    assert!(matches!(
        io::npz_csr_to_bytes(&[], &[], &[], usize::MAX),
        Err(IoError::BadWrite { .. })
    ));
}

/// When python3 with NumPy is installed, NumPy itself reads what we wrote.
#[test]
fn numpy_reads_our_files_when_installed() {
    let has_numpy = std::process::Command::new("python3")
        .args(["-c", "import numpy"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !has_numpy {
        let _ = writeln!(
            std::io::stderr(),
            "skipping numpy_reads_our_files_when_installed: python3 with numpy is not available"
        );
        return;
    }
    let dir = std::env::temp_dir().join(format!("recall-io-numpy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    io::write_npy(dir.join("m.npy"), &[1f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    io::write_npy(dir.join("u.npy"), &[7u32, 8, 9], &[3]).unwrap();
    io::write_npy(dir.join("v.npy"), &[0.25f32], &[1]).unwrap();
    let script = "import numpy as np, sys; d = sys.argv[1]\n\
        m = np.load(d + '/m.npy'); assert m.dtype == np.float32 and m.shape == (2, 3) and m[1, 2] == 6\n\
        u = np.load(d + '/u.npy'); assert u.dtype == np.uint32 and list(u) == [7, 8, 9]\n\
        v = np.load(d + '/v.npy'); assert v.dtype == np.float32 and v[0] == 0.25\n\
        import io\n\
        for name, a in [('m', m), ('u', u), ('v', v)]:\n\
        \x20   b = io.BytesIO(); np.save(b, a); assert b.getvalue() == open(d + '/' + name + '.npy', 'rb').read(), name\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script, dir.to_str().unwrap()])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------------------
// Round trips

#[test]
fn round_trip_f32_matrix_via_file() {
    let dir = std::env::temp_dir().join(format!("recall-io-rt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 2.0).collect();
    let p = dir.join("m.npy");
    io::write_npy(&p, &data, &[4, 3]).unwrap();
    let m = io::read_npy_matrix(&p).unwrap();
    let m2 = io::read_matrix(&p).unwrap();
    assert_eq!((m.n_rows, m.dim, &m.data), (4, 3, &data));
    assert_eq!(m, m2);
    io::write_npy(dir.join("v.npy"), &data, &[12]).unwrap();
    assert_eq!(io::read_npy_vector(dir.join("v.npy")).unwrap(), data);
    io::write_npy(dir.join("u.npy"), &[3u32, 0, u32::MAX], &[3]).unwrap();
    assert_eq!(
        io::read_npy_indices(dir.join("u.npy")).unwrap(),
        vec![3, 0, u64::from(u32::MAX)]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn round_trip_every_written_type_in_memory() {
    let b = io::npy_to_bytes(&[1u32, 2, 3, 4, 5, 6], &[2, 3]).unwrap();
    let a = io::npy_from_bytes(&b).unwrap();
    assert_eq!((a.dtype, a.version), (Dtype::U32, (1, 0)));
    assert_eq!(a.data, NpyData::U32(vec![1, 2, 3, 4, 5, 6]));
    let b = io::npy_to_bytes(&[f32::MIN, -0.0, f32::INFINITY], &[3]).unwrap();
    let v = io::npy_from_bytes(&b).unwrap().into_f32_vector().unwrap();
    assert_eq!(v[0], f32::MIN);
    assert!(v[1].is_sign_negative() && v[2].is_infinite());
    let b = io::npy_to_bytes(&[1.25f64, 2.5], &[2]).unwrap();
    assert_eq!(
        io::npy_from_bytes(&b).unwrap().data,
        NpyData::F64(vec![1.25, 2.5])
    );
    for v in [vec![], vec![0u64, u64::MAX]] {
        let b = io::npy_to_bytes(&v, &[v.len()]).unwrap();
        assert_eq!(io::npy_from_bytes(&b).unwrap().into_indices().unwrap(), v);
    }
    let b = io::npy_to_bytes(&[-1i64, 2], &[2]).unwrap();
    assert!(matches!(
        io::npy_from_bytes(&b).unwrap().into_indices(),
        Err(IoError::BadValue { index: 0, .. })
    ));
    let b = io::npy_to_bytes(&[7i32, 9], &[2]).unwrap();
    assert_eq!(
        io::npy_from_bytes(&b).unwrap().into_u32_indices().unwrap(),
        vec![7, 9]
    );
    // From a reader (unknown length) too.
    let b = io::npy_to_bytes(&[1f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
    let m = io::npy_from_reader(&b[..])
        .unwrap()
        .into_f32_matrix()
        .unwrap();
    assert_eq!(m.data, vec![1.0, 2.0, 3.0, 4.0]);
}

#[test]
fn versions_2_and_3_and_python2_longs_are_read() {
    let data = le(&[1f32, 2.0], f32::to_le_bytes);
    for v in [2u8, 3] {
        let a = io::npy_from_bytes(&npy_raw(v, &dict("<f4", "(1, 2)"), &data)).unwrap();
        assert_eq!(a.version, (v, 0));
        assert_eq!(a.into_f32_matrix().unwrap().data, vec![1.0, 2.0]);
    }
    let a = io::npy_from_bytes(&npy_raw(1, &dict("<f4", "(1L, 2L)"), &data)).unwrap();
    assert_eq!(a.shape, vec![1, 2]);
    // Key order and quotes as other writers produce them.
    let d = "{\"shape\": (2,), \"fortran_order\": False, \"descr\": \"<f4\"}";
    assert_eq!(
        io::npy_from_bytes(&npy_raw(1, d, &data))
            .unwrap()
            .into_f32_vector()
            .unwrap(),
        vec![1.0, 2.0]
    );
}

#[test]
fn fvecs_round_trip_and_reader() {
    let mut b = Vec::new();
    for row in [[1f32, 2.0, 3.0], [4.0, 5.0, 6.0]] {
        b.extend_from_slice(&3i32.to_le_bytes());
        b.extend(row.iter().flat_map(|x| x.to_le_bytes()));
    }
    let m = io::fvecs_from_bytes(&b).unwrap();
    assert_eq!((m.n_rows, m.dim), (2, 3));
    assert_eq!(m.data, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    assert_eq!(io::fvecs_from_reader(&b[..]).unwrap(), m);
}

#[test]
fn npz_csr_stored_and_deflated() {
    for method in [CompressionMethod::Stored, CompressionMethod::Deflated] {
        let g = io::npz_csr_from_bytes(&small_graph(method)).unwrap();
        assert_eq!(g.n_nodes, 3);
        assert_eq!(g.indptr, vec![0, 2, 3, 4]);
        assert_eq!(g.indices, vec![1, 2, 2, 0]);
        assert_eq!(g.weights, vec![0.5, 1.0, 2.0, 0.25]);
        g.to_spread_graph().unwrap();
    }
    // int64 indices, float32 data, unicode format string, no compression.
    let members = vec![
        (
            "indptr.npy",
            npy_raw(
                1,
                &dict("<i8", "(3,)"),
                &le(&[0i64, 1, 1], i64::to_le_bytes),
            ),
        ),
        (
            "indices.npy",
            npy_raw(1, &dict("<i8", "(1,)"), &le(&[1i64], i64::to_le_bytes)),
        ),
        (
            "data.npy",
            npy_raw(1, &dict("<f4", "(1,)"), &le(&[3f32], f32::to_le_bytes)),
        ),
        (
            "shape.npy",
            npy_raw(1, &dict("<i4", "(2,)"), &le(&[2i32, 2], i32::to_le_bytes)),
        ),
        (
            "format.npy",
            npy_raw(
                1,
                &dict("<U3", "()"),
                &le(&[99u32, 115, 114], u32::to_le_bytes),
            ),
        ),
    ];
    let g = io::npz_csr_from_bytes(&zip_of(&members, CompressionMethod::Stored)).unwrap();
    assert_eq!((g.n_nodes, g.weights.clone()), (2, vec![3.0]));
}

// ---------------------------------------------------------------------------------------------------
// Explicit bad files

fn good_npy() -> Vec<u8> {
    io::npy_to_bytes(&[1f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap()
}

#[test]
fn bad_npy_files_are_typed_errors() {
    let good = good_npy();
    let e = |b: &[u8]| io::npy_matrix_from_bytes(b).unwrap_err();
    assert!(
        matches!(e(&good[..50]), IoError::Truncated { .. }),
        "truncated header"
    );
    assert!(matches!(
        e(&good[..5]),
        IoError::Truncated { .. } | IoError::BadMagic { .. }
    ));
    assert!(matches!(e(&[]), IoError::Truncated { .. }));
    assert!(
        matches!(e(&good[..good.len() - 1]), IoError::LengthMismatch { .. }),
        "truncated data"
    );
    let mut extra = good.clone();
    extra.push(0);
    assert!(matches!(e(&extra), IoError::LengthMismatch { .. }));
    let mut magic = good.clone();
    magic[1] = b'X';
    assert!(matches!(e(&magic), IoError::BadMagic { .. }));
    let mut ver = good.clone();
    ver[6] = 4;
    assert!(matches!(
        e(&ver),
        IoError::UnsupportedVersion { major: 4, .. }
    ));
    // A header claiming 10^12 elements with a tiny file: an error before any allocation.
    let huge = npy_raw(1, &dict("<f4", "(1000000, 1000000)"), &[0; 16]);
    assert!(matches!(
        e(&huge),
        IoError::LengthMismatch {
            needed: 4_000_000_000_000,
            ..
        }
    ));
    let overflow = npy_raw(1, &dict("<f4", "(18446744073709551615, 3)"), &[]);
    assert!(matches!(e(&overflow), IoError::ShapeOverflow { .. }));
    let too_big = npy_raw(1, &dict("<f4", "(99999999999999999999999, 3)"), &[]);
    assert!(matches!(e(&too_big), IoError::BadHeader { .. }));
    let data = le(&[1f32, 2.0], f32::to_le_bytes);
    assert!(matches!(
        e(&npy_raw(1, &dict("<f8", "(1, 1)"), &data)),
        IoError::WrongDtype { .. }
    ));
    assert!(matches!(
        e(&npy_raw(1, &dict("<c8", "(1, 1)"), &data)),
        IoError::UnsupportedDtype { .. }
    ));
    assert!(matches!(
        e(&npy_raw(1, &dict(">f4", "(1, 2)"), &data)),
        IoError::BigEndian { .. }
    ));
    assert!(matches!(
        e(&npy_raw(1, &dict("<f4", "(2,)"), &data)),
        IoError::WrongShape { .. }
    ));
    let fortran = npy_raw(
        1,
        "{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }",
        &data,
    );
    assert!(matches!(e(&fortran), IoError::FortranOrder { .. }));
    for d in [
        "{'descr': '<f4', 'shape': (1, 2), }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), 'x': 1}",
        "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (1, 2)}",
        "{'descr': '<f4', 'fortran_order': 0, 'shape': (1, 2)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2)} x",
        "['descr', '<f4']",
    ] {
        assert!(
            matches!(e(&npy_raw(1, d, &data)), IoError::BadHeader { .. }),
            "{d}"
        );
    }
    // A v2 header length over the cap.
    let mut long = b"\x93NUMPY\x02\x00".to_vec();
    long.extend_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(e(&long), IoError::BadHeader { .. }));
    // Messages carry the path, lowercase.
    let msg = e(&magic).to_string();
    assert!(msg.starts_with("<memory>: not a .npy file"), "{msg}");
}

#[test]
fn missing_file_names_the_path() {
    let err = io::read_npy_matrix("/nonexistent/recall/x.npy").unwrap_err();
    assert!(matches!(err, IoError::Os { .. }));
    assert!(err.to_string().starts_with("/nonexistent/recall/x.npy: "));
    assert!(matches!(
        io::read_matrix("x.csv"),
        Err(IoError::UnknownExtension { .. })
    ));
}

#[test]
fn bad_fvecs_files_are_typed_errors() {
    let rec = |d: i32, n: usize| {
        let mut v = d.to_le_bytes().to_vec();
        v.extend(std::iter::repeat_n(0u8, 4 * n));
        v
    };
    let fv = |b: &[u8]| io::fvecs_from_bytes(b).unwrap_err();
    let fr = |b: &[u8]| io::fvecs_from_reader(b).unwrap_err();
    // Ragged: 2 then 3 dims (the lengths happen to be a multiple of neither record).
    let ragged = [rec(2, 2), rec(3, 3)].concat();
    assert!(matches!(fv(&ragged), IoError::Fvecs { .. }));
    assert!(matches!(fr(&ragged), IoError::Fvecs { .. }));
    // Ragged with a length that is a multiple: dims 2 and 2 records but the second says 1 + extra.
    let sneaky = [rec(2, 2), rec(1, 2)].concat();
    assert!(fv(&sneaky).to_string().contains("ragged"));
    assert!(fr(&sneaky).to_string().contains("ragged"));
    let truncated = rec(4, 3);
    assert!(matches!(fv(&truncated), IoError::Fvecs { .. }));
    assert!(matches!(fr(&truncated), IoError::Fvecs { .. }));
    assert!(matches!(fv(&[]), IoError::Fvecs { .. }));
    assert!(matches!(fv(&rec(0, 0)), IoError::Fvecs { .. }));
    assert!(matches!(fv(&rec(-5, 0)), IoError::Fvecs { .. }));
    // A huge declared dimension in a tiny input.
    assert!(matches!(fv(&rec(i32::MAX, 1)), IoError::Fvecs { .. }));
    assert!(matches!(fr(&rec(i32::MAX, 1)), IoError::Fvecs { .. }));
}

#[test]
fn bad_npz_files_are_typed_errors() {
    let z = |b: &[u8]| io::npz_csr_from_bytes(b).unwrap_err();
    assert!(matches!(z(b"not a zip"), IoError::Zip { .. }));
    assert!(matches!(z(&[]), IoError::Zip { .. }));
    let good = small_graph(CompressionMethod::Deflated);
    assert!(matches!(z(&good[..good.len() / 2]), IoError::Zip { .. }));
    // Missing members.
    let i32s = |v: &[i32]| {
        npy_raw(
            1,
            &dict("<i4", &format!("({},)", v.len())),
            &le(v, i32::to_le_bytes),
        )
    };
    let base = vec![
        ("indptr.npy", i32s(&[0, 1, 1])),
        ("indices.npy", i32s(&[1])),
        (
            "data.npy",
            npy_raw(1, &dict("<f4", "(1,)"), &le(&[1f32], f32::to_le_bytes)),
        ),
        ("shape.npy", i32s(&[2, 2])),
    ];
    for skip in 0..base.len() {
        let members: Vec<_> = base
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != skip)
            .map(|(_, m)| m.clone())
            .collect();
        let err = z(&zip_of(&members, CompressionMethod::Stored));
        assert!(
            matches!(err, IoError::MissingMember { member, .. } if member == base[skip].0),
            "{err}"
        );
    }
    assert!(io::npz_csr_from_bytes(&zip_of(&base, CompressionMethod::Stored)).is_ok());
    // Not csr, not square, wrong lengths, negative index, bad member.
    let with = |name: &'static str, bytes: Vec<u8>| {
        let mut m: Vec<_> = base.iter().filter(|(n, _)| *n != name).cloned().collect();
        m.push((name, bytes));
        z(&zip_of(&m, CompressionMethod::Deflated))
    };
    assert!(matches!(
        with("format.npy", npy_raw(1, &dict("|S3", "()"), b"csc")),
        IoError::NotCsr { .. }
    ));
    assert!(matches!(
        with("shape.npy", i32s(&[2, 3])),
        IoError::NotCsr { .. }
    ));
    assert!(matches!(
        with("shape.npy", i32s(&[2])),
        IoError::NotCsr { .. }
    ));
    assert!(matches!(
        with("indptr.npy", i32s(&[0, 1])),
        IoError::NotCsr { .. }
    ));
    assert!(matches!(
        with("indices.npy", i32s(&[1, 0])),
        IoError::NotCsr { .. }
    ));
    assert!(matches!(
        with("indices.npy", i32s(&[-1])),
        IoError::BadValue { .. }
    ));
    let err = with("data.npy", b"garbage bytes".to_vec());
    assert!(matches!(err, IoError::BadMagic { .. }));
    assert!(err.to_string().starts_with("<memory>:data.npy: "), "{err}");
    assert!(matches!(
        with("data.npy", i32s(&[1])),
        IoError::WrongDtype { .. }
    ));
    // Parsed, but not a valid graph: the graph validation says so.
    let bad_graph = |indptr: &[i32], indices: &[i32], data: &[f64]| {
        io::npz_csr_from_bytes(&csr_npz(
            indptr,
            indices,
            data,
            3,
            CompressionMethod::Stored,
        ))
        .unwrap()
        .to_spread_graph()
        .unwrap_err()
    };
    assert!(
        matches!(
            bad_graph(&[0, 3, 2, 4], &[1, 2, 2, 0], &[1.0; 4]),
            IoError::Graph { .. }
        ),
        "indptr not monotonic"
    );
    assert!(
        matches!(
            bad_graph(&[0, 2, 3, 4], &[1, 7, 2, 0], &[1.0; 4]),
            IoError::Graph { .. }
        ),
        "column out of range"
    );
    assert!(matches!(
        bad_graph(&[0, 2, 3, 4], &[1, 2, 2, 0], &[1.0, -1.0, 1.0, 1.0]),
        IoError::Graph { .. }
    ));
    // f64 that overflows f32 becomes infinity, which the graph rejects.
    assert!(matches!(
        bad_graph(&[0, 2, 3, 4], &[1, 2, 2, 0], &[1.0, 1e300, 1.0, 1.0]),
        IoError::Graph { .. }
    ));
}

// ---------------------------------------------------------------------------------------------------
// Hostile input: mutated, truncated and random bytes, never a panic

/// Apply up to `edits` byte flips, insertions, deletions and a truncation.
fn mutate(mut b: Vec<u8>, edits: &[(u8, usize, u8)], cut: Option<usize>) -> Vec<u8> {
    for &(op, at, val) in edits {
        let len = b.len();
        match op % 4 {
            0 if len > 0 => b[at % len] = val,
            1 if len > 0 => b[at % len] ^= 1 << (val % 8),
            2 => b.insert(at % (len + 1), val),
            3 if len > 0 => {
                b.remove(at % len);
            }
            _ => {}
        }
    }
    if let Some(c) = cut {
        b.truncate(c % (b.len() + 1));
    }
    b
}

fn edits() -> impl Strategy<Value = (Vec<(u8, usize, u8)>, Option<usize>)> {
    (
        prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 0..6),
        prop::option::of(any::<usize>()),
    )
}

fn seeds_npy() -> Vec<Vec<u8>> {
    let data = le(&[1f32, 2.0, 3.0, 4.0], f32::to_le_bytes);
    vec![
        good_npy(),
        io::npy_to_bytes(&[1u32, 2, 3], &[3]).unwrap(),
        io::npy_to_bytes(&[1i64, 2], &[2]).unwrap(),
        npy_raw(2, &dict("<f4", "(2, 2)"), &data),
        npy_raw(1, &dict("|S3", "()"), b"csr"),
        npy_raw(1, &dict("<U3", "()"), &[0; 12]),
    ]
}

const HEADER_TOKENS: &[&str] = &[
    "{",
    "}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (",
    "'descr'",
    "'shape'",
    "'fortran_order'",
    ":",
    ": ",
    ",",
    ", ",
    "(",
    ")",
    "'<f4'",
    "'<i8'",
    "'>f4'",
    "'|S3'",
    "'<U2'",
    "'<f'",
    "''",
    "'",
    "True",
    "False",
    "0",
    "1",
    "2",
    "3",
    "16",
    "L",
    "18446744073709551615",
    "99999999999999999999",
    " ",
    "\n",
    "\"",
    "\\",
    "\x00",
    "é",
];

fn check_npy(b: &[u8]) {
    // Every entry point: a typed result either way.
    let _ = io::npy_from_bytes(b).map(|a| {
        let _ = a.to_text();
        let _ = a.clone().into_indices();
        let _ = a.clone().into_f32_lossy();
        let _ = a.into_f32_matrix();
    });
    let _ = io::npy_from_reader(b);
}

fn fvecs_seed() -> Vec<u8> {
    let mut b = Vec::new();
    for _ in 0..3 {
        b.extend_from_slice(&4i32.to_le_bytes());
        b.extend(le(&[1f32, -2.0, 0.5, 8.0], f32::to_le_bytes));
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn hostile_npy(seed in 0usize..6, (e, cut) in edits()) {
        let b = mutate(seeds_npy()[seed].clone(), &e, cut);
        check_npy(&b);
    }

    /// Headers assembled from the dict's own tokens, in any order, reach deep into the parser.
    #[test]
    fn hostile_npy_headers(
        version in 1u8..4,
        tokens in prop::collection::vec(prop::sample::select(HEADER_TOKENS), 0..24),
        data_len in 0usize..64,
    ) {
        let text: String = tokens.concat();
        let b = npy_raw(version, &text, &vec![0x3f; data_len]);
        check_npy(&b);
        if let Ok(a) = io::npy_from_bytes(&b) {
            let count = a.shape.iter().product::<u64>() as usize;
            let len = match &a.data {
                NpyData::F32(v) => v.len(),
                NpyData::F64(v) => v.len(),
                NpyData::I32(v) => v.len(),
                NpyData::I64(v) => v.len(),
                NpyData::U32(v) => v.len(),
                NpyData::U64(v) => v.len(),
                NpyData::Text(_) => count,
            };
            prop_assert_eq!(len, count);
        }
    }

    #[test]
    fn hostile_fvecs(random in any::<bool>(), raw in prop::collection::vec(any::<u8>(), 0..64), (e, cut) in edits()) {
        let b = if random { raw } else { mutate(fvecs_seed(), &e, cut) };
        if let Ok(m) = io::fvecs_from_bytes(&b) {
            prop_assert_eq!(m.data.len(), m.n_rows * m.dim);
            prop_assert_eq!(b.len(), m.n_rows * (4 + 4 * m.dim));
        }
        let r = io::fvecs_from_reader(&b[..]);
        prop_assert_eq!(r.is_ok(), io::fvecs_from_bytes(&b).is_ok());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 10_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Mutations anywhere in the zip (headers, directory, deflate streams); the stored archive's
    /// member bytes are plain `.npy`, so mutations there reach the `.npy` parser too.
    #[test]
    fn hostile_npz(stored in any::<bool>(), (e, cut) in edits()) {
        let method = if stored { CompressionMethod::Stored } else { CompressionMethod::Deflated };
        let b = mutate(small_graph(method), &e, cut);
        if let Ok(g) = io::npz_csr_from_bytes(&b) {
            prop_assert_eq!(g.indptr.len(), g.n_nodes + 1);
            let _ = g.to_spread_graph();
        }
    }
}

/// Large declared sizes reach no allocation: a `.npy` inside the zip claiming a huge shape.
#[test]
fn npz_member_with_a_huge_declared_shape() {
    let members = vec![
        (
            "indptr.npy",
            npy_raw(1, &dict("<i8", "(1000000000000,)"), &[0; 8]),
        ),
        ("indices.npy", npy_raw(1, &dict("<i4", "(0,)"), &[])),
        ("data.npy", npy_raw(1, &dict("<f4", "(0,)"), &[])),
        (
            "shape.npy",
            npy_raw(1, &dict("<i8", "(2,)"), &le(&[3i64, 3], i64::to_le_bytes)),
        ),
    ];
    let err = io::npz_csr_from_bytes(&zip_of(&members, CompressionMethod::Deflated)).unwrap_err();
    // Refused at the header: the shape says 4 entries.
    assert!(matches!(err, IoError::NotCsr { .. }), "{err}");
}

/// A member whose header declares more entries than the other members call for is refused before its
/// elements are read: deflated, 10 M zeros are 40 MB of real data in a few tens of KB of file.
#[test]
fn npz_members_longer_than_indptr_says_are_refused_before_they_are_read() {
    let many = 10_000_000;
    let zeros = vec![0u8; 4 * many];
    let members = vec![
        (
            "indptr.npy",
            npy_raw(
                1,
                &dict("<i4", "(3,)"),
                &le(&[0i32, 1, 1], i32::to_le_bytes),
            ),
        ),
        (
            "indices.npy",
            npy_raw(1, &dict("<i4", &format!("({many},)")), &zeros),
        ),
        (
            "data.npy",
            npy_raw(1, &dict("<f4", &format!("({many},)")), &zeros),
        ),
        (
            "shape.npy",
            npy_raw(1, &dict("<i8", "(2,)"), &le(&[2i64, 2], i64::to_le_bytes)),
        ),
    ];
    let bytes = zip_of(&members, CompressionMethod::Deflated);
    assert!(bytes.len() < 1 << 20, "{} bytes", bytes.len());
    let err = io::npz_csr_from_bytes(&bytes).unwrap_err();
    match err {
        IoError::NotCsr { reason, .. } => assert!(reason.contains("indices.npy"), "{reason}"),
        other => panic!("{other}"),
    }
    // The same members with the one edge indptr names are read.
    let members = vec![
        (
            "indptr.npy",
            npy_raw(
                1,
                &dict("<i4", "(3,)"),
                &le(&[0i32, 1, 1], i32::to_le_bytes),
            ),
        ),
        (
            "indices.npy",
            npy_raw(1, &dict("<i4", "(1,)"), &[1, 0, 0, 0]),
        ),
        (
            "data.npy",
            npy_raw(1, &dict("<f4", "(1,)"), &le(&[0.5f32], f32::to_le_bytes)),
        ),
        (
            "shape.npy",
            npy_raw(1, &dict("<i8", "(2,)"), &le(&[2i64, 2], i64::to_le_bytes)),
        ),
    ];
    let csr = io::npz_csr_from_bytes(&zip_of(&members, CompressionMethod::Deflated)).unwrap();
    assert_eq!(
        (csr.indptr, csr.indices, csr.weights),
        (vec![0, 1, 1], vec![1], vec![0.5])
    );
}
