//! Stop strings with hold-back.
//!
//! Text is streamed as it is decoded, but a suffix that could still grow into a
//! stop string is held back until it either completes the stop string (and is
//! dropped, ending the sequence) or diverges (and is released). A partial stop
//! string is therefore never streamed. With `include_stop_str_in_output`
//! (vLLM's extension) the matched stop string ends the output instead of
//! being dropped.

#[derive(Clone, Debug, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
    include: bool,
}

/// What to stream after feeding a delta.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopOutcome {
    /// Text that is safe to stream now (may be empty).
    Continue(String),
    /// A stop string matched: stream this text (the part before the match) and finish.
    Stopped(String),
}

impl StopMatcher {
    pub fn new(stops: Vec<String>) -> Self {
        StopMatcher {
            stops: stops.into_iter().filter(|s| !s.is_empty()).collect(),
            held: String::new(),
            include: false,
        }
    }

    /// Keeps the matched stop string in the output.
    pub fn including_stop(mut self, include: bool) -> Self {
        self.include = include;
        self
    }

    /// Streams `delta` and whatever was held without matching (before
    /// `min_tokens` is reached, stop strings do not end a sequence).
    pub fn push_unmatched(&mut self, delta: &str) -> String {
        let mut out = std::mem::take(&mut self.held);
        out.push_str(delta);
        out
    }

    pub fn push(&mut self, delta: &str) -> StopOutcome {
        if self.stops.is_empty() {
            return StopOutcome::Continue(delta.to_string());
        }
        self.held.push_str(delta);
        // Earliest match wins; for equal starts, the one found first.
        let hit = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s.len())))
            .min_by_key(|&(at, _)| at);
        if let Some((at, len)) = hit {
            let end = if self.include { at + len } else { at };
            let out = self.held[..end].to_string();
            self.held.clear();
            return StopOutcome::Stopped(out);
        }
        let keep = self.longest_partial_suffix();
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        StopOutcome::Continue(out)
    }

    /// Releases whatever is held (the sequence ended for another reason).
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// Length in bytes of the longest suffix of `held` that is a proper prefix
    /// of some stop string, cut at a char boundary.
    fn longest_partial_suffix(&self) -> usize {
        let mut best = 0;
        for s in &self.stops {
            let max = s.len().saturating_sub(1).min(self.held.len());
            for len in (best + 1..=max).rev() {
                let start = self.held.len() - len;
                if self.held.is_char_boundary(start) && s.starts_with(&self.held[start..]) {
                    best = len;
                    break;
                }
            }
        }
        best
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_without_stops_streams_through() {
        let mut m = StopMatcher::new(vec![]);
        assert_eq!(m.push("hello"), StopOutcome::Continue("hello".into()));
    }

    #[test]
    fn a_partial_stop_string_is_held_back_until_it_diverges() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("abc E"), StopOutcome::Continue("abc ".into()));
        assert_eq!(m.push("N"), StopOutcome::Continue("".into()));
        assert_eq!(m.push("x"), StopOutcome::Continue("ENx".into()));
    }

    #[test]
    fn a_stop_string_split_across_deltas_stops_without_streaming_it() {
        let mut m = StopMatcher::new(vec!["\n\n".into(), "STOP".into()]);
        assert_eq!(m.push("one ST"), StopOutcome::Continue("one ".into()));
        assert_eq!(m.push("OP two"), StopOutcome::Stopped("".into()));
    }

    #[test]
    fn the_earliest_stop_string_wins() {
        let mut m = StopMatcher::new(vec!["b".into(), "a".into()]);
        assert_eq!(m.push("xxab"), StopOutcome::Stopped("xx".into()));
    }

    #[test]
    fn the_matched_stop_string_can_be_kept() {
        let mut m = StopMatcher::new(vec!["b".into(), "ST".into()]).including_stop(true);
        assert_eq!(m.push("one S"), StopOutcome::Continue("one ".into()));
        assert_eq!(m.push("T two b"), StopOutcome::Stopped("ST".into()));
    }

    #[test]
    fn unmatched_pushes_release_what_was_held() {
        let mut m = StopMatcher::new(vec!["END".into()]);
        assert_eq!(m.push("a E"), StopOutcome::Continue("a ".into()));
        assert_eq!(m.push_unmatched("ND"), "END");
        assert_eq!(m.push("x"), StopOutcome::Continue("x".into()));
    }

    #[test]
    fn multibyte_text_is_cut_on_char_boundaries() {
        let mut m = StopMatcher::new(vec!["é!".into()]);
        assert_eq!(m.push("caf"), StopOutcome::Continue("caf".into()));
        assert_eq!(m.push("é"), StopOutcome::Continue("".into()));
        assert_eq!(m.push("?"), StopOutcome::Continue("é?".into()));
        assert_eq!(m.flush(), "");
    }
}
