//! # outpost-server
//!
//! The reference server: the HTTP API, the daemons' WebSocket sessions, the SQLite store and
//! the server's own executor (`cloud`), driving `outpost-core`'s dispatcher.
#![forbid(unsafe_code)]
