//! Spawned tasks that live as long as their owner.

use tokio::task::JoinHandle;

/// A task stopped when its owner lets go of it: a wait superseded, a watch nobody reads.
pub struct OwnedTask(pub JoinHandle<()>);

impl Drop for OwnedTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}
