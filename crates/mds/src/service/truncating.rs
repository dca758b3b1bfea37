//! Files being shrunk. A shrinking SETATTR revokes the old capabilities,
//! cuts the objects and only then records the shorter length (so bytes
//! past it can never come back after a crash). In between, the objects
//! are already short while the namespace still gives the old length: a
//! reader on another client that asked then took the cut objects for
//! holes and read zeros nobody wrote (`cat new > f` under a reader
//! elsewhere). So requests that answer a file's length (GETATTR, STAT,
//! OPEN, GETLAYOUT) wait while a shrink of it is under way, and answer
//! the length it records.

use std::collections::HashMap;
use std::sync::Mutex;

use tokio::sync::Notify;

/// Inodes being shrunk, each with how many shrinks are under way.
#[derive(Debug, Default)]
pub struct Truncating {
    inos: Mutex<HashMap<u64, usize>>,
    done: Notify,
}

/// A shrink under way on one inode, for as long as it lives.
pub struct Shrink<'a> {
    of: &'a Truncating,
    ino: u64,
}

impl Truncating {
    /// Marks `ino` as being shrunk until the answer is dropped.
    pub fn begin(&self, ino: u64) -> Shrink<'_> {
        *self.lock().entry(ino).or_default() += 1;
        Shrink { of: self, ino }
    }

    /// Waits until no shrink of `ino` is under way.
    pub async fn wait(&self, ino: u64) {
        loop {
            let done = self.done.notified();
            tokio::pin!(done);
            // Registered before the check, so an end between the two wakes it.
            done.as_mut().enable();
            if !self.lock().contains_key(&ino) {
                return;
            }
            done.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, usize>> {
        self.inos.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Shrink<'_> {
    fn drop(&mut self) {
        let mut m = self.of.lock();
        if let Some(n) = m.get_mut(&self.ino) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.ino);
            }
        }
        drop(m);
        self.of.done.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn a_wait_lasts_exactly_as_long_as_the_shrinks_of_its_inode() {
        let t = Arc::new(Truncating::default());
        // Nothing under way: no wait.
        t.wait(5).await;
        let first = t.begin(5);
        let second = t.begin(5);
        let other = t.begin(6);
        let waiter = {
            let t = t.clone();
            tokio::spawn(async move { t.wait(5).await })
        };
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished(), "answered during a shrink");
        drop(first);
        drop(other);
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert!(!waiter.is_finished(), "answered while a second shrink ran");
        drop(second);
        tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("the wait ends when the last shrink does")
            .unwrap();
        // Another inode never waited on the first's.
        let _held = t.begin(7);
        tokio::time::timeout(Duration::from_millis(200), t.wait(8))
            .await
            .expect("an inode not being shrunk answers at once");
    }
}
