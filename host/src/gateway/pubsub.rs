//! The subscribers of this replica: RESP connections in subscribe mode,
//! each with the channels it follows and a bounded queue the poll loop
//! fills with the messages the multicast group delivers (issue 15).
//!
//! The poll loop never blocks on a subscriber: a connection whose queue is
//! full (it reads slower than the group delivers) is marked overflowed and
//! closed by its thread, as Redis closes a pub/sub client past its output
//! buffer limit; the client reconnects and subscribes again.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// Messages waiting for one subscriber at most.
pub const SUBSCRIBER_QUEUE_MAX: usize = 65_536;

/// A subscriber's end: the pushes to write, and whether it fell behind.
pub struct Subscription {
    /// Encoded RESP pushes, in delivery order.
    pub rx: mpsc::Receiver<Arc<[u8]>>,
    /// Set when a push did not fit in its queue: the connection must close.
    pub overflowed: Arc<AtomicBool>,
}

struct Subscriber {
    id: u64,
    channels: BTreeSet<Vec<u8>>,
    tx: mpsc::SyncSender<Arc<[u8]>>,
    overflowed: Arc<AtomicBool>,
}

/// Every subscriber of this replica.
#[derive(Default)]
pub struct Subscribers {
    inner: Mutex<Vec<Subscriber>>,
    /// Subscribers registered (one load on the poll loop's path when none).
    count: AtomicUsize,
}

impl Subscribers {
    /// Registers connection `id` with no channel yet.
    pub fn register(&self, id: u64) -> Subscription {
        let (tx, rx) = mpsc::sync_channel(SUBSCRIBER_QUEUE_MAX);
        let overflowed = Arc::new(AtomicBool::new(false));
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.retain(|s| s.id != id);
        inner.push(Subscriber {
            id,
            channels: BTreeSet::new(),
            tx,
            overflowed: overflowed.clone(),
        });
        self.count.store(inner.len(), Ordering::Release);
        Subscription { rx, overflowed }
    }

    /// Sets the channels connection `id` follows.
    pub fn set_channels(&self, id: u64, channels: &BTreeSet<Vec<u8>>) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = inner.iter_mut().find(|s| s.id == id) {
            s.channels = channels.clone();
        }
    }

    /// Forgets connection `id`.
    pub fn remove(&self, id: u64) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.retain(|s| s.id != id);
        self.count.store(inner.len(), Ordering::Release);
    }

    /// Queues a delivered message for every subscriber of `channel`;
    /// returns how many it reached.
    pub fn deliver(&self, channel: &[u8], message: &[u8]) -> u64 {
        if self.count.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let mut push = Vec::with_capacity(32 + channel.len() + message.len());
        verbatim_client::pubsub::encode_message(channel, message, &mut push);
        let push: Arc<[u8]> = push.into();
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut reached = 0;
        for s in inner.iter().filter(|s| s.channels.contains(channel)) {
            match s.tx.try_send(push.clone()) {
                Ok(()) => reached += 1,
                Err(_) => s.overflowed.store(true, Ordering::Release),
            }
        }
        reached
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_the_subscribers_of_their_channel_only() {
        let subs = Subscribers::default();
        assert_eq!(subs.deliver(b"a", b"nobody"), 0);
        let one = subs.register(1);
        let two = subs.register(2);
        subs.set_channels(1, &[b"a".to_vec()].into());
        subs.set_channels(2, &[b"a".to_vec(), b"b".to_vec()].into());
        assert_eq!(subs.deliver(b"a", b"x"), 2);
        assert_eq!(subs.deliver(b"b", b"y"), 1);
        assert_eq!(
            &*one.rx.try_recv().unwrap(),
            b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$1\r\nx\r\n"
        );
        assert!(one.rx.try_recv().is_err());
        assert_eq!(two.rx.try_iter().count(), 2);
        subs.remove(2);
        assert_eq!(subs.deliver(b"b", b"z"), 0);
    }

    #[test]
    fn a_subscriber_that_falls_behind_is_marked_not_waited_for() {
        let subs = Subscribers::default();
        let s = subs.register(7);
        subs.set_channels(7, &[b"c".to_vec()].into());
        for _ in 0..SUBSCRIBER_QUEUE_MAX {
            assert_eq!(subs.deliver(b"c", b"m"), 1);
        }
        assert!(!s.overflowed.load(Ordering::Acquire));
        assert_eq!(subs.deliver(b"c", b"m"), 0);
        assert!(s.overflowed.load(Ordering::Acquire));
    }
}
