//! MacR's backup-memory replication (issue 16), checked beside what the
//! client history judges (linearizability: every acknowledged write is
//! still there after any take-over):
//!
//! * [`TakeoverAudit`]: a member that takes over serves from a store with
//!   no phantom chunk (carved, neither named nor free), no dangling entry
//!   (naming no whole item) and no conflict (a chunk named twice, or
//!   named and free): whatever prefix of its predecessor's WRITEs its copy
//!   held, recovery mended it (MacR §III-D, §III-E).
//! * [`CopyIdentity`]: backups are copies. Whenever the primary is
//!   quiescent (it just acknowledged a write, so no write of it is in
//!   flight), every member of its view holds a synced copy, and the used
//!   part of every synced member's store region is the primary's, byte
//!   for byte: a client told "done" may lose the primary at once, and any
//!   of those copies may take over.
//! * [`ReplayFailures`]: a backup never refuses a forwarded write. A
//!   replay happens only on a synced copy, so a refusal means its
//!   allocator diverged from the primary's.
//! * [`DormantBackups`]: a backup's CPU stays out of the write path: it
//!   replays no more writes than primaries forwarded in all (the
//!   zero-copy writes are placed by the primary's WRITEs alone).
//! * [`CopiesOutsideViews`]: a primary never copies its store into a
//!   member of the view it follows: a copy tears the member's store while
//!   it runs, and a member of a view may take over (the member leaves the
//!   view first and comes back synced).

use super::Violation;
use std::collections::{BTreeMap, BTreeSet};
use verbatim_core::backup::engine::{BackupLayout, CopyState};
use verbatim_core::backup::{Audit, Geometry, LINE_BYTES};

/// A member's process: its id and incarnation (an engine's counters
/// start again in a new process).
pub type Process = (usize, u64);

fn v(invariant: &'static str, time_ns: u64, detail: String) -> Violation {
    Violation {
        invariant,
        time_ns,
        detail,
    }
}

/// A member that took over serves from a mended store.
#[derive(Debug, Default)]
pub struct TakeoverAudit {
    /// Take-overs each process was last seen to have completed.
    takeovers: BTreeMap<Process, u64>,
    /// Audits run (one per take-over seen).
    pub audits: u64,
}

impl TakeoverAudit {
    /// `member`'s process `incarnation` has completed `takeovers`
    /// take-overs. When that grew since it was last seen, the member just
    /// recovered its store and serves: `audit` scans that store (a full
    /// scan, [`verbatim_core::backup::Store::audit`]), which must find no
    /// phantom, no dangling entry and no conflict.
    pub fn observe(
        &mut self,
        time_ns: u64,
        member: usize,
        incarnation: u64,
        takeovers: u64,
        audit: impl FnOnce() -> Audit,
    ) -> Option<Violation> {
        let seen = self.takeovers.entry((member, incarnation)).or_insert(0);
        if takeovers <= *seen {
            return None;
        }
        *seen = takeovers;
        self.audits += 1;
        let a = audit();
        (a.phantoms > 0 || a.dangling_entries > 0 || a.conflicts > 0).then(|| {
            v(
                "no phantom or dangling entry after a take-over",
                time_ns,
                format!(
                    "node {member} (incarnation {incarnation}) took over (its take-over {takeovers}) \
                     and serves a store with {} phantom chunk(s), {} dangling entries and {} conflict(s) \
                     ({} live chunks, {} free chunks)",
                    a.phantoms, a.dangling_entries, a.conflicts, a.live_chunks, a.free_chunks
                ),
            )
        })
    }
}

/// Where `offset` (of the store, after the mailbox) lies, for a report:
/// the structure and which one.
pub fn describe_offset(geo: &Geometry, offset: u64) -> String {
    if offset < geo.control_offset() {
        format!("the header (byte {offset})")
    } else if offset < geo.descriptor_offset(0) {
        format!("the control block (byte {})", offset - geo.control_offset())
    } else if offset < geo.slab_map_offset {
        let class = (offset - geo.descriptor_offset(0)) / LINE_BYTES;
        format!(
            "the descriptor of size class {class} (byte {})",
            (offset - geo.descriptor_offset(0)) % LINE_BYTES
        )
    } else if offset < geo.entries_offset {
        format!("the slab map (slab {})", offset - geo.slab_map_offset)
    } else if offset < geo.sessions_offset {
        let e = (offset - geo.entries_offset) / LINE_BYTES;
        format!(
            "entry {e} (byte {})",
            (offset - geo.entries_offset) % LINE_BYTES
        )
    } else if offset < geo.heap_offset {
        let s = (offset - geo.sessions_offset) / LINE_BYTES;
        format!(
            "session record {s} (byte {})",
            (offset - geo.sessions_offset) % LINE_BYTES
        )
    } else {
        let at = offset - geo.heap_offset;
        let slab_bytes = u64::from(geo.params.slab_bytes);
        format!(
            "the heap: slab {}, 64-byte unit {} (byte {})",
            at / slab_bytes,
            (at % slab_bytes) / 64,
            at % 64
        )
    }
}

/// Backups are copies of the primary's store (see the module docs).
///
/// A copy counts as the primary's only while the process the primary
/// copied it to runs: a member that restarted since holds an empty region
/// until the primary learns of it (`copy_began` records the process the
/// copy went to).
#[derive(Debug, Default)]
pub struct CopyIdentity {
    /// Per (primary process, member): the member's incarnation when the
    /// primary was last seen to begin copying to it.
    copy_began: BTreeMap<(Process, usize), u64>,
    /// Per (primary process, member): whether it was copying then.
    copying: BTreeSet<(Process, usize)>,
    /// (primary process, member process) pairs reported (a copy that
    /// differs differs at every check until it is copied anew).
    reported: BTreeSet<(Process, Process)>,
    /// Copies compared with the primary's, and bytes compared.
    pub compared: u64,
    /// See `compared`.
    pub bytes_compared: u64,
}

impl CopyIdentity {
    /// The primary process `primary` reports where each member's copy
    /// stands (`copies[m]`, `None` for itself); `incarnations[m]` is
    /// member `m`'s running process (`None`: crashed). Records the
    /// process each copy begins to.
    pub fn observe_copies(
        &mut self,
        primary: Process,
        copies: &[Option<CopyState>],
        incarnations: &[Option<u64>],
    ) {
        for (m, c) in copies.iter().enumerate() {
            let key = (primary, m);
            if matches!(c, Some(CopyState::Copying { .. })) {
                if self.copying.insert(key) {
                    // A copy began (its first WRITEs are posted to the
                    // process running now).
                    match incarnations.get(m).copied().flatten() {
                        Some(inc) => {
                            self.copy_began.insert(key, inc);
                        }
                        None => {
                            self.copy_began.remove(&key);
                        }
                    }
                }
            } else {
                self.copying.remove(&key);
            }
        }
    }

    /// The members whose copy the primary reports synced and that still
    /// run the process it was copied to: those whose region must be the
    /// primary's.
    pub fn synced_members(
        &self,
        primary: Process,
        copies: &[Option<CopyState>],
        incarnations: &[Option<u64>],
    ) -> Vec<usize> {
        copies
            .iter()
            .enumerate()
            .filter(|(m, c)| {
                **c == Some(CopyState::Synced)
                    && incarnations.get(*m).copied().flatten().is_some()
                    && self.copy_began.get(&(primary, *m)).copied()
                        == incarnations.get(*m).copied().flatten()
            })
            .map(|(m, _)| m)
            .collect()
    }

    /// The primary acknowledged a write: every member of its view
    /// (`view_members`, a bit per member id) other than itself must hold
    /// a synced copy (`copies[m]`). Reported once per primary process and
    /// member.
    pub fn acknowledged(
        &mut self,
        time_ns: u64,
        primary: Process,
        view_members: u64,
        copies: &[Option<CopyState>],
        incarnations: &[Option<u64>],
    ) -> Vec<Violation> {
        let mut out = Vec::new();
        for (m, c) in copies.iter().enumerate() {
            if m == primary.0 || view_members & (1 << m) == 0 || *c == Some(CopyState::Synced) {
                continue;
            }
            let inc = incarnations.get(m).copied().flatten().unwrap_or(u64::MAX);
            if self.reported.insert((primary, (m, inc))) {
                out.push(v(
                    "backups are copies",
                    time_ns,
                    format!(
                        "node {} (incarnation {}) acknowledged a write while node {m}, a member of its view {view_members:#b}, \
                         had no synced copy ({c:?})",
                        primary.0, primary.1
                    ),
                ));
            }
        }
        out
    }

    /// Compares `backup`'s copy with `primary`'s: the used part of the
    /// store, from the end of the mailbox (`mine` and `theirs`, both read
    /// from region offset `layout.mailbox_bytes`). Reports the first
    /// difference, where it lies, and how many bytes differ; once per
    /// (primary process, backup process).
    pub fn compare(
        &mut self,
        time_ns: u64,
        primary: Process,
        backup: Process,
        layout: &BackupLayout,
        mine: &[u8],
        theirs: &[u8],
    ) -> Option<Violation> {
        self.compared += 1;
        self.bytes_compared += mine.len() as u64;
        let first = mine
            .iter()
            .zip(theirs)
            .position(|(a, b)| a != b)
            .or_else(|| (mine.len() != theirs.len()).then(|| mine.len().min(theirs.len())))?;
        if !self.reported.insert((primary, backup)) {
            return None;
        }
        let differing = mine.iter().zip(theirs).filter(|(a, b)| a != b).count()
            + mine.len().abs_diff(theirs.len());
        let word = |b: &[u8]| {
            let at = first & !7;
            let mut w = [0u8; 8];
            let end = (at + 8).min(b.len());
            if at < end {
                w[..end - at].copy_from_slice(&b[at..end]);
            }
            u64::from_le_bytes(w)
        };
        Some(v(
            "backups are copies",
            time_ns,
            format!(
                "node {} (incarnation {}) holds a copy that differs from primary {}'s (incarnation {}) \
                 in {differing} of {} bytes of the used part; the first at store offset {first} ({}): \
                 word {:#018x} at the primary, {:#018x} at the backup",
                backup.0,
                backup.1,
                primary.0,
                primary.1,
                mine.len(),
                describe_offset(&layout.geo, first as u64),
                word(mine),
                word(theirs)
            ),
        ))
    }
}

/// A backup never refuses a forwarded write.
#[derive(Debug, Default)]
pub struct ReplayFailures {
    reported: BTreeSet<Process>,
}

impl ReplayFailures {
    /// `member`'s process `incarnation` counts `replay_failures` refused
    /// replays out of `replays`. Reported once per process.
    pub fn observe(
        &mut self,
        time_ns: u64,
        member: usize,
        incarnation: u64,
        replay_failures: u64,
        replays: u64,
    ) -> Option<Violation> {
        if replay_failures == 0 || !self.reported.insert((member, incarnation)) {
            return None;
        }
        Some(v(
            "replays never fail",
            time_ns,
            format!(
                "node {member} (incarnation {incarnation}) refused {replay_failures} of the {replays} \
                 forwarded writes it replayed: its synced copy's allocator diverged from the primary's"
            ),
        ))
    }
}

/// A backup's CPU replays only what was forwarded to it.
#[derive(Debug, Default)]
pub struct DormantBackups {
    /// Writes each process forwarded (as a primary), last seen.
    forwarded: BTreeMap<Process, u64>,
    reported: BTreeSet<Process>,
}

impl DormantBackups {
    /// `member`'s process `incarnation` has forwarded `writes_forwarded`
    /// writes to its backups' CPUs.
    pub fn forwarded(&mut self, member: usize, incarnation: u64, writes_forwarded: u64) {
        let seen = self.forwarded.entry((member, incarnation)).or_insert(0);
        *seen = (*seen).max(writes_forwarded);
    }

    /// Writes forwarded by every primary so far.
    pub fn total_forwarded(&self) -> u64 {
        self.forwarded.values().sum()
    }

    /// `member`'s process `incarnation` has replayed `replays` forwarded
    /// writes: never more than every primary forwarded in all. Reported
    /// once per process.
    pub fn replayed(
        &mut self,
        time_ns: u64,
        member: usize,
        incarnation: u64,
        replays: u64,
    ) -> Option<Violation> {
        let total = self.total_forwarded();
        if replays <= total || !self.reported.insert((member, incarnation)) {
            return None;
        }
        Some(v(
            "the backups' CPU stays dormant",
            time_ns,
            format!(
                "node {member} (incarnation {incarnation}) replayed {replays} writes, but the primaries \
                 forwarded {total} in all: a backup executed writes the primary placed with WRITEs"
            ),
        ))
    }
}

/// A primary copies only into members no view of its counts.
#[derive(Debug, Default)]
pub struct CopiesOutsideViews {
    reported: BTreeSet<(Process, usize)>,
    /// Copies seen under way (a member's copy, counted once per primary
    /// observation).
    pub copies_seen: u64,
}

impl CopiesOutsideViews {
    /// The primary process `primary` follows a view of `view_members` (a
    /// bit per member) and reports `copies` (`copies[m]`, `None` for
    /// itself). A member whose copy is under way must not be in the view.
    pub fn observe(
        &mut self,
        time_ns: u64,
        primary: Process,
        view_members: u64,
        copies: &[Option<CopyState>],
    ) -> Vec<Violation> {
        let mut out = Vec::new();
        for (m, c) in copies.iter().enumerate() {
            if !matches!(c, Some(CopyState::Copying { .. })) {
                continue;
            }
            self.copies_seen += 1;
            if view_members & (1 << m) != 0 && self.reported.insert((primary, m)) {
                out.push(v(
                    "a member of the view is never copied",
                    time_ns,
                    format!(
                        "node {} (incarnation {}) copies its store into node {m}, a member of its view \
                         {view_members:#b} ({c:?}): while the copy runs that store is torn, and the \
                         member may take over with it",
                        primary.0, primary.1
                    ),
                ));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::SimMemory;
    use verbatim_core::backup::engine::{STORE_LOCAL_REGION, STORE_REGION};
    use verbatim_core::backup::Store;
    use verbatim_core::fabric::Addr;
    use verbatim_core::kv::KvOp;
    use verbatim_core::{Config, Layout, MemberId, Memory, Mode};

    /// A small store in simulated memory, as the swarm's members hold it.
    fn store() -> (Store<SimMemory>, BackupLayout, SimMemory) {
        let mut c = Config::new(3, MemberId(0));
        c.mode = Mode::BackupMemory;
        c.lease_ns = 100_000;
        c.backup_entry_count = 64;
        c.backup_slab_bytes = 4096;
        c.backup_slab_count = 8;
        c.backup_key_bytes_max = 32;
        c.backup_value_bytes_max = 64;
        c.backup_sync_chunk_bytes = 4096;
        c.session_slot_count = 8;
        let layout = Layout::new(&c).expect("a valid configuration");
        let lay = layout.backup.expect("backup-memory mode");
        let mem = SimMemory::new(&layout);
        let s = Store::format(
            mem.clone(),
            lay.geo,
            Addr::new(STORE_REGION, lay.mailbox_bytes),
            Addr::new(STORE_LOCAL_REGION, 0),
        );
        (s, lay, mem)
    }

    fn set(s: &mut Store<SimMemory>, key: &[u8], value: &[u8], version: u64) {
        let mut scratch = [0u8; 96];
        s.apply(
            &KvOp::Set { key, value },
            version,
            Some((1, version)),
            &mut scratch,
        );
    }

    fn used(s: &Store<SimMemory>, lay: &BackupLayout, mem: &SimMemory) -> Vec<u8> {
        let mut b = vec![0u8; s.geometry().used_bytes(s.slabs_carved()) as usize];
        mem.read(Addr::new(STORE_REGION, lay.mailbox_bytes), &mut b);
        b
    }

    #[test]
    fn a_clean_store_passes_the_take_over_audit() {
        let (mut s, _, _) = store();
        set(&mut s, b"k0", b"one", 1);
        set(&mut s, b"k0", b"two", 2);
        set(&mut s, b"k1", b"three", 3);
        let mut a = TakeoverAudit::default();
        let mut scratch = [0u8; 96];
        assert!(a.observe(1, 0, 1, 1, || s.audit(&mut scratch)).is_none());
        assert_eq!(a.audits, 1);
        // No take-over since: no audit.
        assert!(a
            .observe(2, 0, 1, 1, || panic!("audited without a take-over"))
            .is_none());
        assert_eq!(a.audits, 1);
    }

    #[test]
    fn a_dangling_entry_after_a_take_over_is_caught() {
        let (mut s, lay, mem) = store();
        set(&mut s, b"k0", b"one", 1);
        // The item's value torn (the entry names an item whose checksum
        // fails): what an entry WRITEn before its item leaves behind.
        let geo = lay.geo;
        let item = lay.mailbox_bytes + geo.heap_offset + 32 + 2;
        mem.write(Addr::new(STORE_REGION, item), b"XX");
        let mut a = TakeoverAudit::default();
        let mut scratch = [0u8; 96];
        let found = a
            .observe(7, 2, 3, 1, || s.audit(&mut scratch))
            .expect("a dangling entry");
        assert_eq!(
            found.invariant,
            "no phantom or dangling entry after a take-over"
        );
        assert!(
            found.detail.contains("node 2 (incarnation 3)")
                && found.detail.contains("1 dangling entries"),
            "{}",
            found.detail
        );
    }

    #[test]
    fn a_phantom_chunk_or_a_chunk_named_and_free_after_a_take_over_is_caught() {
        // A chunk carved for a write whose entry never landed (the
        // allocator's WRITE before the crash, not the entry's), left
        // unreclaimed: a phantom.
        let (mut s, lay, mem) = store();
        set(&mut s, b"k0", b"one", 1);
        let entry = Addr::new(STORE_REGION, lay.mailbox_bytes + lay.geo.entry_offset(0));
        mem.write(entry, &[0u8; 64]);
        let mut a = TakeoverAudit::default();
        let mut scratch = [0u8; 96];
        let found = a
            .observe(3, 0, 2, 1, || s.audit(&mut scratch))
            .expect("a phantom");
        assert!(
            found.detail.contains("1 phantom chunk(s)"),
            "{}",
            found.detail
        );
        // A named chunk also on its class's free list (its descriptor's
        // free-list head names chunk 0, the item's).
        let (mut s, lay, mem) = store();
        set(&mut s, b"k0", b"one", 1);
        mem.store_u64(
            Addr::new(
                STORE_REGION,
                lay.mailbox_bytes + lay.geo.descriptor_offset(0),
            ),
            1,
        );
        let found = a
            .observe(4, 0, 2, 2, || s.audit(&mut scratch))
            .expect("a conflict");
        assert!(
            found
                .detail
                .contains("0 dangling entries and 1 conflict(s)"),
            "{}",
            found.detail
        );
    }

    fn copies(states: &[Option<CopyState>]) -> Vec<Option<CopyState>> {
        states.to_vec()
    }

    #[test]
    fn identical_copies_pass() {
        let (mut s, lay, mem) = store();
        set(&mut s, b"k0", b"one", 1);
        let mine = used(&s, &lay, &mem);
        let mut c = CopyIdentity::default();
        assert!(c.compare(1, (0, 1), (1, 1), &lay, &mine, &mine).is_none());
        assert_eq!(c.compared, 1);
        assert_eq!(c.bytes_compared, mine.len() as u64);
    }

    #[test]
    fn a_copy_that_lacks_the_last_write_is_caught() {
        // The backup holds the store before the last write (its WRITEs
        // still in flight when the client was told "done").
        let (mut s, lay, mem) = store();
        set(&mut s, b"k0", b"one", 1);
        let before = used(&s, &lay, &mem);
        set(&mut s, b"k0", b"two", 2);
        let after = used(&s, &lay, &mem);
        let mut c = CopyIdentity::default();
        let found = c
            .compare(5, (0, 1), (2, 4), &lay, &after, &before)
            .expect("a stale copy");
        assert_eq!(found.invariant, "backups are copies");
        assert!(
            found.detail.contains("node 2 (incarnation 4)") && found.detail.contains("primary 0's"),
            "{}",
            found.detail
        );
        // Reported once per pair of processes.
        assert!(c
            .compare(6, (0, 1), (2, 4), &lay, &after, &before)
            .is_none());
        // A copy shorter than the primary's used part (a slab missing).
        let mut d = CopyIdentity::default();
        assert!(d
            .compare(7, (0, 1), (2, 4), &lay, &after, &after[..after.len() - 8])
            .is_some());
    }

    #[test]
    fn offsets_name_their_structures() {
        let (_, lay, _) = store();
        let g = lay.geo;
        assert!(describe_offset(&g, 3).contains("header"));
        assert!(describe_offset(&g, 64 + 8).contains("control"));
        assert!(describe_offset(&g, g.descriptor_offset(1) + 16).contains("size class 1"));
        assert!(describe_offset(&g, g.slab_map_offset + 2).contains("slab 2"));
        assert!(describe_offset(&g, g.entry_offset(5)).contains("entry 5"));
        assert!(describe_offset(&g, g.sessions_offset + 64).contains("session record 1"));
        assert!(describe_offset(&g, g.heap_offset + 4096 + 128).contains("slab 1, 64-byte unit 2"));
    }

    #[test]
    fn only_copies_held_by_the_process_copied_to_are_judged() {
        let mut c = CopyIdentity::default();
        let p = (0, 1);
        let copying = Some(CopyState::Copying { next: 0, end: 8 });
        let incs = [Some(1), Some(1), Some(1)];
        c.observe_copies(p, &copies(&[None, copying, copying]), &incs);
        // Member 2 restarts during its copy (a new process: its region
        // is empty) and the primary, not told yet, completes the copy.
        let incs = [Some(1), Some(1), Some(2)];
        let synced = [None, Some(CopyState::Synced), Some(CopyState::Synced)];
        c.observe_copies(p, &synced, &incs);
        assert_eq!(c.synced_members(p, &synced, &incs), vec![1]);
        // Member 1 restarts once synced: not judged either.
        let incs = [Some(1), Some(2), Some(2)];
        assert!(c.synced_members(p, &synced, &incs).is_empty());
        // Copied anew, to its new process: judged again.
        c.observe_copies(p, &copies(&[None, copying, None]), &incs);
        c.observe_copies(p, &synced, &incs);
        assert_eq!(c.synced_members(p, &synced, &incs), vec![1]);
        // Another primary process never copied to them: none judged.
        assert!(c.synced_members((0, 2), &synced, &incs).is_empty());
    }

    #[test]
    fn an_acknowledgement_with_a_view_member_not_synced_is_caught() {
        let mut c = CopyIdentity::default();
        let incs = [Some(1), Some(1), Some(1)];
        let states = [
            None,
            Some(CopyState::Synced),
            Some(CopyState::Copying {
                next: 64,
                end: 4096,
            }),
        ];
        // Member 2 is outside the view: fine.
        assert!(c.acknowledged(1, (0, 1), 0b011, &states, &incs).is_empty());
        let found = c.acknowledged(2, (0, 1), 0b111, &states, &incs);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].detail.contains("node 2, a member of its view"));
        assert!(c.acknowledged(3, (0, 1), 0b111, &states, &incs).is_empty());
    }

    #[test]
    fn a_failed_replay_is_caught_once_per_process() {
        let mut r = ReplayFailures::default();
        assert!(r.observe(1, 1, 1, 0, 12).is_none());
        let found = r.observe(2, 1, 1, 1, 13).expect("a refused replay");
        assert_eq!(found.invariant, "replays never fail");
        assert!(
            found.detail.contains("refused 1 of the 13"),
            "{}",
            found.detail
        );
        assert!(r.observe(3, 1, 1, 2, 14).is_none());
        assert!(r.observe(4, 1, 2, 1, 1).is_some(), "a new process");
    }

    #[test]
    fn replays_within_what_primaries_forwarded_pass() {
        let mut d = DormantBackups::default();
        d.forwarded(0, 1, 3);
        // A later primary forwards 2 more (the first one's count stays).
        d.forwarded(1, 1, 2);
        d.forwarded(0, 1, 1);
        assert_eq!(d.total_forwarded(), 5);
        assert!(d.replayed(1, 2, 1, 5).is_none());
        assert!(d.replayed(1, 1, 2, 0).is_none());
    }

    #[test]
    fn a_backup_replaying_more_than_was_forwarded_is_caught() {
        let mut d = DormantBackups::default();
        d.forwarded(0, 1, 2);
        let found = d.replayed(9, 2, 1, 3).expect("a busy backup");
        assert_eq!(found.invariant, "the backups' CPU stays dormant");
        assert!(
            found.detail.contains("replayed 3 writes") && found.detail.contains("forwarded 2"),
            "{}",
            found.detail
        );
        assert!(d.replayed(10, 2, 1, 4).is_none(), "reported once");
    }

    #[test]
    fn a_copy_into_a_member_of_the_view_is_a_violation() {
        let mut c = CopiesOutsideViews::default();
        let copying = Some(CopyState::Copying {
            next: 64,
            end: 4096,
        });
        // Member 2 is copied while out of the view {0, 1}: fine.
        let ok = [None, Some(CopyState::Synced), copying];
        assert!(c.observe(10, (0, 0), 0b011, &ok).is_empty());
        // Member 2 is copied while the view {0, 1, 2} counts it.
        let found = c.observe(20, (0, 0), 0b111, &ok);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].invariant, "a member of the view is never copied");
        assert!(found[0].detail.contains("node 2"), "{}", found[0].detail);
        // Reported once per primary process and member.
        assert!(c.observe(30, (0, 0), 0b111, &ok).is_empty());
        assert_eq!(c.observe(40, (0, 1), 0b111, &ok).len(), 1);
        assert_eq!(c.copies_seen, 4);
    }
}
