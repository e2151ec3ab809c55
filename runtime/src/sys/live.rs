//! The count of live PJRT objects: a `Live` inside every owning handle, for leak checks.

static LIVE: std::sync::atomic::AtomicIsize = std::sync::atomic::AtomicIsize::new(0);

/// Counts live PJRT objects: one inside every owning handle, so each count pairs with the
/// handle's `Drop`, which is where the object is destroyed.
pub(super) struct Live;

impl Live {
    pub(super) fn new() -> Live {
        LIVE.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Live
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// PJRT objects (clients, topologies, executables, buffers, events) currently owned by this
/// process through the runtime.
pub(crate) fn live_objects() -> isize {
    LIVE.load(std::sync::atomic::Ordering::SeqCst)
}
