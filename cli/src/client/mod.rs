//! The commands that talk to a server as a user: `execute`, the management commands and
//! condition waits.

pub mod api;
pub mod execute;
pub mod manage;
pub mod waits;
