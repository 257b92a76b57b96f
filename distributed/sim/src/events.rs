//! The simulator's virtual clock: a priority queue of timed events, popped
//! in time order (ties in the order they were scheduled, so a run is
//! deterministic). Nothing sleeps; time jumps to the next event.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::rc::Rc;

use stoker_schemas::transport::CapacityReport;

/// Virtual time in microseconds since the run began.
pub type Micros = u64;

pub const MS: Micros = 1_000;
pub const SECOND: Micros = 1_000_000;

/// What happens at an instant.
#[derive(Debug)]
pub enum Event {
    /// The next request arrives at some API instance.
    Arrival,
    /// The on/off arrival rate switches (bursty arrivals only).
    Phase,
    /// A job reaches an executor.
    JobArrives { exec: u32, req: u32 },
    /// An executor's refusal reaches the API that sent the job.
    Refused { req: u32 },
    /// An executor's step ends.
    StepEnds { exec: u32 },
    /// An executor publishes its capacity.
    Report { exec: u32 },
    /// A published report reaches one API instance.
    Deliver {
        api: u32,
        report: Rc<CapacityReport>,
    },
}

struct Item {
    at: Micros,
    seq: u64,
    event: Event,
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    /// Reversed: the heap pops the earliest.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// The event queue and the clock it drives.
#[derive(Default)]
pub struct Clock {
    heap: BinaryHeap<Item>,
    seq: u64,
    now: Micros,
}

impl Clock {
    pub fn now(&self) -> Micros {
        self.now
    }

    /// Schedules `event` `after` microseconds from now.
    pub fn after(&mut self, after: Micros, event: Event) {
        self.seq += 1;
        self.heap.push(Item {
            at: self.now + after,
            seq: self.seq,
            event,
        });
    }

    /// The next event, with the clock moved to its time.
    pub fn pop(&mut self) -> Option<Event> {
        let item = self.heap.pop()?;
        self.now = item.at;
        Some(item.event)
    }
}
