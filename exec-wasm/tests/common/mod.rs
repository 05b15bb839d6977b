//! WAT modules shared by the wasm tests and benchmarks.
#![allow(dead_code)]

/// Writes `hello\n` to stdout.
pub const HELLO: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 16) "hello\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 16))
    (i32.store (i32.const 4) (i32.const 6))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;

/// Writes its arguments, then its environment, one per line.
pub const ARGS_AND_ENV: &str = r#"(module
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $esizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_get" (func $eget (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func $dump (param $buf i32) (param $len i32)
    (local $i i32)
    (block $done (loop $l
      (br_if $done (i32.ge_u (local.get $i) (local.get $len)))
      (if (i32.eqz (i32.load8_u (i32.add (local.get $buf) (local.get $i))))
        (then (i32.store8 (i32.add (local.get $buf) (local.get $i)) (i32.const 10))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $l)))
    (i32.store (i32.const 0) (local.get $buf))
    (i32.store (i32.const 4) (local.get $len))
    (drop (call $fd_write (i32.const 1) (i32.const 0) (i32.const 1) (i32.const 8))))
  (func (export "_start")
    (drop (call $sizes (i32.const 16) (i32.const 20)))
    (drop (call $get (i32.const 1024) (i32.const 4096)))
    (call $dump (i32.const 4096) (i32.load (i32.const 20)))
    (drop (call $esizes (i32.const 16) (i32.const 20)))
    (drop (call $eget (i32.const 2048) (i32.const 8192)))
    (call $dump (i32.const 8192) (i32.load (i32.const 20)))))"#;
