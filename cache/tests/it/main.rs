//! Integration tests of tpuc-cache with real parts: files under /dev/shm,
//! real processes, and a real GCS emulator on 127.0.0.1.

mod concurrency;
mod keys;
mod memory;
mod remote;
mod shm;
mod support;
