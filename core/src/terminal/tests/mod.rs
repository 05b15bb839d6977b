//! The ring's and the relay's tests: examples first, then properties over generated streams
//! and operation sequences.

mod relay;
mod relay_flow;
mod ring;
mod ring_props;
