//! The kernels' outputs pinned bit for bit: for each tiled format and each
//! kernel path this CPU has, the SHA-256 of a product's f32 bits at batch
//! sizes that take every run length and the paired (two tile groups) and
//! single-group loops, against `fixtures/kernel_bits.json`. A change to a
//! kernel's structure (its driver, its loops) must leave these bits as they
//! were; a change that means to alter the numerics rewrites the fixture with
//! `STOKER_PIN_KERNEL_BITS=write` and says why in its commit.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use stoker_executor::kernels::{BlockType, QDtype};

use super::{Activations, TestRng, paths, random_matrix, run};

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/kernel_bits.json"
);

/// The formats with tiled kernels; 203 rows (25 tile groups and a tail, so
/// the paired loop ends on an odd group), 512 columns.
const FORMATS: [QDtype; 6] = [
    QDtype::Q4_1,
    QDtype::Q8_0,
    QDtype::Blocks(BlockType::Q4_0),
    QDtype::Blocks(BlockType::Q5_0),
    QDtype::Blocks(BlockType::Q4K),
    QDtype::Blocks(BlockType::Q6K),
];
const BATCHES: [usize; 8] = [1, 2, 3, 4, 5, 6, 7, 13];

fn digest(out: &[f32]) -> String {
    let mut h = Sha256::new();
    for v in out {
        h.update(v.to_bits().to_le_bytes());
    }
    format!("{:x}", h.finalize())
}

#[test]
fn tiled_kernel_outputs_keep_their_bits() {
    let (rows, cols) = (203, 512);
    let mut got = BTreeMap::new();
    for (f, dtype) in FORMATS.iter().enumerate() {
        let w = random_matrix(*dtype, rows, cols, 31 + f as u64);
        for t in BATCHES {
            let x = TestRng::new(100 + t as u64).activations(t * cols);
            for path in paths() {
                got.insert(
                    format!("{dtype:?} {path:?} t={t}"),
                    digest(&run(path, &w, &x, t)),
                );
            }
        }
    }
    if std::env::var("STOKER_PIN_KERNEL_BITS").as_deref() == Ok("write") {
        let text = serde_json::to_string_pretty(&got).unwrap();
        std::fs::write(FIXTURE, text + "\n").unwrap();
        return;
    }
    let text = std::fs::read_to_string(FIXTURE).unwrap_or_else(|e| {
        panic!("{FIXTURE}: {e}; write it with STOKER_PIN_KERNEL_BITS=write on a build you trust")
    });
    let want: BTreeMap<String, String> = serde_json::from_str(&text).unwrap();
    let differ: Vec<&String> = got
        .iter()
        .filter(|(k, v)| want.get(*k) != Some(*v))
        .map(|(k, _)| k)
        .collect();
    assert!(
        differ.is_empty(),
        "kernel outputs changed bits (or the fixture lacks them): {differ:?}"
    );
}
