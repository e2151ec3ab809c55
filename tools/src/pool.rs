//! A pool of scoped worker threads that maps a slice in parallel, results in order (`tpuc
//! compile` lowers and compiles a program's buckets on it).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Runs `work` on every item on `jobs` threads, each taking the next item not yet started, and
/// returns the results in item order. `finished(k)` runs on the worker after each item, `k`
/// counting the items finished so far.
pub fn map<T: Sync, R: Send>(
    items: &[T],
    jobs: usize,
    work: impl Fn(&T) -> R + Sync,
    finished: impl Fn(usize) + Sync,
) -> Vec<R> {
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<R>>> = items.iter().map(|_| Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(item) = items.get(i) else { break };
                let result = work(item);
                *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
                finished(done.fetch_add(1, Ordering::Relaxed) + 1);
            });
        }
    });
    slots.into_iter().map(|s| s.into_inner().unwrap_or_else(|e| e.into_inner()).expect("every item ran")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_come_back_in_order() {
        let items: Vec<u64> = (0..50).collect();
        let count = std::sync::atomic::AtomicUsize::new(0);
        let out = super::map(&items, 4, |&x| x * x, |_| {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        assert_eq!(out, items.iter().map(|x| x * x).collect::<Vec<_>>());
        assert_eq!(count.into_inner(), 50);
    }
}
