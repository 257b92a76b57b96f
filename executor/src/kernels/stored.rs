//! Weights kept in the file's own layout, either owned or borrowed from the
//! memory-mapped model file.
//!
//! The float types (F32, F16, BF16) and the block formats without tiles are
//! multiplied as the file stores them, so there is nothing to copy: a
//! [`Stored`] slice can point straight into the mapping, whose pages the kernel
//! faults in as it reads them and which every process serving the same file
//! shares through the page cache. The tiled formats are rebuilt at load and
//! always own their bytes.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

/// Bytes that live as long as the matrices borrowing from them: in practice
/// the read-only mapping of a GGUF file.
pub type SharedBytes = dyn AsRef<[u8]> + Send + Sync;

/// Plain values that may be read straight from file bytes: every bit pattern
/// is a value, and the file's little-endian order is the machine's.
///
/// # Safety
/// Implementors must be `Copy` types without padding or invalid bit patterns
/// (`f32`, `u8` and `repr(transparent)` wrappers of `u16`).
pub unsafe trait Plain: Copy + 'static {}

// SAFETY: every bit pattern is an f32, a u8, and (wrapped) a u16.
unsafe impl Plain for f32 {}
unsafe impl Plain for u8 {}
unsafe impl Plain for super::dense::F16Bits {}
unsafe impl Plain for super::dense::BF16Bits {}

/// `len` values of type `T`, owned or in a mapped file.
#[derive(Clone)]
pub enum Stored<T: 'static> {
    Owned(Vec<T>),
    Mapped {
        bytes: Arc<SharedBytes>,
        /// Byte offset of the first value in `bytes`, aligned for `T`.
        start: usize,
        len: usize,
    },
}

impl<T: 'static> fmt::Debug for Stored<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stored::Owned(v) => write!(f, "Owned({} values)", v.len()),
            Stored::Mapped { start, len, .. } => write!(f, "Mapped({len} values at {start})"),
        }
    }
}

impl<T: Plain> Stored<T> {
    /// The values of `bytes[range]` (a whole number of `T`s), borrowed when the
    /// machine is little-endian and the first byte is aligned for `T`, copied
    /// otherwise.
    pub(crate) fn from_shared(
        bytes: &Arc<SharedBytes>,
        range: Range<usize>,
        decode: impl Fn(&[u8]) -> T,
    ) -> Self {
        let size = std::mem::size_of::<T>();
        let src = &(**bytes).as_ref()[range.clone()];
        debug_assert_eq!(src.len() % size, 0);
        let aligned = (src.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T>());
        if cfg!(target_endian = "little") && aligned {
            Stored::Mapped {
                bytes: Arc::clone(bytes),
                start: range.start,
                len: src.len() / size,
            }
        } else {
            Stored::Owned(src.chunks_exact(size).map(decode).collect())
        }
    }

    /// Whether the values live in the mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(self, Stored::Mapped { .. })
    }
}

impl<T: Plain> Deref for Stored<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Stored::Owned(v) => v,
            Stored::Mapped { bytes, start, len } => {
                let base = (**bytes).as_ref();
                let end = start + len * std::mem::size_of::<T>();
                let src = &base[*start..end];
                // SAFETY: `from_shared` checked that `src` starts aligned for `T` and
                // holds `len` values; `T: Plain` makes every bit pattern a value, and
                // `bytes` is immutable and kept alive by the `Arc` as long as `self`.
                unsafe { std::slice::from_raw_parts(src.as_ptr().cast::<T>(), *len) }
            }
        }
    }
}

impl<T: Plain> From<Vec<T>> for Stored<T> {
    fn from(v: Vec<T>) -> Self {
        Stored::Owned(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_slices_are_borrowed_and_odd_ones_copied() {
        let raw: Vec<u8> = (0..64u8).collect();
        let shared: Arc<SharedBytes> = Arc::new(raw.clone());
        let decode = |b: &[u8]| f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let base = (*shared).as_ref().as_ptr() as usize;
        // Vec<u8> gives no alignment promise beyond 1: find an aligned and an odd start.
        let aligned = (0..4).find(|o| (base + o).is_multiple_of(4)).unwrap();
        let a = Stored::<f32>::from_shared(&shared, aligned..aligned + 16, decode);
        let odd = aligned + 1;
        let b = Stored::<f32>::from_shared(&shared, odd..odd + 16, decode);
        assert!(a.is_mapped());
        assert!(!b.is_mapped());
        let expect = |s: usize| -> Vec<f32> { raw[s..s + 16].chunks(4).map(decode).collect() };
        assert_eq!(a.to_vec(), expect(aligned));
        assert_eq!(b.to_vec(), expect(odd));
    }
}
