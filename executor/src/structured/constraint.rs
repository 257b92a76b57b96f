//! One sequence's grammar state: the mask of tokens allowed next, and the
//! advance past each sampled token.

use llguidance::Matcher;
use llguidance::toktrie::SimpleVob;

/// The grammar of one sequence, advanced token by token.
#[derive(Clone)]
pub struct Constraint {
    matcher: Matcher,
    vocab_size: usize,
    /// The first mask, computed when the grammar was compiled (to refuse a
    /// grammar no token can start before the request is admitted) and handed
    /// out by the first [`Constraint::mask`] rather than computed twice.
    first: Option<Mask>,
}

impl std::fmt::Debug for Constraint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Constraint")
            .field("stopped", &self.matcher.is_stopped())
            .finish_non_exhaustive()
    }
}

/// The tokens a grammar allows at one step.
#[derive(Debug, Clone)]
pub struct Mask(SimpleVob);

impl Mask {
    pub fn allows(&self, token: u32) -> bool {
        (token as usize) < self.0.len() && self.0.is_allowed(token)
    }

    /// Sets every forbidden token's logit to minus infinity (ids past the
    /// vocabulary too).
    pub fn apply(&self, row: &mut [f32]) {
        // A word of the bitset at a time: grammars mostly allow or forbid
        // whole runs of the vocabulary.
        let (inside, past) = row.split_at_mut(self.0.len().min(row.len()));
        for (chunk, &word) in inside.chunks_mut(32).zip(self.0.as_slice()) {
            match word {
                u32::MAX => {}
                0 => chunk.fill(f32::NEG_INFINITY),
                _ => {
                    for (bit, x) in chunk.iter_mut().enumerate() {
                        if word & (1 << bit) == 0 {
                            *x = f32::NEG_INFINITY;
                        }
                    }
                }
            }
        }
        past.fill(f32::NEG_INFINITY);
    }

    /// How many tokens the mask allows.
    pub fn count(&self) -> usize {
        self.0.num_set()
    }
}

impl Constraint {
    /// A constraint whose first mask is computed now: a grammar that
    /// cannot produce its first token (a `$ref` that only refers to itself,
    /// an unsatisfiable schema, a lexer past llguidance's fuel limits) fails
    /// here, at compile time, and never reaches the engine.
    pub(super) fn new(matcher: Matcher, vocab_size: usize) -> Result<Self, String> {
        let mut c = Constraint {
            matcher,
            vocab_size,
            first: None,
        };
        let first = c.compute()?;
        if first.count() == 0 {
            return Err("no token can start an output the grammar accepts".into());
        }
        c.first = Some(first);
        Ok(c)
    }

    /// The tokens allowed next: the grammar's continuations, and the
    /// end-of-sequence token once the output is complete.
    pub fn mask(&mut self) -> Result<Mask, String> {
        match self.first.take() {
            Some(m) => Ok(m),
            None => self.compute(),
        }
    }

    fn compute(&mut self) -> Result<Mask, String> {
        self.matcher.compute_mask_or_eos().map(Mask).map_err(|e| {
            let message = first_line(&e.to_string());
            // llguidance names this case only by its stop reason (and the
            // matcher, now in its error state, no longer reports it).
            if message.contains(NO_TOKEN_STOP) {
                "no token can continue an output the grammar accepts (a `$ref` that only \
                 refers to itself, or a schema nothing satisfies)"
                    .to_string()
            } else {
                message
            }
        })
    }

    /// Advances past a sampled token. A token the mask forbade is an error
    /// (the engine never samples one).
    pub fn consume(&mut self, token: u32) -> Result<(), String> {
        if token as usize >= self.vocab_size {
            return Err(format!("token {token} is outside the grammar's vocabulary"));
        }
        self.first = None;
        self.matcher
            .consume_token(token)
            .map_err(|e| first_line(&e.to_string()))
    }

    /// Whether the output is complete and nothing can follow it: the
    /// sequence ends here as if at a stop token.
    pub fn is_finished(&self) -> bool {
        self.matcher.is_stopped()
    }
}

/// How llguidance's error reads when the mask allows no token at all:
/// the name of its stop reason, `StopReason::NoExtensionBias`.
const NO_TOKEN_STOP: &str = "NoExtensionBias";

/// llguidance appends the parser state to errors; the first line says what
/// is wrong, and the rest would echo the whole grammar (and the output so
/// far) back to the client.
pub(super) fn first_line(s: &str) -> String {
    let line = s.lines().next().unwrap_or(s).trim();
    line.chars().take(512).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_forbids_exactly_what_the_mask_does_not_allow() {
        // Whole words allowed, whole words forbidden, mixed words, a partial
        // last word, and a row longer than the vocabulary.
        let size = 32 * 5 + 7;
        let mut vob = SimpleVob::alloc(size);
        vob.allow_range(32..=63);
        for t in [0, 5, 31, 70, 101, 160, 166] {
            vob.allow_token(t);
        }
        let mask = Mask(vob);
        for row_len in [size, size + 40, 100] {
            let mut row: Vec<f32> = (0..row_len).map(|i| i as f32).collect();
            mask.apply(&mut row);
            for (id, x) in row.iter().enumerate() {
                let allowed = mask.allows(id as u32);
                assert_eq!(x.is_finite(), allowed, "token {id}");
                if allowed {
                    assert_eq!(*x, id as f32);
                }
            }
        }
        assert_eq!(mask.count(), 32 + 7);
    }
}
