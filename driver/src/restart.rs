//! A total restart from a persistent multicast log (Derecho §3.4, "Total
//! failures"), for every host alike: the restart point and the tail a
//! log holds ([`recover`]), and the deliveries a restart tail makes from
//! it ([`tail_deliveries`]). Hosts keep their own record formats.

use std::collections::BTreeMap;
use verbatim_core::fabric::MemberId;
use verbatim_core::multicast::{McastDelivery, RestartPoint, RestartScan, RestartTail};

/// One record of a multicast log, as a host keeps or read it (`P`: the
/// payload, owned or borrowed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogRecord<P> {
    /// A view installed.
    View {
        /// Its epoch.
        epoch: u64,
        /// Its members (a bit per member id).
        members: u64,
    },
    /// A received message.
    Message {
        /// Its epoch.
        epoch: u64,
        /// Its sender.
        sender: MemberId,
        /// Its index in the sender's stream of the epoch.
        index: u64,
        /// A null message.
        null: bool,
        /// Its payload.
        payload: P,
    },
    /// A message delivered.
    Delivered {
        /// Its epoch.
        epoch: u64,
        /// Its sequence number in the epoch.
        seq: u64,
    },
}

impl<P: AsRef<[u8]>> LogRecord<P> {
    /// The record with its payload borrowed.
    pub fn as_slice(&self) -> LogRecord<&[u8]> {
        match *self {
            LogRecord::View { epoch, members } => LogRecord::View { epoch, members },
            LogRecord::Message {
                epoch,
                sender,
                index,
                null,
                ref payload,
            } => LogRecord::Message {
                epoch,
                sender,
                index,
                null,
                payload: payload.as_ref(),
            },
            LogRecord::Delivered { epoch, seq } => LogRecord::Delivered { epoch, seq },
        }
    }
}

/// The last view's messages a restart may deliver, by (sender, index):
/// whether it is a null, and its payload.
pub type RestartLog = BTreeMap<(u8, u64), (bool, Vec<u8>)>;

/// Where a log left off (see [`RestartScan`]) and its last view's
/// messages from the first one not delivered on; `None` if it holds no
/// view.
pub fn recover<P: AsRef<[u8]>>(
    records: impl IntoIterator<Item = LogRecord<P>>,
) -> Option<(RestartPoint, RestartLog)> {
    let mut scan = RestartScan::default();
    let mut tail = RestartLog::new();
    for r in records {
        match r {
            LogRecord::View { epoch, members } => {
                scan.view(epoch, members);
                tail.clear();
            }
            LogRecord::Message {
                epoch,
                sender,
                index,
                null,
                payload,
            } => {
                if scan.message(epoch, sender, index) {
                    tail.insert((sender.0, index), (null, payload.as_ref().to_vec()));
                }
            }
            LogRecord::Delivered { epoch, seq } => scan.delivered(epoch, seq),
        }
    }
    let point = scan.point()?;
    tail.retain(|&(s, index), _| point.seq_of(MemberId(s), index) >= point.delivered);
    Some((point, tail))
}

/// A delivery of a restart tail, with its payload in the log.
pub type TailDelivery<'a> = (McastDelivery, &'a [u8]);

/// The deliveries `tail` makes from `log`, in order (nulls skipped), or
/// the first message (sender, index) the log lacks.
pub fn tail_deliveries<'a>(
    tail: &RestartTail,
    log: &'a RestartLog,
) -> Result<Vec<TailDelivery<'a>>, (MemberId, u64)> {
    let mut out = Vec::new();
    for seq in tail.from..tail.to {
        let (sender, index) = tail.at_seq(seq);
        let (null, payload) = log.get(&(sender.0, index)).ok_or((sender, index))?;
        if *null {
            continue;
        }
        out.push((
            McastDelivery {
                sender,
                index,
                seq,
                epoch: tail.epoch,
                // Delivered while its epoch ends, from the cut.
                in_trim: true,
                // (Not known from a log; the sender's process is gone.)
                sender_incarnation: 0,
                len: payload.len(),
                // The persistent mode has no large messages.
                large: None,
            },
            payload.as_slice(),
        ));
    }
    Ok(out)
}
