//! The commands that talk to a server as a user: `execute`, the management commands and
//! condition waits.

pub mod api;
pub mod execute;
pub mod follow;
pub mod joins;
pub mod manage;
pub mod recordings;
pub mod runs;
pub mod waits;
