//! Newtypes for the engine's identifiers, so a block index can never be passed
//! where a sequence id is expected.

use std::fmt;

/// One sequence (request) inside the engine. Assigned by the engine, unique for
/// the engine's lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SeqId(pub u64);

impl fmt::Display for SeqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seq-{}", self.0)
    }
}

/// Index of one fixed-size block in the KV cache pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BlockId(pub u32);

impl BlockId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Which lane a sequence belongs to. Interactive work has reserved headroom;
/// batch work borrows what is left and is preempted first.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Lane {
    Interactive,
    Batch,
}

impl Lane {
    pub const ALL: [Lane; 2] = [Lane::Interactive, Lane::Batch];

    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Interactive => "interactive",
            Lane::Batch => "batch",
        }
    }
}

/// The tenant a request is accounted to; used for fair share inside a lane.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct TenantId(pub String);

/// Number of tokens per KV cache block.
pub const BLOCK_SIZE: usize = 16;
