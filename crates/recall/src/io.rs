//! File formats: NumPy `.npy` (read and write), `.fvecs` (read) and SciPy CSR `.npz` (read and write).
//!
//! The readers are strict and hostile-input safe: every malformed file is an [`IoError`], never a panic,
//! and nothing is allocated for data the input does not hold. A header's declared shape is checked for
//! overflow and against the file's length before any element is read; header text is capped at
//! [`MAX_HEADER_LEN`] bytes. Readers from memory (`*_from_bytes`) and from any [`Read`] (`*_from_reader`)
//! behave like the path readers; where the total length is unknown (a reader, a zip member) the output
//! grows only as data actually arrives.
//!
//! `.npy`: little-endian only (`<` or `=` on a little-endian host), C order, format versions 1.0, 2.0
//! and 3.0; element types `f4 f8 i4 i8 u4 u8`, plus byte and unicode strings (`S`, `U`) for SciPy's
//! `format.npy`. The writer produces exactly NumPy's own bytes (format 1.0, the same header text and
//! padding), see [`npy_to_bytes`].
//!
//! ```
//! use recall::io;
//! let bytes = io::npy_to_bytes(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
//! let m = io::npy_matrix_from_bytes(&bytes)?;
//! assert_eq!((m.n_rows, m.dim), (2, 3));
//! assert_eq!(m.data[4], 5.0);
//! # Ok::<(), recall::io::IoError>(())
//! ```

use std::fs::File;
use std::io::{BufReader, Cursor, Read, Seek};
use std::path::Path;

use thiserror::Error;

use crate::{Corpus, Graph, SpreadGraph};

/// The longest `.npy` header text accepted (NumPy itself refuses more than 10,000 bytes by default).
///
/// ```
/// let mut b = b"\x93NUMPY\x01\x00".to_vec();
/// b.extend_from_slice(&u16::MAX.to_le_bytes()); // a header longer than any array needs
/// assert!(recall::io::MAX_HEADER_LEN >= 10_000);
/// assert!(recall::io::npy_from_bytes(&b).is_err());
/// ```
pub const MAX_HEADER_LEN: usize = 65_536;

/// The label used in errors for data read from memory or a reader.
///
/// ```
/// let err = recall::io::npy_from_bytes(b"not npy").unwrap_err();
/// assert!(err.to_string().starts_with(recall::io::MEMORY));
/// ```
pub const MEMORY: &str = "<memory>";

const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// Bytes converted per read: large enough to be fast, small enough to never matter.
const CHUNK: usize = 1 << 20;
/// NumPy pads the header so that the data starts on a multiple of this.
const ARRAY_ALIGN: usize = 64;
/// NumPy leaves room to rewrite the growth axis's length in place (`numpy/lib/format.py`).
const GROWTH_AXIS_MAX_DIGITS: usize = 21;

/// Everything that can go wrong reading or writing a file. Each message starts with the path (or
/// `<memory>`), lowercase, no trailing period.
///
/// ```
/// use recall::io::{self, IoError};
/// let err = io::read_npy("/no/such/file.npy").unwrap_err();
/// assert!(matches!(err, IoError::Os { .. }));
/// assert!(err.to_string().starts_with("/no/such/file.npy: "));
/// ```
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum IoError {
    /// The operating system refused (missing file, permissions, a full disk).
    #[error("{path}: {source}")]
    Os {
        /// The file, or `<memory>`.
        path: String,
        /// What the operating system said.
        #[source]
        source: std::io::Error,
    },
    /// The data ends before the header or the shape says it should.
    #[error("{path}: truncated: {what}")]
    Truncated {
        /// The file, or `<memory>`.
        path: String,
        /// What was being read when the data ended.
        what: String,
    },
    /// The data does not start with `\x93NUMPY`.
    #[error("{path}: not a .npy file (bad magic bytes)")]
    BadMagic {
        /// The file, or `<memory>`.
        path: String,
    },
    /// A `.npy` format version other than 1.0, 2.0 or 3.0.
    #[error("{path}: unsupported .npy format version {major}.{minor} (1.0, 2.0 and 3.0 are read)")]
    UnsupportedVersion {
        /// The file, or `<memory>`.
        path: String,
        /// The major version in the file.
        major: u8,
        /// The minor version in the file.
        minor: u8,
    },
    /// The header text is not the dictionary NumPy writes.
    #[error("{path}: bad .npy header: {reason}")]
    BadHeader {
        /// The file, or `<memory>`.
        path: String,
        /// Why.
        reason: String,
    },
    /// Big-endian elements.
    #[error("{path}: big-endian data (descr {descr:?}) is not supported; save it little-endian")]
    BigEndian {
        /// The file, or `<memory>`.
        path: String,
        /// The dtype string in the header.
        descr: String,
    },
    /// Column-major (Fortran-order) elements.
    #[error("{path}: fortran-order arrays are not supported; save with np.ascontiguousarray first")]
    FortranOrder {
        /// The file, or `<memory>`.
        path: String,
    },
    /// An element type this reader does not know.
    #[error("{path}: unsupported dtype {descr:?}")]
    UnsupportedDtype {
        /// The file, or `<memory>`.
        path: String,
        /// The dtype string in the header.
        descr: String,
    },
    /// A supported dtype, but not one this reader takes.
    #[error("{path}: dtype {found} where {expected} was expected")]
    WrongDtype {
        /// The file, or `<memory>`.
        path: String,
        /// The dtype in the file.
        found: String,
        /// What the reader takes.
        expected: &'static str,
    },
    /// The right dtype with the wrong number of dimensions.
    #[error("{path}: shape {found:?} where {expected} was expected")]
    WrongShape {
        /// The file, or `<memory>`.
        path: String,
        /// The shape in the file.
        found: Vec<u64>,
        /// What the reader takes.
        expected: &'static str,
    },
    /// A declared shape whose byte count overflows.
    #[error("{path}: shape {shape:?} is too large (its byte count overflows)")]
    ShapeOverflow {
        /// The file, or `<memory>`.
        path: String,
        /// The declared shape.
        shape: Vec<u64>,
    },
    /// The declared shape and the bytes present disagree (checked before anything is allocated).
    #[error("{path}: the header declares {needed} bytes of data but the file holds {actual}")]
    LengthMismatch {
        /// The file, or `<memory>`.
        path: String,
        /// Bytes the header declares.
        needed: u64,
        /// Bytes present.
        actual: u64,
    },
    /// Bytes after the declared data.
    #[error("{path}: {count} bytes after the end of the data")]
    TrailingBytes {
        /// The file, or `<memory>`.
        path: String,
        /// How many extra bytes.
        count: u64,
    },
    /// The data is present but does not fit in memory.
    #[error("{path}: could not allocate {bytes} bytes")]
    OutOfMemory {
        /// The file, or `<memory>`.
        path: String,
        /// The size asked for.
        bytes: u64,
    },
    /// A value that cannot be what it stands for (a negative index, an id past `u32::MAX`).
    #[error("{path}: value {value} at index {index} {reason}")]
    BadValue {
        /// The file, or `<memory>`.
        path: String,
        /// The element's position.
        index: usize,
        /// The element's value.
        value: String,
        /// Why it is rejected.
        reason: &'static str,
    },
    /// A malformed `.fvecs` file (ragged rows, a bad dimension, a cut record).
    #[error("{path}: bad .fvecs file: {reason}")]
    Fvecs {
        /// The file, or `<memory>`.
        path: String,
        /// Why.
        reason: String,
    },
    /// The `.npz` is not a readable zip archive.
    #[error("{path}: bad .npz archive: {reason}")]
    Zip {
        /// The file, or `<memory>`.
        path: String,
        /// Why.
        reason: String,
    },
    /// The `.npz` lacks one of the members SciPy writes.
    #[error("{path}: the archive has no member {member}")]
    MissingMember {
        /// The file, or `<memory>`.
        path: String,
        /// The missing member's name.
        member: &'static str,
    },
    /// The `.npz` holds another sparse format, or a non-square matrix.
    #[error("{path}: not a CSR matrix: {reason}")]
    NotCsr {
        /// The file, or `<memory>`.
        path: String,
        /// Why.
        reason: String,
    },
    /// The CSR arrays were read but do not form a valid graph ([`SpreadGraph::from_csr`] said why).
    #[error("{path}: invalid graph: {source}")]
    Graph {
        /// The file, or `<memory>`.
        path: String,
        /// Why the data was rejected.
        #[source]
        source: crate::Error,
    },
    /// The matrix was read but is not a valid corpus (NaN or infinity, no rows, zero dimension).
    #[error("{path}: invalid corpus: {source}")]
    Corpus {
        /// The file, or `<memory>`.
        path: String,
        /// Why the data was rejected.
        #[source]
        source: crate::Error,
    },
    /// A file extension the reader does not know.
    #[error("{path}: unknown file type (expected {expected})")]
    UnknownExtension {
        /// The file, or `<memory>`.
        path: String,
        /// What the reader takes.
        expected: &'static str,
    },
    /// Arguments to a writer that do not fit together.
    #[error("{path}: cannot write: {reason}")]
    BadWrite {
        /// The file, or `<memory>`.
        path: String,
        /// Why.
        reason: String,
    },
}

fn os(path: &str, source: std::io::Error) -> IoError {
    IoError::Os {
        path: path.to_string(),
        source,
    }
}

// ---------------------------------------------------------------------------------------------------
// Element types

mod sealed {
    pub trait Sealed {}
}

/// The plain numbers a `.npy` file can hold here, with their NumPy type strings.
///
/// ```
/// use recall::io::NpyElement;
/// assert_eq!(<f32 as NpyElement>::DESCR, "<f4");
/// assert_eq!(<u64 as NpyElement>::SIZE, 8);
/// ```
pub trait NpyElement: sealed::Sealed + Copy + 'static {
    /// NumPy's `descr`, for example `<f4`.
    const DESCR: &'static str;
    /// Bytes per element.
    const SIZE: usize;
    #[doc(hidden)]
    fn from_le(bytes: &[u8]) -> Self;
    #[doc(hidden)]
    fn put_le(self, out: &mut Vec<u8>);
}

macro_rules! element {
    ($t:ty, $descr:literal) => {
        impl sealed::Sealed for $t {}
        impl NpyElement for $t {
            const DESCR: &'static str = $descr;
            const SIZE: usize = std::mem::size_of::<$t>();
            fn from_le(bytes: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(bytes);
                <$t>::from_le_bytes(a)
            }
            fn put_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    };
}
element!(f32, "<f4");
element!(f64, "<f8");
element!(i32, "<i4");
element!(i64, "<i8");
element!(u32, "<u4");
element!(u64, "<u8");

/// The dtype of a `.npy` file, as read.
///
/// ```
/// use recall::io::{self, Dtype};
/// let a = io::npy_from_bytes(&io::npy_to_bytes(&[1i64, 2], &[2])?)?;
/// assert_eq!(a.dtype, Dtype::I64);
/// # Ok::<(), recall::io::IoError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    /// `<f4`.
    F32,
    /// `<f8`.
    F64,
    /// `<i4`.
    I32,
    /// `<i8`.
    I64,
    /// `<u4`.
    U32,
    /// `<u8`.
    U64,
    /// `S<n>`: fixed-width byte strings.
    Bytes(usize),
    /// `U<n>`: fixed-width UCS-4 strings, little-endian.
    Unicode(usize),
}

impl Dtype {
    fn item_size(self) -> Option<u64> {
        match self {
            Dtype::F32 | Dtype::I32 | Dtype::U32 => Some(4),
            Dtype::F64 | Dtype::I64 | Dtype::U64 => Some(8),
            Dtype::Bytes(n) => Some(n as u64),
            Dtype::Unicode(n) => (n as u64).checked_mul(4),
        }
    }

    fn name(self) -> String {
        match self {
            Dtype::F32 => "float32".into(),
            Dtype::F64 => "float64".into(),
            Dtype::I32 => "int32".into(),
            Dtype::I64 => "int64".into(),
            Dtype::U32 => "uint32".into(),
            Dtype::U64 => "uint64".into(),
            Dtype::Bytes(n) => format!("bytes{n}"),
            Dtype::Unicode(n) => format!("str{n}"),
        }
    }
}

/// The elements of a `.npy` file, in C order.
///
/// ```
/// use recall::io::{self, NpyData};
/// let a = io::npy_from_bytes(&io::npy_to_bytes(&[7u32], &[1])?)?;
/// assert_eq!(a.data, NpyData::U32(vec![7]));
/// # Ok::<(), recall::io::IoError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum NpyData {
    /// float32 elements.
    F32(Vec<f32>),
    /// float64 elements.
    F64(Vec<f64>),
    /// int32 elements.
    I32(Vec<i32>),
    /// int64 elements.
    I64(Vec<i64>),
    /// uint32 elements.
    U32(Vec<u32>),
    /// uint64 elements.
    U64(Vec<u64>),
    /// The raw bytes of `S` and `U` arrays (decode one with [`NpyArray::to_text`]).
    Text(Vec<u8>),
}

/// A whole `.npy` file.
///
/// ```
/// let a = recall::io::npy_from_bytes(&recall::io::npy_to_bytes(&[1.5f64; 6], &[2, 3])?)?;
/// assert_eq!((a.version, a.shape.as_slice(), a.source.as_str()), ((1, 0), &[2u64, 3][..], "<memory>"));
/// # Ok::<(), recall::io::IoError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct NpyArray {
    /// The format version, `(1, 0)`, `(2, 0)` or `(3, 0)`.
    pub version: (u8, u8),
    /// The element type.
    pub dtype: Dtype,
    /// The shape (`[]` for a scalar).
    pub shape: Vec<u64>,
    /// The elements, in C order.
    pub data: NpyData,
    /// Where it was read from (`<memory>` for bytes and readers), for error messages.
    pub source: String,
}

/// A row-major `n_rows x dim` f32 matrix.
///
/// ```
/// let m = recall::io::npy_matrix_from_bytes(&recall::io::npy_to_bytes(&[1.0f32, 2.0, 3.0, 4.0], &[2, 2])?)?;
/// assert_eq!((m.n_rows, m.dim, m.data), (2, 2, vec![1.0, 2.0, 3.0, 4.0]));
/// # Ok::<(), recall::io::IoError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix {
    /// Number of rows.
    pub n_rows: usize,
    /// Values per row.
    pub dim: usize,
    /// `data[r * dim + c]`.
    pub data: Vec<f32>,
}

/// A CSR adjacency matrix read from a SciPy `.npz`, ready for [`SpreadGraph::from_csr`] (which
/// validates it: see [`CsrGraph::to_spread_graph`]).
///
/// ```
/// let bytes = recall::io::npz_csr_to_bytes(&[0, 1, 1], &[1], &[0.5], 2)?; // 0 -> 1, weight 0.5
/// let csr = recall::io::npz_csr_from_bytes(&bytes)?;
/// assert_eq!((csr.n_nodes, csr.indptr, csr.indices, csr.weights), (2, vec![0, 1, 1], vec![1], vec![0.5]));
/// # Ok::<(), recall::io::IoError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct CsrGraph {
    /// `n_nodes + 1` offsets into `indices` and `weights`.
    pub indptr: Vec<usize>,
    /// The target node of every edge.
    pub indices: Vec<u32>,
    /// The weight of every edge.
    pub weights: Vec<f32>,
    /// Number of nodes (the matrix is `n_nodes x n_nodes`).
    pub n_nodes: usize,
    /// Where it was read from, for error messages.
    pub source: String,
}

impl CsrGraph {
    /// Validate (monotonic `indptr`, column ids in range, weights finite and `>= 0`) and build the graph.
    ///
    /// ```
    /// let bytes = recall::io::npz_csr_to_bytes(&[0, 1, 1], &[1], &[0.5], 2)?; // 0 -> 1, weight 0.5
    /// let graph = recall::io::npz_csr_from_bytes(&bytes)?.to_spread_graph()?;
    /// assert_eq!(graph.n_edges(), 1);
    /// # Ok::<(), recall::io::IoError>(())
    /// ```
    pub fn to_spread_graph(&self) -> Result<SpreadGraph, IoError> {
        SpreadGraph::from_csr(&self.indptr, &self.indices, &self.weights).map_err(|e| {
            IoError::Graph {
                path: self.source.clone(),
                source: e.into(),
            }
        })
    }
}

impl CsrGraph {
    /// Validate and transpose once into a [`Graph`] handle for repeated [`crate::Engine::spread_in`] calls
    /// (on a GPU it stays on the device while the handle lives).
    ///
    /// ```
    /// let bytes = recall::io::npz_csr_to_bytes(&[0, 1, 1], &[1], &[0.5], 2)?; // 0 -> 1, weight 0.5
    /// let handle = recall::io::npz_csr_from_bytes(&bytes)?.to_graph()?;
    /// assert_eq!(handle.n_nodes(), 2);
    /// # Ok::<(), recall::io::IoError>(())
    /// ```
    pub fn to_graph(&self) -> Result<Graph, IoError> {
        Ok(Graph::new(self.to_spread_graph()?))
    }
}

// ---------------------------------------------------------------------------------------------------
// Small reading helpers

/// Fill `buf` completely; `Ok(false)` on a clean end of input before the first byte, an error on a
/// partial fill.
fn read_full_or_eof<R: Read>(
    r: &mut R,
    buf: &mut [u8],
    path: &str,
    what: &str,
) -> Result<bool, IoError> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => {
                return Err(IoError::Truncated {
                    path: path.to_string(),
                    what: format!("{what} ({got} of {} bytes)", buf.len()),
                });
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(os(path, e)),
        }
    }
    Ok(true)
}

fn read_exact<R: Read>(r: &mut R, buf: &mut [u8], path: &str, what: &str) -> Result<(), IoError> {
    if buf.is_empty() || read_full_or_eof(r, buf, path, what)? {
        Ok(())
    } else {
        Err(IoError::Truncated {
            path: path.to_string(),
            what: format!("{what} (no bytes left)"),
        })
    }
}

/// Nothing may follow the data.
fn expect_eof<R: Read>(r: &mut R, path: &str) -> Result<(), IoError> {
    let mut extra = 0u64;
    let mut buf = [0u8; 4096];
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                extra += n as u64;
                // Enough to say so; do not drain an endless reader.
                if extra >= 1 << 20 {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(os(path, e)),
        }
    }
    if extra > 0 {
        return Err(IoError::TrailingBytes {
            path: path.to_string(),
            count: extra,
        });
    }
    Ok(())
}

fn reserve<T>(v: &mut Vec<T>, n: usize, path: &str) -> Result<(), IoError> {
    v.try_reserve_exact(n).map_err(|_| IoError::OutOfMemory {
        path: path.to_string(),
        bytes: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
    })
}

/// Read `count` elements. With `known` the caller has checked that the input holds them, so the output
/// is allocated once; otherwise it grows only as data arrives.
fn read_elements<T: NpyElement, R: Read>(
    r: &mut R,
    count: usize,
    known: bool,
    path: &str,
) -> Result<Vec<T>, IoError> {
    let mut out = Vec::new();
    if known {
        reserve(&mut out, count, path)?;
    }
    append_elements(r, count, &mut out, &mut Vec::new(), path)?;
    Ok(out)
}

/// Append `count` elements to `out`, reading through `buf` (at most [`CHUNK`] bytes, reused).
fn append_elements<T: NpyElement, R: Read>(
    r: &mut R,
    count: usize,
    out: &mut Vec<T>,
    buf: &mut Vec<u8>,
    path: &str,
) -> Result<(), IoError> {
    let per_chunk = (CHUNK / T::SIZE).max(1);
    let want = per_chunk.min(count).saturating_mul(T::SIZE);
    if buf.len() < want {
        buf.resize(want, 0);
    }
    let mut left = count;
    while left > 0 {
        let n = left.min(per_chunk);
        let bytes = &mut buf[..n * T::SIZE];
        read_exact(r, bytes, path, "data")?;
        out.extend(bytes.chunks_exact(T::SIZE).map(T::from_le));
        left -= n;
    }
    Ok(())
}

fn read_elements_u8<R: Read>(
    r: &mut R,
    n: usize,
    known: bool,
    path: &str,
) -> Result<Vec<u8>, IoError> {
    let mut out = Vec::new();
    if known {
        reserve(&mut out, n, path)?;
    }
    let mut buf = vec![0u8; n.min(CHUNK)];
    let mut left = n;
    while left > 0 {
        let k = left.min(CHUNK);
        read_exact(r, &mut buf[..k], path, "data")?;
        out.extend_from_slice(&buf[..k]);
        left -= k;
    }
    Ok(out)
}

fn open(path: &Path) -> Result<(BufReader<File>, u64, String), IoError> {
    let label = path.display().to_string();
    let f = File::open(path).map_err(|e| os(&label, e))?;
    let len = f.metadata().map_err(|e| os(&label, e))?.len();
    Ok((BufReader::new(f), len, label))
}

// ---------------------------------------------------------------------------------------------------
// .npy header

struct Header {
    version: (u8, u8),
    dtype: Dtype,
    shape: Vec<u64>,
    /// Magic, version, length field and header text.
    header_bytes: u64,
}

fn bad_header(path: &str, reason: impl Into<String>) -> IoError {
    IoError::BadHeader {
        path: path.to_string(),
        reason: reason.into(),
    }
}

fn read_header<R: Read>(r: &mut R, path: &str) -> Result<Header, IoError> {
    let mut pre = [0u8; 8];
    if !read_full_or_eof(r, &mut pre, path, "magic and version")? {
        return Err(IoError::Truncated {
            path: path.to_string(),
            what: "empty file".into(),
        });
    }
    if &pre[..6] != MAGIC {
        return Err(IoError::BadMagic {
            path: path.to_string(),
        });
    }
    let (major, minor) = (pre[6], pre[7]);
    let (len, len_field) = match (major, minor) {
        (1, 0) => {
            let mut b = [0u8; 2];
            read_exact(r, &mut b, path, "header length")?;
            (u16::from_le_bytes(b) as usize, 2)
        }
        (2, 0) | (3, 0) => {
            let mut b = [0u8; 4];
            read_exact(r, &mut b, path, "header length")?;
            let n = u32::from_le_bytes(b);
            (usize::try_from(n).unwrap_or(usize::MAX), 4)
        }
        _ => {
            return Err(IoError::UnsupportedVersion {
                path: path.to_string(),
                major,
                minor,
            });
        }
    };
    if len > MAX_HEADER_LEN {
        return Err(bad_header(
            path,
            format!("header of {len} bytes is longer than the {MAX_HEADER_LEN} accepted"),
        ));
    }
    let mut text = vec![0u8; len];
    read_exact(r, &mut text, path, "header")?;
    let (dtype, fortran, shape) = parse_header_text(&text, path)?;
    if fortran {
        return Err(IoError::FortranOrder {
            path: path.to_string(),
        });
    }
    Ok(Header {
        version: (major, minor),
        dtype,
        shape,
        header_bytes: 8 + len_field + len as u64,
    })
}

/// A strict parser for the Python dict literal NumPy writes:
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }` followed by spaces and a newline.
struct Lexer<'a> {
    s: &'a [u8],
    pos: usize,
    path: &'a str,
}

impl Lexer<'_> {
    fn ws(&mut self) {
        while self.pos < self.s.len() && matches!(self.s[self.pos], b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn expect(&mut self, c: u8) -> Result<(), IoError> {
        self.ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(format!("expected '{}'", c as char)))
        }
    }

    fn err(&self, what: String) -> IoError {
        bad_header(self.path, format!("{what} at byte {}", self.pos))
    }

    fn string(&mut self) -> Result<String, IoError> {
        self.ws();
        let q = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            _ => return Err(self.err("expected a string".into())),
        };
        self.pos += 1;
        let start = self.pos;
        while let Some(c) = self.peek() {
            if c == q {
                let out = &self.s[start..self.pos];
                self.pos += 1;
                return Ok(String::from_utf8_lossy(out).into_owned());
            }
            if c == b'\\' || !(0x20..0x7f).contains(&c) {
                return Err(self.err("unsupported character in a string".into()));
            }
            self.pos += 1;
        }
        Err(self.err("unterminated string".into()))
    }

    fn ident(&mut self) -> &[u8] {
        self.ws();
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_alphabetic()) {
            self.pos += 1;
        }
        &self.s[start..self.pos]
    }

    fn int(&mut self) -> Result<u64, IoError> {
        self.ws();
        let start = self.pos;
        let mut v: u64 = 0;
        while let Some(c) = self.peek().filter(u8::is_ascii_digit) {
            v = v
                .checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(c - b'0')))
                .ok_or_else(|| self.err("dimension does not fit 64 bits".into()))?;
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.err("expected a dimension".into()));
        }
        // Python 2 wrote longs as `3L`.
        if self.peek() == Some(b'L') {
            self.pos += 1;
        }
        Ok(v)
    }

    /// `()`, `(n,)`, `(a, b)`, `(a, b,)`; at most 32 dimensions like NumPy.
    fn shape(&mut self) -> Result<Vec<u64>, IoError> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        let mut trailing_comma = false;
        loop {
            self.ws();
            if self.peek() == Some(b')') {
                self.pos += 1;
                break;
            }
            if dims.len() >= 32 {
                return Err(self.err("more than 32 dimensions".into()));
            }
            dims.push(self.int()?);
            self.ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    trailing_comma = true;
                }
                Some(b')') => {
                    self.pos += 1;
                    trailing_comma = false;
                    break;
                }
                _ => return Err(self.err("expected ',' or ')' in the shape".into())),
            }
        }
        if dims.len() == 1 && !trailing_comma {
            return Err(self.err("a one-dimensional shape needs a trailing comma".into()));
        }
        Ok(dims)
    }
}

fn parse_descr(descr: &str, path: &str) -> Result<Dtype, IoError> {
    let unsupported = || IoError::UnsupportedDtype {
        path: path.to_string(),
        descr: descr.to_string(),
    };
    let b = descr.as_bytes();
    if b.len() < 2 {
        return Err(unsupported());
    }
    let order = b[0];
    let kind = b[1];
    let size: usize = descr[2..].parse().map_err(|_| unsupported())?;
    let little_host = cfg!(target_endian = "little");
    let dtype = match (kind, size) {
        (b'f', 4) => Dtype::F32,
        (b'f', 8) => Dtype::F64,
        (b'i', 4) => Dtype::I32,
        (b'i', 8) => Dtype::I64,
        (b'u', 4) => Dtype::U32,
        (b'u', 8) => Dtype::U64,
        (b'S', n) if n <= MAX_HEADER_LEN => Dtype::Bytes(n),
        (b'U', n) if n <= MAX_HEADER_LEN => Dtype::Unicode(n),
        _ => return Err(unsupported()),
    };
    let single_byte = matches!(dtype, Dtype::Bytes(_));
    match (order, single_byte) {
        (b'<', _) | (b'|' | b'>' | b'=', true) => {}
        (b'=', false) if little_host => {}
        (b'>' | b'=', false) => {
            return Err(IoError::BigEndian {
                path: path.to_string(),
                descr: descr.to_string(),
            });
        }
        _ => return Err(unsupported()),
    }
    Ok(dtype)
}

fn parse_header_text(text: &[u8], path: &str) -> Result<(Dtype, bool, Vec<u64>), IoError> {
    if text.last() != Some(&b'\n') {
        return Err(bad_header(path, "the header does not end with a newline"));
    }
    let mut lx = Lexer {
        s: text,
        pos: 0,
        path,
    };
    lx.expect(b'{')?;
    let (mut descr, mut fortran, mut shape) = (None, None, None);
    loop {
        lx.ws();
        if lx.peek() == Some(b'}') {
            lx.pos += 1;
            break;
        }
        let key = lx.string()?;
        lx.expect(b':')?;
        match key.as_str() {
            "descr" if descr.is_none() => descr = Some(lx.string()?),
            "fortran_order" if fortran.is_none() => {
                fortran = Some(match lx.ident() {
                    b"True" => true,
                    b"False" => false,
                    _ => return Err(lx.err("fortran_order must be True or False".into())),
                });
            }
            "shape" if shape.is_none() => shape = Some(lx.shape()?),
            "descr" | "fortran_order" | "shape" => {
                return Err(lx.err(format!("key {key:?} given twice")));
            }
            _ => return Err(lx.err(format!("unexpected key {key:?}"))),
        }
        lx.ws();
        match lx.peek() {
            Some(b',') => lx.pos += 1,
            Some(b'}') => {}
            _ => return Err(lx.err("expected ',' or '}'".into())),
        }
    }
    lx.ws();
    if lx.pos != text.len() {
        return Err(lx.err("unexpected text after the dict".into()));
    }
    let (Some(descr), Some(fortran), Some(shape)) = (descr, fortran, shape) else {
        return Err(bad_header(
            path,
            "the header needs the keys 'descr', 'fortran_order' and 'shape'",
        ));
    };
    Ok((parse_descr(&descr, path)?, fortran, shape))
}

// ---------------------------------------------------------------------------------------------------
// .npy reading

/// Read a `.npy` stream. `total_len`, when known, is the whole input's length: the declared shape is
/// checked against it before anything is allocated.
fn read_npy_stream<R: Read>(
    r: &mut R,
    total_len: Option<u64>,
    path: &str,
) -> Result<NpyArray, IoError> {
    let h = read_header(r, path)?;
    read_npy_body(r, h, total_len, path)
}

/// The elements of a `.npy` whose header `h` was just read from `r` ([`read_npy_stream`]).
fn read_npy_body<R: Read>(
    r: &mut R,
    h: Header,
    total_len: Option<u64>,
    path: &str,
) -> Result<NpyArray, IoError> {
    let overflow = || IoError::ShapeOverflow {
        path: path.to_string(),
        shape: h.shape.clone(),
    };
    let count = h
        .shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    let item = h.dtype.item_size().ok_or_else(overflow)?;
    let needed = count.checked_mul(item).ok_or_else(overflow)?;
    let count = usize::try_from(count).map_err(|_| overflow())?;
    let needed_usize = usize::try_from(needed).map_err(|_| overflow())?;
    if let Some(total) = total_len {
        let actual = total.saturating_sub(h.header_bytes);
        if actual != needed {
            return Err(IoError::LengthMismatch {
                path: path.to_string(),
                needed,
                actual,
            });
        }
    }
    let known = total_len.is_some();
    let data = match h.dtype {
        Dtype::F32 => NpyData::F32(read_elements(r, count, known, path)?),
        Dtype::F64 => NpyData::F64(read_elements(r, count, known, path)?),
        Dtype::I32 => NpyData::I32(read_elements(r, count, known, path)?),
        Dtype::I64 => NpyData::I64(read_elements(r, count, known, path)?),
        Dtype::U32 => NpyData::U32(read_elements(r, count, known, path)?),
        Dtype::U64 => NpyData::U64(read_elements(r, count, known, path)?),
        Dtype::Bytes(_) | Dtype::Unicode(_) => {
            NpyData::Text(read_elements_u8(r, needed_usize, known, path)?)
        }
    };
    expect_eof(r, path)?;
    Ok(NpyArray {
        version: h.version,
        dtype: h.dtype,
        shape: h.shape,
        data,
        source: path.to_string(),
    })
}

/// Read any supported `.npy` file.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("recall-doc-{}-{}", std::process::id(), line!()));
/// # std::fs::create_dir_all(&dir).map_err(|e| recall::io::IoError::Os { path: "tmp".into(), source: e })?;
/// let path = dir.join("v.npy");
/// recall::io::write_npy(&path, &[1u32, 2, 3], &[3])?;
/// let a = recall::io::read_npy(&path)?;
/// assert_eq!(a.shape, [3]);
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn read_npy(path: impl AsRef<Path>) -> Result<NpyArray, IoError> {
    let (mut r, len, label) = open(path.as_ref())?;
    read_npy_stream(&mut r, Some(len), &label)
}

/// [`read_npy`] from memory.
///
/// ```
/// let a = recall::io::npy_from_bytes(&recall::io::npy_to_bytes(&[1.0f32, 2.0], &[2])?)?;
/// assert_eq!(a.into_f32_vector()?, [1.0, 2.0]);
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn npy_from_bytes(bytes: &[u8]) -> Result<NpyArray, IoError> {
    read_npy_stream(&mut Cursor::new(bytes), Some(bytes.len() as u64), MEMORY)
}

/// [`read_npy`] from a stream of unknown length: the output grows only as data arrives, and the stream
/// must end where the data does.
///
/// ```
/// let bytes = recall::io::npy_to_bytes(&[4i32, 5], &[2])?;
/// let a = recall::io::npy_from_reader(std::io::Cursor::new(bytes))?;
/// assert_eq!(a.into_indices()?, [4, 5]);
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn npy_from_reader<R: Read>(mut reader: R) -> Result<NpyArray, IoError> {
    read_npy_stream(&mut reader, None, MEMORY)
}

fn to_usize(d: u64, path: &str, shape: &[u64]) -> Result<usize, IoError> {
    usize::try_from(d).map_err(|_| IoError::ShapeOverflow {
        path: path.to_string(),
        shape: shape.to_vec(),
    })
}

impl NpyArray {
    fn wrong_dtype(&self, expected: &'static str) -> IoError {
        IoError::WrongDtype {
            path: self.source.clone(),
            found: self.dtype.name(),
            expected,
        }
    }

    fn wrong_shape(&self, expected: &'static str) -> IoError {
        IoError::WrongShape {
            path: self.source.clone(),
            found: self.shape.clone(),
            expected,
        }
    }

    /// A 2-D float32 array as a matrix.
    ///
    /// ```
    /// let a = recall::io::npy_from_bytes(&recall::io::npy_to_bytes(&[1.0f32; 6], &[3, 2])?)?;
    /// assert_eq!(a.into_f32_matrix()?.n_rows, 3);
    /// # Ok::<(), recall::io::IoError>(())
    /// ```
    pub fn into_f32_matrix(self) -> Result<Matrix, IoError> {
        let [n_rows, dim] = self.shape[..] else {
            return Err(self.wrong_shape("a 2-d matrix"));
        };
        let n_rows = to_usize(n_rows, &self.source, &self.shape)?;
        let dim = to_usize(dim, &self.source, &self.shape)?;
        match self.data {
            NpyData::F32(data) => Ok(Matrix { n_rows, dim, data }),
            _ => Err(self.wrong_dtype("float32 (<f4)")),
        }
    }

    /// A 1-D float32 array.
    ///
    /// ```
    /// let a = recall::io::npy_from_bytes(&recall::io::npy_to_bytes(&[0.5f32, 0.25], &[2])?)?;
    /// assert_eq!(a.into_f32_vector()?, [0.5, 0.25]);
    /// # Ok::<(), recall::io::IoError>(())
    /// ```
    pub fn into_f32_vector(self) -> Result<Vec<f32>, IoError> {
        if self.shape.len() != 1 {
            return Err(self.wrong_shape("a 1-d vector"));
        }
        match self.data {
            NpyData::F32(v) => Ok(v),
            _ => Err(self.wrong_dtype("float32 (<f4)")),
        }
    }

    /// A 1-D float32 or float64 array as f32 (`as f32`: rounding, and overflow to infinity, which the
    /// consumers reject).
    ///
    /// ```
    /// let a = recall::io::npy_from_bytes(&recall::io::npy_to_bytes(&[0.1f64], &[1])?)?;
    /// assert_eq!(a.into_f32_lossy()?, [0.1f32]);
    /// # Ok::<(), recall::io::IoError>(())
    /// ```
    pub fn into_f32_lossy(self) -> Result<Vec<f32>, IoError> {
        if self.shape.len() != 1 {
            return Err(self.wrong_shape("a 1-d vector"));
        }
        match self.data {
            NpyData::F32(v) => Ok(v),
            NpyData::F64(v) => Ok(v.into_iter().map(|x| x as f32).collect()),
            _ => Err(self.wrong_dtype("float32 or float64")),
        }
    }

    /// A 1-D integer array (`u4 u8 i4 i8`) as non-negative u64 values; a negative value is an error.
    ///
    /// ```
    /// let ok = recall::io::npy_from_bytes(&recall::io::npy_to_bytes(&[3i64, 0], &[2])?)?;
    /// assert_eq!(ok.into_indices()?, [3, 0]);
    /// let negative = recall::io::npy_from_bytes(&recall::io::npy_to_bytes(&[-1i32], &[1])?)?;
    /// assert!(negative.into_indices().is_err());
    /// # Ok::<(), recall::io::IoError>(())
    /// ```
    pub fn into_indices(self) -> Result<Vec<u64>, IoError> {
        if self.shape.len() != 1 {
            return Err(self.wrong_shape("a 1-d index array"));
        }
        let path = &self.source;
        let negative = |index: usize, v: i64| IoError::BadValue {
            path: path.clone(),
            index,
            value: v.to_string(),
            reason: "is negative",
        };
        match self.data {
            NpyData::U64(v) => Ok(v),
            NpyData::U32(v) => Ok(v.into_iter().map(u64::from).collect()),
            NpyData::I32(v) => v
                .into_iter()
                .enumerate()
                .map(|(i, x)| u64::try_from(x).map_err(|_| negative(i, i64::from(x))))
                .collect(),
            NpyData::I64(v) => v
                .into_iter()
                .enumerate()
                .map(|(i, x)| u64::try_from(x).map_err(|_| negative(i, x)))
                .collect(),
            _ => Err(self.wrong_dtype("an integer type (int32, int64, uint32, uint64)")),
        }
    }

    /// A 1-D index array whose values fit u32 (node or row ids).
    ///
    /// ```
    /// let a = recall::io::npy_from_bytes(&recall::io::npy_to_bytes(&[9u64, 1], &[2])?)?;
    /// assert_eq!(a.into_u32_indices()?, [9, 1]);
    /// let big = recall::io::npy_from_bytes(&recall::io::npy_to_bytes(&[1u64 << 40], &[1])?)?;
    /// assert!(big.into_u32_indices().is_err());
    /// # Ok::<(), recall::io::IoError>(())
    /// ```
    pub fn into_u32_indices(self) -> Result<Vec<u32>, IoError> {
        let path = self.source.clone();
        self.into_indices()?
            .into_iter()
            .enumerate()
            .map(|(i, x)| {
                u32::try_from(x).map_err(|_| IoError::BadValue {
                    path: path.clone(),
                    index: i,
                    value: x.to_string(),
                    reason: "does not fit u32",
                })
            })
            .collect()
    }

    /// A 0-d or one-element string array (`S` or `U`) as text, trailing NULs removed.
    ///
    /// ```
    /// let bytes = recall::io::npz_csr_to_bytes(&[0, 1, 1], &[1], &[0.5], 2)?; // 0 -> 1, weight 0.5
    /// // SciPy stores the sparse format as a 0-d byte string: `format.npy` holds b'csr'.
    /// let csr = recall::io::npz_csr_from_bytes(&bytes)?; // reading it checked that text
    /// assert_eq!(csr.n_nodes, 2);
    /// let numbers = recall::io::npy_from_bytes(&recall::io::npy_to_bytes(&[1u32], &[1])?)?;
    /// assert!(numbers.to_text().is_err()); // not a string array
    /// # Ok::<(), recall::io::IoError>(())
    /// ```
    pub fn to_text(&self) -> Result<String, IoError> {
        let NpyData::Text(raw) = &self.data else {
            return Err(self.wrong_dtype("a string"));
        };
        if self.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d)) != Some(1) {
            return Err(self.wrong_shape("a single string"));
        }
        let s: String = match self.dtype {
            Dtype::Unicode(_) => raw
                .chunks_exact(4)
                .map(|c| {
                    char::from_u32(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        .unwrap_or('\u{fffd}')
                })
                .collect(),
            _ => String::from_utf8_lossy(raw).into_owned(),
        };
        Ok(s.trim_end_matches('\0').to_string())
    }
}

/// Read a 2-D float32 `.npy` matrix.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("recall-doc-{}-{}", std::process::id(), line!()));
/// # std::fs::create_dir_all(&dir).map_err(|e| recall::io::IoError::Os { path: "tmp".into(), source: e })?;
/// let path = dir.join("m.npy");
/// recall::io::write_npy(&path, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?;
/// let m = recall::io::read_npy_matrix(&path)?;
/// assert_eq!((m.n_rows, m.dim), (3, 2));
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn read_npy_matrix(path: impl AsRef<Path>) -> Result<Matrix, IoError> {
    read_npy(path)?.into_f32_matrix()
}

/// [`read_npy_matrix`] from memory.
///
/// ```
/// let m = recall::io::npy_matrix_from_bytes(&recall::io::npy_to_bytes(&[1.0f32, 2.0], &[1, 2])?)?;
/// assert_eq!(m.dim, 2);
/// assert!(recall::io::npy_matrix_from_bytes(&recall::io::npy_to_bytes(&[1.0f32], &[1])?).is_err());
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn npy_matrix_from_bytes(bytes: &[u8]) -> Result<Matrix, IoError> {
    npy_from_bytes(bytes)?.into_f32_matrix()
}

/// Read a 1-D float32 `.npy` vector.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("recall-doc-{}-{}", std::process::id(), line!()));
/// # std::fs::create_dir_all(&dir).map_err(|e| recall::io::IoError::Os { path: "tmp".into(), source: e })?;
/// let path = dir.join("seeds.npy");
/// recall::io::write_npy(&path, &[1.0f32, 0.0, 0.5], &[3])?;
/// assert_eq!(recall::io::read_npy_vector(&path)?, [1.0, 0.0, 0.5]);
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn read_npy_vector(path: impl AsRef<Path>) -> Result<Vec<f32>, IoError> {
    read_npy(path)?.into_f32_vector()
}

/// Read a 1-D integer `.npy` array (`u4 u8 i4 i8`, no negative values) as u64.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("recall-doc-{}-{}", std::process::id(), line!()));
/// # std::fs::create_dir_all(&dir).map_err(|e| recall::io::IoError::Os { path: "tmp".into(), source: e })?;
/// let path = dir.join("ids.npy");
/// recall::io::write_npy(&path, &[5i32, 2], &[2])?;
/// assert_eq!(recall::io::read_npy_indices(&path)?, [5, 2]);
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn read_npy_indices(path: impl AsRef<Path>) -> Result<Vec<u64>, IoError> {
    read_npy(path)?.into_indices()
}

// ---------------------------------------------------------------------------------------------------
// .npy writing

fn shape_repr(shape: &[usize]) -> String {
    match shape {
        [] => "()".into(),
        [n] => format!("({n},)"),
        _ => {
            let parts: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            format!("({})", parts.join(", "))
        }
    }
}

/// The bytes of a `.npy` file holding `data` with `shape` (C order), exactly as NumPy's `np.save`
/// writes them: format 1.0 (2.0 only if the header cannot fit), the dict in NumPy's key order, room for
/// the growth axis, spaces to a 64-byte boundary and a newline.
///
/// ```
/// let bytes = recall::io::npy_to_bytes(&[1.0f32, 2.0, 3.0], &[3])?;
/// assert_eq!(&bytes[..6], b"\x93NUMPY");
/// assert_eq!(bytes.len() % 64, 12 % 64); // a 64-byte aligned header, then 3 x 4 bytes
/// assert!(recall::io::npy_to_bytes(&[1.0f32], &[2]).is_err()); // shape and data disagree
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn npy_to_bytes<T: NpyElement>(data: &[T], shape: &[usize]) -> Result<Vec<u8>, IoError> {
    let count = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if count != Some(data.len()) {
        return Err(IoError::BadWrite {
            path: MEMORY.into(),
            reason: format!("shape {shape:?} does not hold {} values", data.len()),
        });
    }
    let mut dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
        T::DESCR,
        shape_repr(shape)
    );
    if let Some(first) = shape.first() {
        let digits = first.to_string().len();
        dict.push_str(&" ".repeat(GROWTH_AXIS_MAX_DIGITS.saturating_sub(digits)));
    }
    let wrap = |len_field: usize| {
        let hlen = dict.len() + 1;
        let pad = ARRAY_ALIGN - (MAGIC.len() + 2 + len_field + hlen) % ARRAY_ALIGN;
        (hlen + pad, pad)
    };
    let (mut total, mut pad) = wrap(2);
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    if total <= usize::from(u16::MAX) {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(total as u16).to_le_bytes());
    } else {
        (total, pad) = wrap(4);
        let len = u32::try_from(total).map_err(|_| IoError::BadWrite {
            path: MEMORY.into(),
            reason: "header too long".into(),
        })?;
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&len.to_le_bytes());
    }
    reserve(&mut out, total + std::mem::size_of_val(data), MEMORY)?;
    out.extend_from_slice(dict.as_bytes());
    out.extend(std::iter::repeat_n(b' ', pad));
    out.push(b'\n');
    for &v in data {
        v.put_le(&mut out);
    }
    Ok(out)
}

/// Write `data` with `shape` as a `.npy` file NumPy reads as it is (see [`npy_to_bytes`]).
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("recall-doc-{}-{}", std::process::id(), line!()));
/// # std::fs::create_dir_all(&dir).map_err(|e| recall::io::IoError::Os { path: "tmp".into(), source: e })?;
/// recall::io::write_npy(dir.join("ids.npy"), &[3u32, 1, 2], &[3])?; // numpy.load reads it as uint32
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn write_npy<T: NpyElement>(
    path: impl AsRef<Path>,
    data: &[T],
    shape: &[usize],
) -> Result<(), IoError> {
    let label = path.as_ref().display().to_string();
    let bytes = npy_to_bytes(data, shape).map_err(|e| match e {
        IoError::BadWrite { reason, .. } => IoError::BadWrite {
            path: label.clone(),
            reason,
        },
        other => other,
    })?;
    std::fs::write(path.as_ref(), bytes).map_err(|e| os(&label, e))
}

// ---------------------------------------------------------------------------------------------------
// .fvecs

fn fvecs_err(path: &str, reason: impl Into<String>) -> IoError {
    IoError::Fvecs {
        path: path.to_string(),
        reason: reason.into(),
    }
}

fn read_fvecs_stream<R: Read>(
    r: &mut R,
    total_len: Option<u64>,
    path: &str,
) -> Result<Matrix, IoError> {
    let mut b = [0u8; 4];
    if !read_full_or_eof(r, &mut b, path, "the first vector's dimension")? {
        return Err(fvecs_err(path, "empty file"));
    }
    let first = i32::from_le_bytes(b);
    if first <= 0 {
        return Err(fvecs_err(path, format!("vector 0 has dimension {first}")));
    }
    let dim = first as usize;
    let record = 4 + 4 * dim as u64;
    let mut data: Vec<f32> = Vec::new();
    let mut expected_rows = None;
    if let Some(total) = total_len {
        if total % record != 0 {
            return Err(fvecs_err(
                path,
                format!(
                    "length {total} is not a multiple of the {record}-byte record of a {dim}-dimensional vector \
                     (truncated, or vectors of different dimensions)"
                ),
            ));
        }
        let rows = total / record;
        let values =
            usize::try_from(rows * dim as u64).map_err(|_| fvecs_err(path, "too large"))?;
        reserve(&mut data, values, path)?;
        expected_rows = Some(rows);
    }
    let mut n_rows = 0usize;
    let mut buf = Vec::new();
    loop {
        if n_rows > 0 {
            if !read_full_or_eof(r, &mut b, path, "a vector's dimension")? {
                break;
            }
            let d = i32::from_le_bytes(b);
            if d != first {
                return Err(fvecs_err(
                    path,
                    format!(
                        "vector {n_rows} has dimension {d}, vector 0 has {first} (ragged file)"
                    ),
                ));
            }
        }
        append_elements::<f32, _>(r, dim, &mut data, &mut buf, path).map_err(|e| match e {
            IoError::Truncated { .. } => fvecs_err(path, format!("vector {n_rows} is truncated")),
            other => other,
        })?;
        n_rows += 1;
        if expected_rows == Some(n_rows as u64) {
            expect_eof(r, path)?;
            break;
        }
    }
    Ok(Matrix { n_rows, dim, data })
}

/// Read an `.fvecs` file (each vector: little-endian i32 dimension, then that many f32; all equal).
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("recall-doc-{}-{}", std::process::id(), line!()));
/// # std::fs::create_dir_all(&dir).map_err(|e| recall::io::IoError::Os { path: "tmp".into(), source: e })?;
/// let path = dir.join("base.fvecs");
/// let mut bytes = Vec::new();
/// for row in [[1.0f32, 2.0], [3.0, 4.0]] {
///     bytes.extend_from_slice(&2i32.to_le_bytes()); // each record: its dimension, then the values
///     for v in row {
///         bytes.extend_from_slice(&v.to_le_bytes());
///     }
/// }
/// # std::fs::write(&path, &bytes).map_err(|e| recall::io::IoError::Os { path: "tmp".into(), source: e })?;
/// let m = recall::io::read_fvecs(&path)?;
/// assert_eq!((m.n_rows, m.dim, m.data), (2, 2, vec![1.0, 2.0, 3.0, 4.0]));
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn read_fvecs(path: impl AsRef<Path>) -> Result<Matrix, IoError> {
    let (mut r, len, label) = open(path.as_ref())?;
    read_fvecs_stream(&mut r, Some(len), &label)
}

/// [`read_fvecs`] from memory.
///
/// ```
/// let mut bytes = 3i32.to_le_bytes().to_vec();
/// for v in [1.0f32, 0.0, -1.0] {
///     bytes.extend_from_slice(&v.to_le_bytes());
/// }
/// assert_eq!(recall::io::fvecs_from_bytes(&bytes)?.dim, 3);
/// assert!(recall::io::fvecs_from_bytes(&bytes[..9]).is_err()); // a cut record
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn fvecs_from_bytes(bytes: &[u8]) -> Result<Matrix, IoError> {
    read_fvecs_stream(&mut Cursor::new(bytes), Some(bytes.len() as u64), MEMORY)
}

/// [`read_fvecs`] from a stream of unknown length.
///
/// ```
/// let mut bytes = 3i32.to_le_bytes().to_vec();
/// for v in [1.0f32, 0.0, -1.0] {
///     bytes.extend_from_slice(&v.to_le_bytes());
/// }
/// let m = recall::io::fvecs_from_reader(std::io::Cursor::new(bytes))?;
/// assert_eq!(m.data, [1.0, 0.0, -1.0]);
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn fvecs_from_reader<R: Read>(mut reader: R) -> Result<Matrix, IoError> {
    read_fvecs_stream(&mut reader, None, MEMORY)
}

/// Read a matrix by extension: `.npy` (2-D float32) or `.fvecs`.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("recall-doc-{}-{}", std::process::id(), line!()));
/// # std::fs::create_dir_all(&dir).map_err(|e| recall::io::IoError::Os { path: "tmp".into(), source: e })?;
/// let path = dir.join("corpus.npy");
/// recall::io::write_npy(&path, &[0.0f32; 8], &[4, 2])?;
/// assert_eq!(recall::io::read_matrix(&path)?.n_rows, 4);
/// assert!(recall::io::read_matrix(dir.join("corpus.csv")).is_err()); // unknown extension
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn read_matrix(path: impl AsRef<Path>) -> Result<Matrix, IoError> {
    let p = path.as_ref();
    match p
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        Some("npy") => read_npy_matrix(p),
        Some("fvecs") => read_fvecs(p),
        _ => Err(IoError::UnknownExtension {
            path: p.display().to_string(),
            expected: ".npy or .fvecs",
        }),
    }
}

/// Read a corpus file by extension (`.npy`, 2-D float32, or `.fvecs`; see [`read_matrix`]) and validate it
/// once into a [`Corpus`] handle for repeated [`crate::Engine::knn_in`] calls (on a GPU it stays on the
/// device while the handle lives).
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("recall-doc-{}-{}", std::process::id(), line!()));
/// # std::fs::create_dir_all(&dir)?;
/// let path = dir.join("corpus.npy");
/// recall::io::write_npy(&path, &[1.0f32, 0.0, 0.0, 1.0], &[2, 2])?;
/// let store = recall::io::read_corpus(&path)?; // checked once
/// let engine = recall::Engine::new()?;
/// let hits = engine.knn_in(&[0.1, 0.9], &store, recall::Metric::Cosine, 1)?;
/// assert_eq!(hits.ids, [1]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_corpus(path: impl AsRef<Path>) -> Result<Corpus, IoError> {
    let p = path.as_ref();
    let m = read_matrix(p)?;
    Corpus::new(m.data, m.dim).map_err(|e| IoError::Corpus {
        path: p.display().to_string(),
        source: e.into(),
    })
}

// ---------------------------------------------------------------------------------------------------
// SciPy CSR .npz

fn zip_err(path: &str, e: impl std::fmt::Display) -> IoError {
    IoError::Zip {
        path: path.to_string(),
        reason: e.to_string(),
    }
}

/// The member `name` of the archive as a `.npy`, `None` where there is no such member. With `expect`, a member
/// whose header declares another number of elements is refused before any element is read: a small deflated
/// member can stand for gigabytes of real data, and the other members already say how many there must be.
fn npz_member<R: Read + Seek>(
    archive: &mut zip::ZipArchive<R>,
    name: &'static str,
    path: &str,
    expect: Option<u64>,
) -> Result<Option<NpyArray>, IoError> {
    let mut file = match archive.by_name(name) {
        Ok(f) => f,
        Err(zip::result::ZipError::FileNotFound) => return Ok(None),
        Err(e) => return Err(zip_err(path, format!("{name}: {e}"))),
    };
    let label = format!("{path}:{name}");
    let zip_os = |e| match e {
        IoError::Os { path, source } => IoError::Zip {
            path,
            reason: source.to_string(),
        },
        other => other,
    };
    let h = read_header(&mut file, &label).map_err(zip_os)?;
    if let Some(want) = expect {
        let count = h.shape.iter().try_fold(1u64, |acc, &d| acc.checked_mul(d));
        if count != Some(want) {
            return Err(IoError::NotCsr {
                path: path.to_string(),
                reason: format!(
                    "{name} has shape {:?}; the other members call for {want} entries",
                    h.shape
                ),
            });
        }
    }
    // The declared size may lie: the member is read as a stream that grows only with real data (and
    // the zip reader checks the CRC at its end).
    let arr = read_npy_body(&mut file, h, None, &label).map_err(zip_os)?;
    Ok(Some(arr))
}

fn read_npz_stream<R: Read + Seek>(reader: R, path: &str) -> Result<CsrGraph, IoError> {
    let mut archive = zip::ZipArchive::new(reader).map_err(|e| zip_err(path, e))?;
    let need = |a: Option<NpyArray>, member: &'static str| {
        a.ok_or(IoError::MissingMember {
            path: path.to_string(),
            member,
        })
    };
    let not_csr = |reason: String| IoError::NotCsr {
        path: path.to_string(),
        reason,
    };
    if let Some(fmt) = npz_member(&mut archive, "format.npy", path, None)? {
        let f = fmt.to_text()?;
        if f != "csr" {
            return Err(not_csr(format!("format is {f:?}, expected \"csr\"")));
        }
    }
    let shape = need(
        npz_member(&mut archive, "shape.npy", path, Some(2))?,
        "shape.npy",
    )?
    .into_indices()?;
    let [n_rows, n_cols] = shape[..] else {
        return Err(not_csr(format!(
            "shape.npy holds {} values, expected 2",
            shape.len()
        )));
    };
    if n_rows != n_cols {
        return Err(not_csr(format!(
            "the matrix is {n_rows} x {n_cols}; spreading needs a square adjacency matrix"
        )));
    }
    let n_nodes = usize::try_from(n_rows).map_err(|_| not_csr("too many nodes".into()))?;
    // Every member's length is known before it is read: indptr's from the shape, indices' and data's from
    // indptr's last entry (the number of edges; `CsrGraph::to_spread_graph` asks the same).
    let n_indptr = u64::try_from(n_nodes)
        .ok()
        .and_then(|n| n.checked_add(1))
        .ok_or_else(|| not_csr("too many nodes".into()))?;
    let indptr_raw = need(
        npz_member(&mut archive, "indptr.npy", path, Some(n_indptr))?,
        "indptr.npy",
    )?;
    let indptr_label = indptr_raw.source.clone();
    let indptr = indptr_raw
        .into_indices()?
        .into_iter()
        .enumerate()
        .map(|(i, x)| {
            usize::try_from(x).map_err(|_| IoError::BadValue {
                path: indptr_label.clone(),
                index: i,
                value: x.to_string(),
                reason: "does not fit usize",
            })
        })
        .collect::<Result<Vec<usize>, IoError>>()?;
    // Each length below was checked from its member's header (`npz_member`'s `expect`): indptr n + 1 entries,
    // indices and data one per edge.
    let n_edges = indptr.last().map(|&e| e as u64);
    let indices = need(
        npz_member(&mut archive, "indices.npy", path, n_edges)?,
        "indices.npy",
    )?
    .into_u32_indices()?;
    let weights = need(
        npz_member(&mut archive, "data.npy", path, n_edges)?,
        "data.npy",
    )?
    .into_f32_lossy()?;
    Ok(CsrGraph {
        indptr,
        indices,
        weights,
        n_nodes,
        source: path.to_string(),
    })
}

/// Read a SciPy `scipy.sparse.save_npz` CSR matrix (a zip, stored or deflated, of `indptr.npy`,
/// `indices.npy`, `data.npy`, `shape.npy` and `format.npy`): int32/int64 `indptr` and `indices`,
/// float32/float64 `data` (converted `as f32`). The matrix must be square (an adjacency matrix). Each member's
/// length is checked from its header before its elements are read (`indptr` n + 1 entries, `indices` and `data`
/// as many as `indptr`'s last entry), so a small deflated member cannot make the reader take gigabytes it then
/// refuses; the rest of graph validity is checked by [`CsrGraph::to_spread_graph`].
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("recall-doc-{}-{}", std::process::id(), line!()));
/// # std::fs::create_dir_all(&dir).map_err(|e| recall::io::IoError::Os { path: "tmp".into(), source: e })?;
/// let path = dir.join("graph.npz"); // scipy.sparse.save_npz writes the same members
/// recall::io::write_npz_csr(&path, &[0, 2, 2], &[1, 1], &[0.5, 0.5], 2)?;
/// let csr = recall::io::read_npz_csr(&path)?;
/// assert_eq!(csr.indices, [1, 1]);
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn read_npz_csr(path: impl AsRef<Path>) -> Result<CsrGraph, IoError> {
    let label = path.as_ref().display().to_string();
    let f = File::open(path.as_ref()).map_err(|e| os(&label, e))?;
    read_npz_stream(BufReader::new(f), &label)
}

/// [`read_npz_csr`] from memory.
///
/// ```
/// let bytes = recall::io::npz_csr_to_bytes(&[0, 1, 1], &[1], &[0.5], 2)?; // 0 -> 1, weight 0.5
/// assert_eq!(recall::io::npz_csr_from_bytes(&bytes)?.weights, [0.5]);
/// assert!(recall::io::npz_csr_from_bytes(b"PK").is_err());
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn npz_csr_from_bytes(bytes: &[u8]) -> Result<CsrGraph, IoError> {
    read_npz_stream(Cursor::new(bytes), MEMORY)
}

/// [`read_npz_csr`] from any seekable reader.
///
/// ```
/// let bytes = recall::io::npz_csr_to_bytes(&[0, 1, 1], &[1], &[0.5], 2)?; // 0 -> 1, weight 0.5
/// let csr = recall::io::npz_csr_from_reader(std::io::Cursor::new(bytes))?;
/// assert_eq!(csr.n_nodes, 2);
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn npz_csr_from_reader<R: Read + Seek>(reader: R) -> Result<CsrGraph, IoError> {
    read_npz_stream(reader, MEMORY)
}

/// Read a CSR `.npz` and build the validated graph: [`read_npz_csr`] then [`CsrGraph::to_spread_graph`].
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("recall-doc-{}-{}", std::process::id(), line!()));
/// # std::fs::create_dir_all(&dir).map_err(|e| recall::io::IoError::Os { path: "tmp".into(), source: e })?;
/// let path = dir.join("graph.npz");
/// recall::io::write_npz_csr(&path, &[0, 1, 1], &[1], &[0.5], 2)?;
/// let (graph, n_nodes) = recall::io::read_spread_graph(&path)?;
/// assert_eq!((graph.n_edges(), n_nodes), (1, 2));
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn read_spread_graph(path: impl AsRef<Path>) -> Result<(SpreadGraph, usize), IoError> {
    let csr = read_npz_csr(path)?;
    Ok((csr.to_spread_graph()?, csr.n_nodes))
}

/// Read a SciPy CSR `.npz` ([`read_npz_csr`]) and validate and transpose it once into a [`Graph`] handle
/// for repeated [`crate::Engine::spread_in`] calls.
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("recall-doc-{}-{}", std::process::id(), line!()));
/// # std::fs::create_dir_all(&dir).map_err(|e| recall::io::IoError::Os { path: "tmp".into(), source: e })?;
/// let path = dir.join("graph.npz");
/// recall::io::write_npz_csr(&path, &[0, 1, 2, 2], &[1, 2], &[1.0, 0.5], 3)?;
/// let graph = recall::io::read_graph(&path)?; // validated and transposed once
/// assert_eq!((graph.n_nodes(), graph.n_edges()), (3, 2));
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn read_graph(path: impl AsRef<Path>) -> Result<Graph, IoError> {
    read_npz_csr(path)?.to_graph()
}

/// A CSR graph as the bytes of a SciPy `.npz` (the members `scipy.sparse.save_npz` writes, stored
/// uncompressed): int32 `indices` and `indptr` (int64 when they do not fit), float32 `data`, `format` `csr`,
/// int64 `shape` `(n_nodes, n_nodes)`. `scipy.sparse.load_npz` reads it as it is. The arrays are checked
/// for shape only; [`CsrGraph::to_spread_graph`] validates the graph.
///
/// ```
/// // 0 -> 1 (weight 0.5), 1 -> 2 (weight 2.0), node 2 has no out-edges
/// let bytes = recall::io::npz_csr_to_bytes(&[0, 1, 2, 2], &[1, 2], &[0.5, 2.0], 3)?;
/// let back = recall::io::npz_csr_from_bytes(&bytes)?;
/// assert_eq!((back.indptr, back.indices, back.weights), (vec![0, 1, 2, 2], vec![1, 2], vec![0.5, 2.0]));
/// assert!(recall::io::npz_csr_to_bytes(&[0, 1], &[1], &[], 1).is_err()); // a weight per edge
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn npz_csr_to_bytes(
    indptr: &[usize],
    indices: &[u32],
    weights: &[f32],
    n_nodes: usize,
) -> Result<Vec<u8>, IoError> {
    use std::io::Write as _;
    let bad = |reason: String| IoError::BadWrite {
        path: MEMORY.into(),
        reason,
    };
    if n_nodes.checked_add(1) != Some(indptr.len()) || indices.len() != weights.len() {
        return Err(bad(format!(
            "indptr has {} entries for {n_nodes} nodes, indices {} and weights {}",
            indptr.len(),
            indices.len(),
            weights.len()
        )));
    }
    let fits_i32 = |v: usize| i32::try_from(v).is_ok();
    let index_bytes = |xs: &mut dyn Iterator<Item = usize>, len: usize, wide: bool| {
        if wide {
            let v: Vec<i64> = xs.map(|x| x as i64).collect();
            npy_to_bytes(&v, &[len])
        } else {
            let v: Vec<i32> = xs.map(|x| x as i32).collect();
            npy_to_bytes(&v, &[len])
        }
    };
    let wide_ptr = !indptr.iter().all(|&p| fits_i32(p));
    let wide_idx = !indices.iter().all(|&i| fits_i32(i as usize)) || wide_ptr;
    let n = i64::try_from(n_nodes).map_err(|_| bad("too many nodes".into()))?;
    let mut format = b"\x93NUMPY\x01\x00".to_vec();
    let mut dict = String::from("{'descr': '|S3', 'fortran_order': False, 'shape': (), }");
    while !(MAGIC.len() + 4 + dict.len() + 1).is_multiple_of(ARRAY_ALIGN) {
        dict.push(' ');
    }
    dict.push('\n');
    format.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    format.extend_from_slice(dict.as_bytes());
    format.extend_from_slice(b"csr");
    let members: [(&str, Vec<u8>); 5] = [
        (
            "indices.npy",
            index_bytes(
                &mut indices.iter().map(|&i| i as usize),
                indices.len(),
                wide_idx,
            )?,
        ),
        (
            "indptr.npy",
            index_bytes(&mut indptr.iter().copied(), indptr.len(), wide_ptr)?,
        ),
        ("format.npy", format),
        ("shape.npy", npy_to_bytes(&[n, n], &[2])?),
        ("data.npy", npy_to_bytes(weights, &[weights.len()])?),
    ];
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let options =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, bytes) in members {
        zip.start_file(name, options)
            .map_err(|e| bad(e.to_string()))?;
        zip.write_all(&bytes).map_err(|e| bad(e.to_string()))?;
    }
    Ok(zip.finish().map_err(|e| bad(e.to_string()))?.into_inner())
}

/// Write a CSR graph as a SciPy `.npz` ([`npz_csr_to_bytes`]).
///
/// ```
/// # let dir = std::env::temp_dir().join(format!("recall-doc-{}-{}", std::process::id(), line!()));
/// # std::fs::create_dir_all(&dir).map_err(|e| recall::io::IoError::Os { path: "tmp".into(), source: e })?;
/// recall::io::write_npz_csr(dir.join("g.npz"), &[0, 1, 1], &[1], &[1.0], 2)?; // scipy.sparse.load_npz reads it
/// # Ok::<(), recall::io::IoError>(())
/// ```
pub fn write_npz_csr(
    path: impl AsRef<Path>,
    indptr: &[usize],
    indices: &[u32],
    weights: &[f32],
    n_nodes: usize,
) -> Result<(), IoError> {
    let label = path.as_ref().display().to_string();
    let bytes = npz_csr_to_bytes(indptr, indices, weights, n_nodes).map_err(|e| match e {
        IoError::BadWrite { reason, .. } => IoError::BadWrite {
            path: label.clone(),
            reason,
        },
        other => other,
    })?;
    std::fs::write(path.as_ref(), bytes).map_err(|e| os(&label, e))
}
