//! Kernel path selection: which implementation (AVX2+FMA+F16C, the same with AVX-512
//! VNNI on 256-bit vectors, or portable scalar) the matrix multiplications run on.
//!
//! The choice is made once per process, the first time it is asked for: the environment
//! variable `STOKER_KERNELS=scalar` (or `avx2`) forces the portable (or the plain AVX2)
//! path, for tests and for comparing the paths; otherwise the fastest path the CPU
//! reports at runtime (`is_x86_feature_detected!`) is used. The detection costs a few
//! microseconds once; afterwards the answer is a cached load.
//!
//! Every path computes the same integer sums and the same float operations per output
//! where the tests say so: the VNNI path only replaces `vpmaddubsw` + `vpmaddwd` by the
//! fused `vpdpbusd` (exact either way), so its results are the AVX2 path's bits. It needs
//! AVX-512 (F, VL, BW, VNNI; every CPU with AVX-512 VNNI has BW), not just AVX-VNNI: the 32 vector registers of AVX-512VL let a
//! Q5_0 step keep six activation rows in flight (measured 1.5x over four at 512 rows);
//! CPUs with AVX-VNNI alone run the AVX2 path.

use std::sync::OnceLock;

/// An implementation of the kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelPath {
    /// Portable Rust, no SIMD intrinsics; the reference the AVX2 path is tested against.
    Scalar,
    /// x86-64 AVX2 + FMA + F16C intrinsics, used only after runtime detection.
    Avx2,
    /// [`KernelPath::Avx2`] plus AVX-512 VNNI's 8-bit dot product (`vpdpbusd` on
    /// 256-bit vectors with 32 registers, and on 512-bit ones for Q4_0 and Q5_0) in the
    /// integer kernels that gain from it; the others run their AVX2 code.
    Avx512Vnni,
}

impl KernelPath {
    /// Whether this machine can run the path.
    pub fn is_available(self) -> bool {
        match self {
            KernelPath::Scalar => true,
            KernelPath::Avx2 => avx2_detected(),
            KernelPath::Avx512Vnni => avx2_detected() && vnni_detected(),
        }
    }

    /// Whether the path runs the AVX2 code (all but [`KernelPath::Scalar`]).
    pub fn uses_avx2(self) -> bool {
        matches!(self, KernelPath::Avx2 | KernelPath::Avx512Vnni)
    }

    /// A short lowercase name ("scalar", "avx2", "avx512-vnni") for logs and benchmark tables.
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Scalar => "scalar",
            KernelPath::Avx2 => "avx2",
            KernelPath::Avx512Vnni => "avx512-vnni",
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

#[cfg(target_arch = "x86_64")]
fn vnni_detected() -> bool {
    static DETECTED: OnceLock<bool> = OnceLock::new();
    *DETECTED.get_or_init(|| {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512vl")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512vnni")
    })
}

#[cfg(not(target_arch = "x86_64"))]
fn vnni_detected() -> bool {
    false
}

/// The path [`super::matmul`] uses: scalar when `STOKER_KERNELS=scalar` is set, plain
/// AVX2 (if available) when `STOKER_KERNELS=avx2` (read once), otherwise the fastest
/// path this CPU supports.
pub fn kernel_path() -> KernelPath {
    static PATH: OnceLock<KernelPath> = OnceLock::new();
    *PATH.get_or_init(|| {
        let forced = std::env::var("STOKER_KERNELS").unwrap_or_default();
        let candidates: &[KernelPath] = if forced.eq_ignore_ascii_case("scalar") {
            &[]
        } else if forced.eq_ignore_ascii_case("avx2") {
            &[KernelPath::Avx2]
        } else {
            &[KernelPath::Avx512Vnni, KernelPath::Avx2]
        };
        candidates
            .iter()
            .copied()
            .find(|p| p.is_available())
            .unwrap_or(KernelPath::Scalar)
    })
}

/// For the tests of the AVX2 code: an x86-64 machine without AVX2, FMA or F16C fails
/// them with the reason instead of letting them pass untested.
#[cfg(test)]
pub(crate) fn require_avx2() {
    assert!(
        KernelPath::Avx2.is_available(),
        "this x86-64 CPU reports no AVX2, FMA or F16C, so the AVX2 kernels cannot be \
         tested here: run the tests on a CPU with them (x86-64 servers since 2013)"
    );
}
