//! The one AVX2 / AVX-512 driver of the tiled weight formats with a 512-bit
//! VNNI body (Q4_0, Q5_0, Q4_K, Q6_K). Each format supplies its bodies through
//! [`TileFormat`]: one 8-row tile group on 256-bit vectors, and two groups side
//! by side on 512-bit vectors; the driver owns what was written once per
//! format before: the entry points compiled with the CPU features
//! ([`run_avx2`], `run_vnni`) and the loop over tile groups that pairs them
//! on the VNNI path and takes a last odd group on 256 bits.
//!
//! Everything below an entry point is `#[inline(always)]`, so a format's
//! bodies are compiled inside the entry point, with its features, as when
//! each format had its own copy of the driver (`tests/kernels/pinned.rs`
//! holds the bits). Q4_1 and Q8_0 keep their own four-line AVX2 loop: they
//! have no 512-bit body, and their `tile_avx2` is compiled with its own
//! features, which the trait's plain bodies could only reach by an unsafe
//! call that changed their code.

use std::ops::Range;

use super::Sink;

/// A tiled weight format: its tile (the implementing type, 8 weight rows ×
/// one block) and the kernel bodies the driver runs.
pub(crate) trait TileFormat: Sized {
    /// The activation block a tile is multiplied with.
    type Act;

    /// Tile group `g` (its `nb` tiles `gt`) against activation rows `rows` of
    /// `acts` on 256-bit vectors, in the runs of rows this format's registers
    /// allow, each row's 8 outputs handed to `sink`. `VNNI`: the CPU has
    /// AVX-512 F, VL, BW and VNNI, and the body may use them.
    fn group<const VNNI: bool>(
        gt: &[Self],
        acts: &[Self::Act],
        nb: usize,
        g: usize,
        rows: Range<usize>,
        sink: &mut Sink<'_>,
    );

    /// Tile groups `g` (`lo`) and `g + 1` (`hi`) side by side on 512-bit
    /// vectors, on the VNNI path only.
    fn group_pair(
        lo: &[Self],
        hi: &[Self],
        acts: &[Self::Act],
        nb: usize,
        g: usize,
        rows: Range<usize>,
        sink: &mut Sink<'_>,
    );
}

/// The outputs of tile groups `groups` × activation rows `rows`: `tiles` holds
/// `nb` tiles per group, `acts` `nb` blocks per row. With `vnni` two groups
/// at a time go through [`TileFormat::group_pair`].
///
/// # Safety
/// The CPU must support avx2, fma and f16c, and avx512f, avx512vl, avx512bw
/// and avx512vnni when `vnni` is set.
#[target_feature(enable = "avx2,fma,f16c")]
pub(crate) unsafe fn run_avx2<K: TileFormat>(
    vnni: bool,
    tiles: &[K],
    nb: usize,
    acts: &[K::Act],
    groups: Range<usize>,
    rows: Range<usize>,
    sink: &mut Sink<'_>,
) {
    if vnni {
        // SAFETY: the caller checked avx512f, avx512vl, avx512bw and avx512vnni.
        unsafe { run_vnni(tiles, nb, acts, groups, rows, sink) };
    } else {
        run_body::<K, false>(tiles, nb, acts, groups, rows, sink);
    }
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
fn run_vnni<K: TileFormat>(
    tiles: &[K],
    nb: usize,
    acts: &[K::Act],
    groups: Range<usize>,
    rows: Range<usize>,
    sink: &mut Sink<'_>,
) {
    run_body::<K, true>(tiles, nb, acts, groups, rows, sink);
}

/// The loop of [`run_avx2`], inlined into an entry point compiled with the
/// features it uses: with `VNNI`, pairs of groups on 512 bits and a last odd
/// group on 256; without, every group on 256.
#[inline(always)]
fn run_body<K: TileFormat, const VNNI: bool>(
    tiles: &[K],
    nb: usize,
    acts: &[K::Act],
    groups: Range<usize>,
    rows: Range<usize>,
    sink: &mut Sink<'_>,
) {
    let mut g = groups.start;
    while g < groups.end {
        if VNNI && g + 1 < groups.end {
            let lo = &tiles[g * nb..(g + 1) * nb];
            let hi = &tiles[(g + 1) * nb..(g + 2) * nb];
            K::group_pair(lo, hi, acts, nb, g, rows.clone(), sink);
            g += 2;
            continue;
        }
        K::group::<VNNI>(
            &tiles[g * nb..(g + 1) * nb],
            acts,
            nb,
            g,
            rows.clone(),
            sink,
        );
        g += 1;
    }
}
