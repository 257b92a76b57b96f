//! Contract types shared across stoker processes (requests, replies, events, batch lines).
