//! The replica's multicast log, for Derecho's persistent mode
//! (`[multicast] persistent = true`): every message the replica receives
//! is appended here and synced before the engine counts it locally stable,
//! so a message any replica delivered is on the disk of every member of
//! its view (Derecho §3.4). Each process start, the views it installs and
//! the messages it delivers are journalled beside them (written out with
//! the next sync).
//!
//! One file per replica, `<log_dir>/mcast-<cluster>-<id>.log`, a sequence
//! of records:
//!
//! ```text
//! magic u32 | kind u8 | 0 0 0 | payload_len u32 | epoch u64 | a u64 | b u64 | payload | checksum u64
//! message (1) / null (2): a = sender, b = index in the sender's stream of the epoch
//! view (3):               a = the view's members (a bit per member id), b = 0
//! delivered (4):          a = sequence number in the epoch, b = sender << 56 | index
//! start (5):              a = the process's incarnation (epochs count from 0 again)
//! ```
//!
//! A record is whole only if its checksum matches: a crash in the middle
//! of a write leaves a torn tail, which [`read`] stops at and the next
//! process cuts off. Anything readable after an unreadable stretch is
//! corruption, not a torn tail: the log is refused.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use verbatim_core::checksum::Checksum;
use verbatim_core::fabric::MemberId;
use verbatim_core::multicast::{McastPersist, RestartPoint};
use verbatim_driver::restart::{LogRecord, RestartLog};

const MAGIC: u32 = 0x4C43_4D56; // "VMCL"
const HEADER_BYTES: usize = 4 + 4 + 4 + 8 + 8 + 8;
/// Checksum domain of a record.
const DOMAIN: u64 = 0x4D43_4C4F_4752_4543; // "MCLOGREC"

const KIND_MESSAGE: u8 = 1;
const KIND_NULL: u8 = 2;
const KIND_VIEW: u8 = 3;
const KIND_DELIVERED: u8 = 4;
const KIND_START: u8 = 5;

/// One record of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A received message (ours included), on disk before it counted.
    Message {
        /// Its epoch.
        epoch: u64,
        /// Its sender.
        sender: u8,
        /// Its index in the sender's stream of the epoch.
        index: u64,
        /// Its payload (empty for a null message).
        payload: Vec<u8>,
        /// A null message (it only takes its place in the order).
        null: bool,
    },
    /// A view installed (its epoch and members).
    View {
        /// The epoch.
        epoch: u64,
        /// Its members, a bit per member id.
        members: u64,
    },
    /// A process started appending (its epochs count from 0 again).
    Start {
        /// Its incarnation.
        incarnation: u64,
    },
    /// A message delivered, in the group's order.
    Delivered {
        /// Its epoch.
        epoch: u64,
        /// Its sequence number in the epoch.
        seq: u64,
        /// Its sender.
        sender: u8,
        /// Its index in the sender's stream.
        index: u64,
    },
}

/// The path of replica `id`'s log in `dir`, for cluster `cluster`.
pub fn path(dir: &Path, cluster: &str, id: u8) -> PathBuf {
    dir.join(format!("mcast-{cluster}-{id}.log"))
}

/// An open log, appended to by the replica's loop.
pub struct McastLog {
    file: BufWriter<File>,
    path: PathBuf,
    /// Messages written since the last sync (a sync is due before they
    /// count).
    dirty: bool,
    /// The epoch of the last view record.
    view_epoch: Option<u64>,
}

impl McastLog {
    /// Opens (creating) replica `id`'s log of `cluster` in `dir`,
    /// appending after what a previous process (incarnation
    /// `incarnation`) left. A torn end (a write a crash cut short) is cut
    /// off first, or every record after it would be unreadable; a log
    /// with whole records after an unreadable stretch is refused.
    /// Also returns what a total restart needs from what was there
    /// ([`recover`]).
    pub fn open(
        dir: &Path,
        cluster: &str,
        id: u8,
        incarnation: u64,
    ) -> std::io::Result<(McastLog, Option<Recovered>)> {
        std::fs::create_dir_all(dir)?;
        let path = path(dir, cluster, id);
        let existed = path.exists();
        let mut recovered = None;
        if existed {
            let contents = read(
                &path,
                verbatim_core::multicast::MCAST_PAYLOAD_BYTES_CAP as usize,
            )?;
            if let Some(at) = contents.readable_after_tear {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!(
                        "{}: a whole record at byte {at} follows an unreadable stretch (corruption, \
                         not a write cut short): move the file away to start a new log",
                        path.display()
                    ),
                ));
            }
            recovered = recover(&contents);
            if contents.torn_bytes > 0 {
                let f = OpenOptions::new().write(true).open(&path)?;
                let whole = f.metadata()?.len() - contents.torn_bytes as u64;
                f.set_len(whole)?;
                f.sync_all()?;
            }
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        if !existed {
            // The new file's name must survive a power loss too.
            file.sync_all()?;
            File::open(dir)?.sync_all()?;
        }
        let mut log = McastLog {
            file: BufWriter::with_capacity(1 << 16, file),
            path,
            dirty: false,
            view_epoch: None,
        };
        log.append(KIND_START, 0, incarnation, 0, &[])?;
        log.sync()?;
        Ok((log, recovered))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn append(
        &mut self,
        kind: u8,
        epoch: u64,
        a: u64,
        b: u64,
        payload: &[u8],
    ) -> std::io::Result<()> {
        let mut header = [0u8; HEADER_BYTES];
        header[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        header[4] = kind;
        header[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        header[12..20].copy_from_slice(&epoch.to_le_bytes());
        header[20..28].copy_from_slice(&a.to_le_bytes());
        header[28..36].copy_from_slice(&b.to_le_bytes());
        let sum = checksum(&header, payload);
        self.file.write_all(&header)?;
        self.file.write_all(payload)?;
        self.file.write_all(&sum.to_le_bytes())?;
        Ok(())
    }

    /// A view installed (once per epoch).
    pub fn view(&mut self, epoch: u64, members: u64) -> std::io::Result<()> {
        if self.view_epoch == Some(epoch) {
            return Ok(());
        }
        self.view_epoch = Some(epoch);
        self.append(KIND_VIEW, epoch, members, 0, &[])
    }

    /// A received message, with a view record first when its view is new
    /// to the log.
    pub fn message(&mut self, r: &McastPersist, payload: &[u8]) -> std::io::Result<()> {
        self.view(r.epoch, r.view)?;
        let kind = if r.null { KIND_NULL } else { KIND_MESSAGE };
        self.dirty = true;
        self.append(kind, r.epoch, u64::from(r.sender.0), r.index, payload)
    }

    /// A message delivered (journalled; written out with the next sync,
    /// which it does not make due: a delivery inside a ragged trim is
    /// synced by the caller before anyone sees it, see [`recover`]).
    pub fn delivered(
        &mut self,
        epoch: u64,
        seq: u64,
        sender: u8,
        index: u64,
    ) -> std::io::Result<()> {
        self.append(
            KIND_DELIVERED,
            epoch,
            seq,
            (u64::from(sender) << 56) | (index & ((1 << 56) - 1)),
            &[],
        )
    }

    /// Whether messages were written since the last sync.
    pub fn dirty(&self) -> bool {
        self.dirty
    }

    /// Writes out and syncs (`fdatasync`) what was appended.
    pub fn sync(&mut self) -> std::io::Result<()> {
        self.file.flush()?;
        self.file.get_ref().sync_data()?;
        self.dirty = false;
        Ok(())
    }
}

/// What a total restart takes from a log: where it left off (the last
/// view, what of it is on disk and delivered) and the messages of that
/// view not delivered yet, which the restart may deliver.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recovered {
    /// The restart point the engine restarts from.
    pub point: RestartPoint,
    /// The last view's messages from the first one not delivered on.
    pub tail: RestartLog,
}

/// Where a log left off, `None` if it never logged a view (the rule is
/// [`verbatim_driver::restart::recover`]'s).
pub fn recover(contents: &Contents) -> Option<Recovered> {
    let records = contents.records.iter().filter_map(|r| {
        Some(match r {
            Record::View { epoch, members } => LogRecord::View {
                epoch: *epoch,
                members: *members,
            },
            Record::Message {
                epoch,
                sender,
                index,
                payload,
                null,
            } => LogRecord::Message {
                epoch: *epoch,
                sender: MemberId(*sender),
                index: *index,
                null: *null,
                payload,
            },
            Record::Delivered { epoch, seq, .. } => LogRecord::Delivered {
                epoch: *epoch,
                seq: *seq,
            },
            Record::Start { .. } => return None,
        })
    });
    let (point, tail) = verbatim_driver::restart::recover(records)?;
    Some(Recovered { point, tail })
}

fn checksum(header: &[u8], payload: &[u8]) -> u64 {
    let mut c = Checksum::new(DOMAIN);
    c.bytes(header);
    c.bytes(payload);
    c.finish()
}

/// What [`read`] found.
#[derive(Debug, Default)]
pub struct Contents {
    /// The whole records, in order.
    pub records: Vec<Record>,
    /// Bytes after the last whole record (a write torn by a crash).
    pub torn_bytes: usize,
    /// Where a whole record starts inside those bytes, if one does: the
    /// unreadable stretch is corruption, not a torn end.
    pub readable_after_tear: Option<usize>,
}

/// Reads a log; a record of more than `payload_max` bytes, a bad magic
/// or checksum ends it (the rest counts as torn).
pub fn read(path: &Path, payload_max: usize) -> std::io::Result<Contents> {
    let mut bytes = Vec::new();
    File::open(path)?.read_to_end(&mut bytes)?;
    let mut out = Contents::default();
    let mut at = 0;
    while whole_record_at(&bytes, at, payload_max) {
        let h = &bytes[at..at + HEADER_BYTES];
        let word =
            |r: std::ops::Range<usize>| u64::from_le_bytes(h[r].try_into().expect("8 bytes"));
        let kind = h[4];
        let len = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes")) as usize;
        let payload = &bytes[at + HEADER_BYTES..at + HEADER_BYTES + len];
        let (epoch, a, b) = (word(12..20), word(20..28), word(28..36));
        let record = match kind {
            KIND_MESSAGE | KIND_NULL => Record::Message {
                epoch,
                sender: a as u8,
                index: b,
                payload: payload.to_vec(),
                null: kind == KIND_NULL,
            },
            KIND_VIEW => Record::View { epoch, members: a },
            KIND_START => Record::Start { incarnation: a },
            KIND_DELIVERED => Record::Delivered {
                epoch,
                seq: a,
                sender: (b >> 56) as u8,
                index: b & ((1 << 56) - 1),
            },
            _ => unreachable!("whole_record_at admits known kinds only"),
        };
        out.records.push(record);
        at += HEADER_BYTES + len + 8;
    }
    out.torn_bytes = bytes.len() - at;
    // A torn end holds no whole record; corruption in the middle leaves
    // whole records after it.
    out.readable_after_tear =
        (at + 1..bytes.len()).find(|&p| whole_record_at(&bytes, p, payload_max));
    Ok(out)
}

/// Whether a whole record (magic, known kind, length, checksum) starts at
/// `at`.
fn whole_record_at(bytes: &[u8], at: usize, payload_max: usize) -> bool {
    if bytes.len() - at < HEADER_BYTES + 8 {
        return false;
    }
    let h = &bytes[at..at + HEADER_BYTES];
    let len = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes")) as usize;
    u32::from_le_bytes(h[0..4].try_into().expect("4 bytes")) == MAGIC
        && (KIND_MESSAGE..=KIND_START).contains(&h[4])
        && len <= payload_max
        && bytes.len() - at >= HEADER_BYTES + len + 8
        && {
            let sum_at = at + HEADER_BYTES + len;
            u64::from_le_bytes(bytes[sum_at..sum_at + 8].try_into().expect("8 bytes"))
                == checksum(h, &bytes[at + HEADER_BYTES..sum_at])
        }
}

#[cfg(test)]
mod tests {
    use super::*;
    use verbatim_core::fabric::MAX_MEMBERS;

    fn m(index: u64, null: bool, len: usize) -> McastPersist {
        McastPersist {
            epoch: 2,
            view: 0b101,
            sender: MemberId(2),
            index,
            null,
            len,
        }
    }

    #[test]
    fn records_read_back_a_torn_tail_is_cut_off_and_corruption_refused() {
        let dir = std::env::temp_dir().join(format!("verbatim-mcast-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let mut log = McastLog::open(&dir, "c", 1, 77).unwrap().0;
        assert!(!log.dirty(), "the start record is synced at open");
        log.message(&m(0, false, 5), b"hello").unwrap();
        log.message(&m(1, true, 0), b"").unwrap();
        assert!(log.dirty());
        log.sync().unwrap();
        log.delivered(2, 7, 2, 0).unwrap();
        assert!(!log.dirty(), "a delivery record makes no sync due");
        log.view(3, 0b001).unwrap();
        log.view(3, 0b001).unwrap();
        log.sync().unwrap();
        drop(log);
        let want = vec![
            Record::Start { incarnation: 77 },
            Record::View {
                epoch: 2,
                members: 0b101,
            },
            Record::Message {
                epoch: 2,
                sender: 2,
                index: 0,
                payload: b"hello".to_vec(),
                null: false,
            },
            Record::Message {
                epoch: 2,
                sender: 2,
                index: 1,
                payload: Vec::new(),
                null: true,
            },
            Record::Delivered {
                epoch: 2,
                seq: 7,
                sender: 2,
                index: 0,
            },
            Record::View {
                epoch: 3,
                members: 0b001,
            },
        ];
        let p = path(&dir, "c", 1);
        let c = read(&p, 64).unwrap();
        assert_eq!(c.records, want);
        assert_eq!((c.torn_bytes, c.readable_after_tear), (0, None));
        // A write torn by a crash: part of a record at the end.
        let whole = std::fs::metadata(&p).unwrap().len();
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.extend_from_within(..30);
        std::fs::write(&p, &bytes).unwrap();
        let c = read(&p, 64).unwrap();
        assert_eq!(c.records, want);
        assert_eq!((c.torn_bytes, c.readable_after_tear), (30, None));
        // The next process cuts it off before it appends, so what it
        // writes reads back.
        let mut log = McastLog::open(&dir, "c", 1, 78).unwrap().0;
        log.message(&m(3, false, 2), b"xy").unwrap();
        log.sync().unwrap();
        drop(log);
        let c = read(&p, 64).unwrap();
        assert_eq!(c.torn_bytes, 0);
        assert_eq!(c.records[..want.len()], want[..]);
        assert_eq!(
            c.records[want.len()..],
            [
                Record::Start { incarnation: 78 },
                Record::View {
                    epoch: 2,
                    members: 0b101
                },
                Record::Message {
                    epoch: 2,
                    sender: 2,
                    index: 3,
                    payload: b"xy".to_vec(),
                    null: false,
                },
            ]
        );
        assert!(std::fs::metadata(&p).unwrap().len() > whole);
        // A flipped byte in the middle is corruption, not a torn end: the
        // records after it are whole, and the log is refused.
        let mut bytes = std::fs::read(&p).unwrap();
        let hello = bytes.windows(5).position(|w| w == b"hello").unwrap();
        bytes[hello + 1] ^= 1;
        std::fs::write(&p, &bytes).unwrap();
        let c = read(&p, 64).unwrap();
        assert_eq!(c.records[..], want[..2], "up to the damaged record");
        assert!(c.readable_after_tear.is_some());
        let e = McastLog::open(&dir, "c", 1, 79).err().expect("refused");
        assert!(e.to_string().contains("corruption"), "{e}");
        assert_eq!(std::fs::read(&p).unwrap(), bytes, "nothing cut or written");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn recovery_finds_the_last_view_its_messages_on_disk_and_how_far_it_was_delivered() {
        let msg = |epoch, sender, index, payload: &[u8]| Record::Message {
            epoch,
            sender,
            index,
            payload: payload.to_vec(),
            null: payload.is_empty(),
        };
        let delivered = |epoch, seq| Record::Delivered {
            epoch,
            seq,
            sender: 0,
            index: 0,
        };
        let contents = |records| Contents {
            records,
            ..Contents::default()
        };
        assert_eq!(
            recover(&contents(vec![Record::Start { incarnation: 1 }])),
            None
        );
        let r = recover(&contents(vec![
            Record::Start { incarnation: 1 },
            Record::View {
                epoch: 3,
                members: 0b111,
            },
            msg(3, 0, 0, b"old"),
            Record::View {
                epoch: 4,
                members: 0b101,
            },
            msg(4, 0, 0, b"a"),
            msg(4, 2, 0, b""),
            msg(4, 0, 1, b"b"),
            // A gap in member 2's stream: not counted.
            msg(4, 2, 5, b"x"),
            msg(4, 2, 1, b"c"),
            delivered(4, 1),
            msg(3, 1, 0, b"older epoch"),
            Record::Start { incarnation: 2 },
        ]))
        .expect("a view");
        let mut persisted = [0; MAX_MEMBERS];
        persisted[0] = 2;
        persisted[2] = 2;
        assert_eq!(
            r.point,
            RestartPoint {
                epoch: 4,
                view: 0b101,
                persisted,
                delivered: 2,
            }
        );
        // Sequence numbers 0 and 1 are delivered: the tail keeps 2 and 3.
        let kept: Vec<(u8, u64)> = r.tail.keys().copied().collect();
        assert_eq!(kept, vec![(0, 1), (2, 1)]);
        assert_eq!(r.tail[&(2, 1)], (false, b"c".to_vec()));
    }
}
