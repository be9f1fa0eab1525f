//! A multicast member's disk in the persistent mode: the records its host
//! appends (views, received messages, deliveries), of which only those a
//! completed sync covered survive a crash (the simulator's crash is a
//! power loss: the page cache goes too). A restarted member reads its
//! restart point and the tail it may deliver from what survived.

use verbatim_core::multicast::{McastPersist, RestartPoint};
use verbatim_driver::restart::{LogRecord, RestartLog};

/// A member's multicast log.
#[derive(Clone, Debug, Default)]
pub struct McastDisk {
    records: Vec<LogRecord<Vec<u8>>>,
    /// Records `0 .. durable` are synced.
    durable: usize,
    /// The epoch of the last view record this process appended.
    view_epoch: Option<u64>,
}

impl McastDisk {
    /// Records appended so far (a sync started now covers them).
    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Nothing appended.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// A view installed (once per epoch and process).
    pub fn view(&mut self, epoch: u64, members: u64) {
        if self.view_epoch != Some(epoch) {
            self.view_epoch = Some(epoch);
            self.records.push(LogRecord::View { epoch, members });
        }
    }

    /// A received message, after its view's record.
    pub fn message(&mut self, r: &McastPersist, payload: &[u8]) {
        self.view(r.epoch, r.view);
        self.records.push(LogRecord::Message {
            epoch: r.epoch,
            sender: r.sender,
            index: r.index,
            null: r.null,
            payload: payload.to_vec(),
        });
    }

    /// A delivery; `synced` when the host syncs it before the application
    /// sees it (inside a ragged trim, or a restart's tail).
    pub fn delivered(&mut self, epoch: u64, seq: u64, synced: bool) {
        self.records.push(LogRecord::Delivered { epoch, seq });
        if synced {
            self.durable = self.records.len();
        }
    }

    /// A sync that started when `len()` was `upto` completed.
    pub fn synced(&mut self, upto: usize) {
        self.durable = self.durable.max(upto.min(self.records.len()));
    }

    /// The process died: what no sync covered is lost.
    pub fn crash(&mut self) {
        self.records.truncate(self.durable);
        self.view_epoch = None;
    }

    /// Where the log left off, and the last view's messages from the
    /// first one not delivered on (`None`: no view on disk).
    pub fn recover(&self) -> Option<(RestartPoint, RestartLog)> {
        verbatim_driver::restart::recover(self.records.iter().map(LogRecord::as_slice))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbatim_core::fabric::MemberId;

    fn m(epoch: u64, sender: u8, index: u64) -> McastPersist {
        McastPersist {
            epoch,
            view: 0b11,
            sender: MemberId(sender),
            index,
            null: false,
            len: 1,
        }
    }

    #[test]
    fn a_crash_keeps_only_what_a_sync_or_a_synced_delivery_covered() {
        let mut d = McastDisk::default();
        assert_eq!(d.recover(), None);
        d.message(&m(2, 0, 0), b"a");
        d.message(&m(2, 1, 0), b"b");
        let upto = d.len();
        d.message(&m(2, 0, 1), b"c");
        d.synced(upto);
        d.delivered(2, 0, false);
        d.crash();
        let (p, tail) = d.recover().expect("a view");
        assert_eq!((p.epoch, p.view, p.delivered), (2, 0b11, 0));
        assert_eq!(&p.persisted[..2], &[1, 1]);
        assert_eq!(tail.len(), 2);
        // A delivery synced before the application saw it survives, and
        // what it covered is no longer in the tail.
        d.delivered(2, 0, true);
        d.crash();
        let (p, tail) = d.recover().expect("a view");
        assert_eq!(p.delivered, 1);
        assert_eq!(tail.keys().copied().collect::<Vec<_>>(), vec![(1, 0)]);
    }
}
