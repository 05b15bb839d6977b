//! The commands that talk to a server as a user: `execute` and the management commands.

pub mod api;
pub mod execute;
pub mod manage;
