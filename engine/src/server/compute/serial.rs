//! The serial schedule (`--schedule serial`): one task at a time from the FIFO queue, each
//! run to completion before the next is taken, as llama.cpp's server queue does. A meta
//! query sent through the queue (`?via=queue`) waits behind a long decode; the demo and
//! the `?via=queue` comparison show exactly that.

use super::{Compute, IDLE_HEARTBEAT};
use crate::server::task::Task;
use crate::server::task_error::TaskError;
use std::sync::mpsc::{Receiver, RecvTimeoutError};

/// Heartbeat, take the next task (waking at least every [`IDLE_HEARTBEAT`] while idle),
/// run it to completion, repeat until the queue closes.
pub(super) fn run(c: &mut Compute, rx: Receiver<Task>) {
    loop {
        c.progress.heartbeat();
        match rx.recv_timeout(IDLE_HEARTBEAT) {
            Ok(task) => {
                c.dequeued(&task);
                if c.is_shutting_down() {
                    task.reject(TaskError::ShuttingDown);
                } else {
                    c.handle(task);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
}
