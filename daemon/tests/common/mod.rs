//! What the daemon's integration tests share: a proxy between a daemon and its server.
#![allow(dead_code)]

pub mod proxy;

#[path = "../../../server/tests/common/postgres.rs"]
pub mod postgres;
