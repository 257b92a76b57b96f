//! Kernel path selection: which implementation (AVX2+FMA+F16C or portable scalar) the
//! matrix multiplications run on.
//!
//! The choice is made once per process, the first time it is asked for: the environment
//! variable `STOKER_KERNELS=scalar` forces the portable path (for tests and for comparing
//! against the SIMD kernels); otherwise the AVX2 path is used when the CPU reports `avx2`,
//! `fma` and `f16c` at runtime (`is_x86_feature_detected!`). The detection costs a few
//! microseconds once; afterwards the answer is a cached load.

use std::sync::OnceLock;

/// An implementation of the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelPath {
    /// Portable Rust, no SIMD intrinsics; the reference the AVX2 path is tested against.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C intrinsics, used only after runtime detection.
    Avx2,
}

impl KernelPath {
    /// Whether this machine can run the path.
    pub fn is_available(self) -> bool {
        match self {
            KernelPath::Scalar => true,
            KernelPath::Avx2 => avx2_detected(),
        }
    }

    /// A short lowercase name ("scalar", "avx2") for logs and benchmark tables.
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Scalar => "scalar",
            KernelPath::Avx2 => "avx2",
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn avx2_detected() -> bool {
    static DETECTED: OnceLock<bool> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
            && is_x86_feature_detected!("f16c")
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn avx2_detected() -> bool {
    false
}

/// The path [`super::matmul`] uses: scalar when `STOKER_KERNELS=scalar` is set (read once),
/// otherwise the fastest path this CPU supports.
pub fn kernel_path() -> KernelPath {
    static PATH: OnceLock<KernelPath> = OnceLock::new();
    *PATH.get_or_init(|| {
        let forced_scalar = std::env::var("STOKER_KERNELS")
            .map(|v| v.eq_ignore_ascii_case("scalar"))
            .unwrap_or(false);
        if !forced_scalar && KernelPath::Avx2.is_available() {
            KernelPath::Avx2
        } else {
            KernelPath::Scalar
        }
    })
}
