//! The checked-in schemas' contract, in one test binary (each binary costs a
//! full link): the event payloads and the transport messages.

mod event_schemas;
mod transport_schemas;
