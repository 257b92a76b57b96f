//! A token bucket for one tenant's tokens-per-minute quota: it holds at most
//! a minute's tokens and refills continuously, so a tenant can spend its
//! minute in a burst and then waits only for what it is short of, not for
//! a window boundary. A request reserves its prompt plus `max_tokens` up
//! front and gives back what it did not use when it ends.

use std::time::{Duration, Instant};

#[derive(Clone, Debug)]
pub struct Bucket {
    capacity: f64,
    tokens: f64,
    /// Tokens per second.
    rate: f64,
    last: Instant,
}

/// Why a reservation did not fit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Short {
    /// It would fit once the bucket refills for this long.
    Wait(Duration),
    /// It is larger than the whole bucket: it never fits.
    Never,
}

impl Bucket {
    /// A full bucket of `per_minute` tokens.
    pub fn new(per_minute: u64, now: Instant) -> Bucket {
        let capacity = per_minute.max(1) as f64;
        Bucket {
            capacity,
            tokens: capacity,
            rate: capacity / 60.0,
            last: now,
        }
    }

    /// Changes the size, keeping the share of it that is spent.
    pub fn resize(&mut self, per_minute: u64, now: Instant) {
        self.refill(now);
        let capacity = per_minute.max(1) as f64;
        if (capacity - self.capacity).abs() < f64::EPSILON {
            return;
        }
        let fill = self.tokens / self.capacity;
        self.capacity = capacity;
        self.rate = capacity / 60.0;
        self.tokens = fill * capacity;
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.capacity);
        self.last = now;
    }

    /// Takes `n` tokens, or says how long until they are there.
    pub fn take(&mut self, n: u64, now: Instant) -> Result<(), Short> {
        self.refill(now);
        let n = n as f64;
        if n > self.capacity {
            return Err(Short::Never);
        }
        if n <= self.tokens {
            self.tokens -= n;
            return Ok(());
        }
        Err(Short::Wait(Duration::from_secs_f64(
            (n - self.tokens) / self.rate,
        )))
    }

    /// Gives back `n` unused tokens.
    pub fn give_back(&mut self, n: u64, now: Instant) {
        self.refill(now);
        self.tokens = (self.tokens + n as f64).min(self.capacity);
    }

    /// Tokens available now.
    pub fn available(&mut self, now: Instant) -> u64 {
        self.refill(now);
        self.tokens.floor() as u64
    }

    pub fn capacity(&self) -> u64 {
        self.capacity as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minute_is_spent_in_a_burst_and_refills_continuously() {
        let t0 = Instant::now();
        let mut b = Bucket::new(600, t0);
        for _ in 0..6 {
            b.take(100, t0).unwrap();
        }
        // 10 tokens a second: 100 more need 10 s.
        assert_eq!(b.take(100, t0), Err(Short::Wait(Duration::from_secs(10))));
        let t5 = t0 + Duration::from_secs(5);
        match b.take(100, t5) {
            Err(Short::Wait(w)) => assert!((w.as_secs_f64() - 5.0).abs() < 1e-6, "{w:?}"),
            other => panic!("{other:?}"),
        }
        b.take(100, t0 + Duration::from_secs(10)).unwrap();
        assert_eq!(b.take(601, t0), Err(Short::Never));
    }

    #[test]
    fn unused_tokens_come_back_but_never_past_a_minute() {
        let t0 = Instant::now();
        let mut b = Bucket::new(300, t0);
        b.take(300, t0).unwrap();
        b.give_back(120, t0);
        assert_eq!(b.available(t0), 120);
        b.give_back(10_000, t0);
        assert_eq!(b.available(t0), 300);
        assert_eq!(b.available(t0 + Duration::from_secs(3600)), 300);
    }

    #[test]
    fn resizing_keeps_the_share_spent() {
        let t0 = Instant::now();
        let mut b = Bucket::new(1000, t0);
        b.take(750, t0).unwrap();
        b.resize(400, t0);
        assert_eq!(b.available(t0), 100);
        assert_eq!(b.capacity(), 400);
    }
}
