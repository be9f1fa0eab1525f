//! Backup-memory replication (MacR, issue 16): a key-value store whose
//! whole state lives in registered memory with a self-describing layout,
//! so that a primary can replicate it by WRITEing the bytes it changed
//! straight into the backups' copies while their CPUs stay dormant.
//!
//! This module is the store and its replication plans; the engine that
//! posts the plans, forwards what a plan cannot carry, and takes over
//! sits on top of it.
//!
//! ## The region (identical at every member, MacR §III-B)
//!
//! ```text
//! 0                 header      magic, version, geometry hash
//! 64                control     slabs carved so far
//! 128               descriptors one 64-byte line per size class
//! slab_map_offset   slab map    one byte per slab: its class + 1 (0: not carved)
//! entries_offset    entries     entry_count × 64 bytes (index metadata)
//! heap_offset       heap        slab_count × slab_bytes (items and free chunks)
//! ```
//!
//! Nothing in it is a process address: every reference is a chunk number
//! (heap offset / 64), so a bulk copy of the region is a working store at
//! the receiver (MacR §III-E1: "eliminate any process-dependent
//! information").
//!
//! * **Allocator** (a slab allocator, MacR §III-C "slab allocator"): size
//!   classes of 64 << c bytes; a slab is carved for one class when its
//!   class has no free chunk and its current slab is used up. A class's
//!   descriptor holds its free-list head (the free chunks are linked
//!   through their first word), its current slab and how far that slab is
//!   carved. It is deterministic: the same state and the same operation
//!   give the same bytes at every member, so a backup that replays an
//!   operation (the forwarded path) ends byte-identical.
//! * **Entries** (MacR's 64-byte hash-table entries): word 0 is the
//!   *commit word*, `(chunk + 1) << 32 | version & 0xFFFF_FFFF`, 0 when the
//!   entry is free; the rest (key hash, full version, item bytes) are hints
//!   that recovery checks against the item.
//! * **Items** (in a chunk): version, entry number, key and value lengths,
//!   a checksum over all of it, then the key and the value.
//! * **The index** (an open-addressed hash table from key hash to entry)
//!   and the free-entry stack live in local memory: never replicated,
//!   rebuilt from the entries on failover (MacR §III-B).
//!
//! ## The order of a write's WRITEs (MacR §III-D, with one change)
//!
//! Every write is planned as byte ranges of the region, in this order:
//! the allocator's changes for the new chunk, the new item, the entry
//! (its commit word switches the key to the new item, in one aligned
//! word), then the freeing of the old chunk (its link and its class's
//! descriptor). A DELETE clears the entry, then frees the chunk.
//!
//! Algorithm 1 of the paper updates an item *in place* after writing its
//! entry: a primary that dies between the two leaves an entry whose
//! version matches no item, which cross-validation reclaims, and the
//! key's old value, acknowledged long ago, is gone (and a WRITE torn in
//! the middle destroys both values). Here an update never overwrites the
//! item it replaces, and the entry, written after the item, is the
//! commit point: a crash after any prefix of the plan leaves either the
//! old or the new value of the key, never neither. What a crash can
//! leave behind is a chunk the allocator counts as used that no entry
//! names (a *phantom* in MacR's words); failover reclaims every such
//! chunk before the new primary serves, and [`Store::audit`], a full
//! scan, finds none afterwards.
//!
//! A WRITE's placement may be torn word by word and may become visible
//! out of order, but a connection executes WRITEs in order and what was
//! executed is placed by the time the new primary's revoke of the old
//! one's access completed (the fabrics' contract): after the revoke a
//! backup holds a prefix of the plans, the last WRITE possibly torn.
//!
//! ## Zero-copy or forwarded (MacR §III-C)
//!
//! A plan counts the allocator structures it changes that are not
//! contiguous (`alloc_ranges`). When that count is above the configured
//! threshold (a slab carved: control, slab map and descriptor), the
//! engine forwards the operation's *effect* (which entry gets which item,
//! or is cleared) to the backups' CPUs, which replay it with
//! [`Store::replay`] and reach the same bytes.

use crate::checksum::{mix64, Checksum};
use crate::fabric::Addr;
use crate::kv::{apply_write, KvOp, KvReply, KvWriteAccess};
use crate::mem::Memory;

pub mod engine;

/// Bytes of an index entry, a descriptor, the header, the control block.
pub const LINE_BYTES: u64 = 64;
/// Bytes of the smallest chunk (class 0); class `c` is `64 << c`.
pub const CHUNK_UNIT_BYTES: u64 = 64;
/// Size classes at most.
pub const CLASSES_MAX: usize = 24;
/// Bytes of an item's header in its chunk.
pub const ITEM_HEADER_BYTES: u64 = 32;
/// Ranges one write's plan holds at most (allocation: 3, item, entry,
/// free: 2, and one to spare).
pub const PLAN_RANGES_MAX: usize = 8;

const MAGIC: u64 = u64::from_le_bytes(*b"VBMSTOR1");
const LAYOUT_VERSION: u64 = 1;
const DOMAIN_ITEM: u64 = 0x4954_454D; // "ITEM"
const DOMAIN_KEY: u64 = 0x4B45_5948; // "KEYH"
const DOMAIN_GEOMETRY: u64 = 0x4745_4F4D; // "GEOM"
const DOMAIN_SESSION: u64 = 0x5345_5353; // "SESS"

/// The store's sizes, from the configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreParams {
    /// Index entries: the most keys the store holds.
    pub entry_count: u32,
    /// Bytes of a slab (a power of two, at least 4 KiB, at least the
    /// largest item's chunk).
    pub slab_bytes: u32,
    /// Slabs in the heap.
    pub slab_count: u32,
    /// Largest key.
    pub key_bytes_max: u32,
    /// Largest value.
    pub value_bytes_max: u32,
    /// Client session records (exactly-once for retried writes): one
    /// 64-byte record per slot, a client's slot chosen by its id (two
    /// clients that share a slot evict each other's record). 0: none.
    pub session_count: u32,
}

/// Why store parameters are refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreParamsError {
    /// `entry_count` is 0 or above 2^31.
    EntryCount,
    /// `slab_bytes` is not a power of two of at least 4096 bytes.
    SlabBytes,
    /// `slab_count` is 0, or the heap has 2^32 chunks or more.
    SlabCount,
    /// The largest item (header, key, value) needs a chunk larger than a
    /// slab: raise `slab_bytes` or lower the key or value limit.
    ItemLargerThanSlab,
    /// The largest key is above 65535 bytes, or a limit is 0.
    KeyOrValueLimit,
}

/// Offsets and sizes derived from [`StoreParams`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// The parameters.
    pub params: StoreParams,
    /// Size classes (chunks of 64 << c bytes, c below this).
    pub class_count: u32,
    /// Offset of the slab map.
    pub slab_map_offset: u64,
    /// Offset of entry 0.
    pub entries_offset: u64,
    /// Offset of session record 0.
    pub sessions_offset: u64,
    /// Offset of the heap.
    pub heap_offset: u64,
    /// Bytes of the replicated region.
    pub region_bytes: u64,
    /// Slots of the local index (a power of two, at least twice the
    /// entries).
    pub index_slots: u64,
    /// Offset of the live-chunk bitmap in local memory.
    pub live_offset: u64,
    /// Offset of the free-chunk bitmap in local memory.
    pub free_offset: u64,
    /// Offset of the free-entry stack in local memory.
    pub entry_stack_offset: u64,
    /// Bytes of local memory.
    pub local_bytes: u64,
}

const fn round_up(x: u64, to: u64) -> u64 {
    x.div_ceil(to) * to
}

impl StoreParams {
    /// Checks the parameters and lays the store out.
    pub fn geometry(self) -> Result<Geometry, StoreParamsError> {
        if self.entry_count == 0 || self.entry_count > 1 << 31 {
            return Err(StoreParamsError::EntryCount);
        }
        if !self.slab_bytes.is_power_of_two() || self.slab_bytes < 4096 {
            return Err(StoreParamsError::SlabBytes);
        }
        let chunks = u64::from(self.slab_count) * u64::from(self.slab_bytes) / CHUNK_UNIT_BYTES;
        if self.slab_count == 0 || chunks >= u64::from(u32::MAX) {
            return Err(StoreParamsError::SlabCount);
        }
        if self.key_bytes_max == 0 || self.key_bytes_max > 0xFFFF || self.value_bytes_max == 0 {
            return Err(StoreParamsError::KeyOrValueLimit);
        }
        let item_max =
            ITEM_HEADER_BYTES + u64::from(self.key_bytes_max) + u64::from(self.value_bytes_max);
        if item_max > u64::from(self.slab_bytes) {
            return Err(StoreParamsError::ItemLargerThanSlab);
        }
        let class_count = class_of(item_max) + 1;
        if class_count as usize > CLASSES_MAX {
            return Err(StoreParamsError::ItemLargerThanSlab);
        }
        let descriptors_offset = 2 * LINE_BYTES;
        let slab_map_offset = descriptors_offset + u64::from(class_count) * LINE_BYTES;
        let entries_offset = round_up(slab_map_offset + u64::from(self.slab_count), LINE_BYTES);
        let sessions_offset = entries_offset + u64::from(self.entry_count) * LINE_BYTES;
        let heap_offset = sessions_offset + u64::from(self.session_count) * LINE_BYTES;
        let region_bytes = heap_offset + u64::from(self.slab_count) * u64::from(self.slab_bytes);
        let index_slots = (2 * u64::from(self.entry_count)).next_power_of_two();
        let bitmap_bytes = round_up(chunks.div_ceil(8), 8);
        let live_offset = index_slots * 8;
        let free_offset = live_offset + bitmap_bytes;
        let entry_stack_offset = free_offset + bitmap_bytes;
        let local_bytes = round_up(
            entry_stack_offset + 8 + 4 * u64::from(self.entry_count),
            LINE_BYTES,
        );
        Ok(Geometry {
            params: self,
            class_count,
            slab_map_offset,
            entries_offset,
            sessions_offset,
            heap_offset,
            region_bytes,
            index_slots,
            live_offset,
            free_offset,
            entry_stack_offset,
            local_bytes,
        })
    }
}

/// The size class of an item of `bytes` (chunks of 64 << class).
pub fn class_of(bytes: u64) -> u32 {
    let units = bytes.div_ceil(CHUNK_UNIT_BYTES).max(1);
    units.next_power_of_two().trailing_zeros()
}

impl Geometry {
    /// A hash of the layout: members whose hashes differ cannot copy each
    /// other's region.
    pub fn hash(&self) -> u64 {
        let p = self.params;
        let mut c = Checksum::new(DOMAIN_GEOMETRY);
        for w in [
            LAYOUT_VERSION,
            u64::from(p.entry_count),
            u64::from(p.slab_bytes),
            u64::from(p.slab_count),
            u64::from(p.key_bytes_max),
            u64::from(p.value_bytes_max),
            u64::from(p.session_count),
        ] {
            c.word(w);
        }
        c.finish()
    }
    /// Offset of the control block.
    pub const fn control_offset(&self) -> u64 {
        LINE_BYTES
    }
    /// Offset of class `c`'s descriptor.
    pub const fn descriptor_offset(&self, class: u32) -> u64 {
        2 * LINE_BYTES + class as u64 * LINE_BYTES
    }
    /// Offset of entry `e`.
    pub const fn entry_offset(&self, entry: u32) -> u64 {
        self.entries_offset + entry as u64 * LINE_BYTES
    }
    /// Offset of the session record of `client_id` (a session count
    /// above 0).
    pub fn session_offset(&self, client_id: u64) -> u64 {
        let slot = mix64(client_id ^ DOMAIN_SESSION) % u64::from(self.params.session_count);
        self.sessions_offset + slot * LINE_BYTES
    }
    /// Offset of chunk `g` (64-byte units from the heap's start).
    pub const fn chunk_offset(&self, chunk: u32) -> u64 {
        self.heap_offset + chunk as u64 * CHUNK_UNIT_BYTES
    }
    /// Chunks of 64 bytes in a slab.
    pub const fn units_per_slab(&self) -> u64 {
        self.params.slab_bytes as u64 / CHUNK_UNIT_BYTES
    }
    /// Chunks of class `c` in one slab.
    pub const fn chunks_per_slab(&self, class: u32) -> u64 {
        self.units_per_slab() >> class
    }
    /// The slab holding chunk `g`.
    pub const fn slab_of(&self, chunk: u32) -> u32 {
        (chunk as u64 / self.units_per_slab()) as u32
    }
    /// Total 64-byte units in the heap.
    pub const fn heap_units(&self) -> u64 {
        self.params.slab_count as u64 * self.units_per_slab()
    }
    /// Offset of the used part's end: metadata, and the slabs carved.
    pub fn used_bytes(&self, slabs_carved: u32) -> u64 {
        self.heap_offset + u64::from(slabs_carved) * u64::from(self.params.slab_bytes)
    }
}

/// A byte range of the region to WRITE to every backup.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Range {
    /// Offset in the region.
    pub offset: u64,
    /// Bytes.
    pub len: u64,
}

/// The WRITEs one write operation needs, in order (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    ranges: [Range; PLAN_RANGES_MAX],
    len: u8,
    /// Allocator structures changed that are not contiguous with each
    /// other (MacR's threshold for forwarding counts these).
    pub alloc_ranges: u8,
    /// Whether the last range is an allocator change.
    last_alloc: bool,
}

impl Plan {
    /// The ranges, in the order they must be written.
    pub fn ranges(&self) -> &[Range] {
        &self.ranges[..usize::from(self.len)]
    }
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Total bytes.
    pub fn bytes(&self) -> u64 {
        self.ranges().iter().map(|r| r.len).sum()
    }
    fn push(&mut self, offset: u64, len: u64, alloc: bool) {
        let n = usize::from(self.len);
        if alloc && n > 0 && self.last_alloc && {
            let last = self.ranges[n - 1];
            last.offset + last.len == offset
        } {
            // An allocator change contiguous with the previous one: one
            // WRITE. (Only allocator changes merge: their order among
            // themselves does not matter, recovery mends the allocator.
            // An item, an entry and a free must stay separate WRITEs:
            // the words of one WRITE may land in any order.)
            self.ranges[n - 1].len += len;
            return;
        }
        assert!(n < PLAN_RANGES_MAX, "a write's plan outgrew its ranges");
        if alloc && !self.ranges[..n].iter().any(|r| r.offset == offset) {
            // A structure changed twice (a descriptor that allocates and
            // frees) counts once.
            self.alloc_ranges += 1;
        }
        self.ranges[n] = Range { offset, len };
        self.len += 1;
        self.last_alloc = alloc;
    }
}

/// What one write did to the store, for a backup to replay it (the
/// forwarded path) or for a checker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing changed (a DEL of an absent key, a failed CAS, an error).
    None,
    /// Entry `entry` now names a new item of this version (its key and
    /// value are in the primary's chunk `chunk`).
    Put {
        /// The entry.
        entry: u32,
        /// The chunk of the new item.
        chunk: u32,
        /// Its version.
        version: u64,
    },
    /// Entry `entry` was cleared and its item freed.
    Delete {
        /// The entry.
        entry: u32,
    },
}

/// A client's last write that changed the store, kept with the store
/// (exactly-once: a retry is answered from it). Written in the same plan
/// as the write, before its commit word; valid once that write committed
/// (recovery checks the newest record against the entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionRecord {
    /// The client.
    pub client_id: u64,
    /// Its request.
    pub request_id: u64,
    /// The version of the write.
    pub version: u64,
    /// What it did (recovery checks it committed).
    pub effect: Effect,
    /// Its reply.
    pub reply: KvReply,
}

const DOMAIN_RECORD: u64 = 0x5245_4344; // "RECD"

impl SessionRecord {
    fn words(&self) -> [u64; 8] {
        let (kind, entry, chunk) = match self.effect {
            Effect::None => (0u64, 0u32, 0u32),
            Effect::Put { entry, chunk, .. } => (1, entry, chunk),
            Effect::Delete { entry } => (2, entry, 0),
        };
        let r = self.reply.to_bytes();
        let mut lo = [0u8; 8];
        lo.copy_from_slice(&r[1..9]);
        let mut w = [
            self.client_id,
            self.request_id,
            self.version,
            kind | (u64::from(entry) << 8) | (u64::from(r[0]) << 40),
            u64::from(chunk),
            u64::from_le_bytes(lo),
            0,
            0,
        ];
        w[7] = crate::checksum::checksum_words(DOMAIN_RECORD, &w[..7]);
        w
    }

    fn from_words(w: &[u64; 8]) -> Option<SessionRecord> {
        if w[7] != crate::checksum::checksum_words(DOMAIN_RECORD, &w[..7]) {
            return None;
        }
        let entry = ((w[3] >> 8) & 0xFFFF_FFFF) as u32;
        let effect = match w[3] & 0xFF {
            0 => Effect::None,
            1 => Effect::Put {
                entry,
                chunk: w[4] as u32,
                version: w[2],
            },
            2 => Effect::Delete { entry },
            _ => return None,
        };
        let mut r = [0u8; KvReply::ENCODED_BYTES];
        r[0] = (w[3] >> 40) as u8;
        r[1..].copy_from_slice(&w[5].to_le_bytes());
        Some(SessionRecord {
            client_id: w[0],
            request_id: w[1],
            version: w[2],
            effect,
            reply: KvReply::from_bytes(&r)?,
        })
    }
}

/// The outcome of one write at the primary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The client's reply.
    pub reply: KvReply,
    /// What to WRITE to every backup, in order.
    pub plan: Plan,
    /// What changed.
    pub effect: Effect,
}

/// Why a replayed effect was refused (the backup's copy is not the
/// primary's: it must be filled anew).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayError {
    /// The entry number is outside the pool.
    EntryOutOfRange,
    /// The key or value is above the limits.
    TooLarge,
    /// The allocator chose another chunk than the primary's: the copies
    /// differ.
    Diverged,
    /// The heap is full here but was not at the primary.
    Full,
    /// A DELETE of an entry that is free here.
    EntryFree,
}

/// Why a region is not a store of this geometry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoverError {
    /// No header, or one of another version or geometry.
    NotFormatted,
    /// The control block names more slabs than the heap has.
    ControlCorrupt,
}

/// What failover found and mended ([`Store::recover`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Keys served afterwards.
    pub keys: u64,
    /// Entries of half-finished writes cleared (their item is not there).
    pub entries_reclaimed: u64,
    /// Entries that named the same key or chunk as a newer one.
    pub duplicates_reclaimed: u64,
    /// Chunks counted used that no entry named (phantoms), freed.
    pub chunks_reclaimed: u64,
    /// Free lists cut where a link was not a free chunk of its class.
    pub free_lists_cut: u64,
    /// Session records cleared: torn, or of the last write, which did
    /// not commit.
    pub sessions_cleared: u64,
    /// The highest item version found.
    pub version_max: u64,
}

/// A full scan's findings ([`Store::audit`]): after a recovery every
/// count but `live_chunks` and `free_chunks` must be 0.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Audit {
    /// Entries naming a valid item.
    pub live_chunks: u64,
    /// Chunks on the free lists.
    pub free_chunks: u64,
    /// Carved chunks neither named by an entry nor free (phantoms).
    pub phantoms: u64,
    /// Entries naming no valid item.
    pub dangling_entries: u64,
    /// Chunks both named and free, or named twice.
    pub conflicts: u64,
}

/// Counters of the store (status).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreCounters {
    /// Keys held.
    pub keys: u64,
    /// Slabs carved.
    pub slabs_carved: u32,
    /// Chunks in use.
    pub chunks_used: u64,
}

/// The decoded header of an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ItemHeader {
    version: u64,
    entry: u32,
    key_len: u32,
    value_len: u32,
    checksum: u64,
}

impl ItemHeader {
    fn bytes(&self) -> u64 {
        ITEM_HEADER_BYTES + u64::from(self.key_len) + u64::from(self.value_len)
    }
}

/// One class's descriptor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Descriptor {
    /// First free chunk + 1 (0: none).
    free_head: u64,
    /// Current slab + 1 (0: none).
    current_slab: u64,
    /// Chunks of the current slab handed out so far.
    carved: u64,
    /// Chunks in use.
    used: u64,
    /// Chunks on the free list.
    free: u64,
}

/// The key's hash (also the index's).
pub fn key_hash(key: &[u8]) -> u64 {
    let mut c = Checksum::new(DOMAIN_KEY);
    c.bytes(key);
    c.finish()
}

fn commit_word(chunk: u32, version: u64) -> u64 {
    ((u64::from(chunk) + 1) << 32) | (version & 0xFFFF_FFFF)
}

fn split_commit(word: u64) -> Option<(u32, u32)> {
    let chunk_plus_one = word >> 32;
    (chunk_plus_one != 0).then(|| ((chunk_plus_one - 1) as u32, word as u32))
}

/// The key-value store in registered memory (see the module docs).
///
/// `region` is the replicated region's start, `local` the start of this
/// member's local memory for the index ([`Geometry::local_bytes`]).
pub struct Store<M: Memory> {
    mem: M,
    geo: Geometry,
    region: Addr,
    local: Addr,
    /// Keys held (the index's occupancy).
    keys: u64,
    /// Free entries on the stack.
    free_entries: u64,
    /// Whether the index and entry stack match the entries (after
    /// [`Store::format`] or [`Store::recover`]): a dormant backup's are
    /// not kept.
    indexed: bool,
    /// Mutation `BackupEntryBeforeItem`.
    #[cfg(feature = "mutation-testing")]
    pub entry_before_item: bool,
}

impl<M: Memory> Store<M> {
    /// A store over memory that holds one already (a backup's copy, or
    /// memory a restarted process found): [`Store::recover`] before it
    /// serves.
    pub fn attach(mem: M, geo: Geometry, region: Addr, local: Addr) -> Store<M> {
        Store {
            mem,
            geo,
            region,
            local,
            keys: 0,
            free_entries: 0,
            indexed: false,
            #[cfg(feature = "mutation-testing")]
            entry_before_item: false,
        }
    }

    /// Formats an empty store: header, zeroed control, descriptors, slab
    /// map and entries (the heap is left as it is: nothing names it).
    pub fn format(mem: M, geo: Geometry, region: Addr, local: Addr) -> Store<M> {
        let mut s = Store::attach(mem, geo, region, local);
        let mut at = 0;
        while at < geo.heap_offset {
            s.store(at, 0);
            at += 8;
        }
        s.store(0, MAGIC);
        s.store(8, LAYOUT_VERSION);
        s.store(16, geo.hash());
        s.rebuild_local_empty();
        s
    }

    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geo
    }

    /// The memory (tests and the engine read ranges through it).
    pub fn memory(&self) -> &M {
        &self.mem
    }

    /// The region's start.
    pub fn region(&self) -> Addr {
        self.region
    }

    /// Whether the index matches the entries (the store may serve).
    pub fn indexed(&self) -> bool {
        self.indexed
    }

    /// Counters for status.
    pub fn counters(&self) -> StoreCounters {
        // (A backup's descriptors are whatever its primary last wrote,
        // torn while a copy runs: no arithmetic on them may panic.)
        let mut used = 0u64;
        for c in 0..self.geo.class_count {
            used = used.wrapping_add(self.descriptor(c).used);
        }
        StoreCounters {
            keys: self.keys,
            slabs_carved: self.slabs_carved(),
            chunks_used: used,
        }
    }

    /// The number of slabs carved (the used part of the heap).
    pub fn slabs_carved(&self) -> u32 {
        self.load(self.geo.control_offset()) as u32
    }

    // ---- raw access ----

    fn load(&self, offset: u64) -> u64 {
        self.mem.load_u64(self.region.add(offset))
    }
    fn store(&self, offset: u64, value: u64) {
        self.mem.store_u64(self.region.add(offset), value)
    }
    fn local_load(&self, offset: u64) -> u64 {
        self.mem.load_u64(self.local.add(offset))
    }
    fn local_store(&self, offset: u64, value: u64) {
        self.mem.store_u64(self.local.add(offset), value)
    }

    fn descriptor(&self, class: u32) -> Descriptor {
        let at = self.geo.descriptor_offset(class);
        Descriptor {
            free_head: self.load(at),
            current_slab: self.load(at + 8),
            carved: self.load(at + 16),
            used: self.load(at + 24),
            free: self.load(at + 32),
        }
    }
    fn set_descriptor(&self, class: u32, d: Descriptor) {
        let at = self.geo.descriptor_offset(class);
        self.store(at, d.free_head);
        self.store(at + 8, d.current_slab);
        self.store(at + 16, d.carved);
        self.store(at + 24, d.used);
        self.store(at + 32, d.free);
    }
    fn slab_class(&self, slab: u32) -> Option<u32> {
        let at = self.geo.slab_map_offset + u64::from(slab);
        let word = self.load(at & !7);
        let byte = (word >> (8 * (at & 7))) as u8;
        (byte != 0).then(|| u32::from(byte) - 1)
    }
    fn set_slab_class(&self, slab: u32, class: u32) {
        let at = self.geo.slab_map_offset + u64::from(slab);
        let mut b = [0u8; 1];
        b[0] = class as u8 + 1;
        self.mem.write(self.region.add(at), &b);
    }

    fn item_header(&self, chunk: u32) -> ItemHeader {
        let at = self.geo.chunk_offset(chunk);
        let w1 = self.load(at + 8);
        let w2 = self.load(at + 16);
        ItemHeader {
            version: self.load(at),
            entry: w1 as u32,
            key_len: (w1 >> 32) as u32,
            value_len: w2 as u32,
            checksum: self.load(at + 24),
        }
    }

    /// Whether `chunk` is a chunk start of a carved slab, and its class.
    fn chunk_class(&self, chunk: u32) -> Option<u32> {
        if u64::from(chunk) >= self.geo.heap_units() {
            return None;
        }
        let slab = self.geo.slab_of(chunk);
        if slab >= self.slabs_carved() {
            return None;
        }
        let class = self.slab_class(slab)?;
        if class >= self.geo.class_count {
            return None;
        }
        let within = u64::from(chunk) % self.geo.units_per_slab();
        within.is_multiple_of(1u64 << class).then_some(class)
    }

    /// The item in `chunk` if it is whole, belongs to `entry` and has the
    /// version's low bits (cross-validation, MacR §III-D); `scratch` holds
    /// its key and value afterwards.
    fn valid_item(
        &self,
        chunk: u32,
        entry: u32,
        version_low: u32,
        scratch: &mut [u8],
    ) -> Option<ItemHeader> {
        let class = self.chunk_class(chunk)?;
        let h = self.item_header(chunk);
        if h.version as u32 != version_low || h.entry != entry || h.version == 0 {
            return None;
        }
        let p = self.geo.params;
        if h.key_len == 0 || h.key_len > p.key_bytes_max || h.value_len > p.value_bytes_max {
            return None;
        }
        if class_of(h.bytes()) != class {
            return None;
        }
        let body = (h.key_len + h.value_len) as usize;
        if scratch.len() < body {
            return None;
        }
        let at = self.geo.chunk_offset(chunk) + ITEM_HEADER_BYTES;
        self.mem.read(self.region.add(at), &mut scratch[..body]);
        let (key, value) = scratch[..body].split_at(h.key_len as usize);
        (item_checksum(&h, key, value) == h.checksum).then_some(h)
    }

    // ---- the allocator ----

    /// Allocates a chunk of `class`, recording the structures it changed
    /// in `plan`. `None` when the heap is full (nothing changed).
    fn alloc(&mut self, class: u32, plan: &mut Plan) -> Option<u32> {
        let mut d = self.descriptor(class);
        let chunk;
        if d.free_head != 0 {
            chunk = (d.free_head - 1) as u32;
            d.free_head = self.load(self.geo.chunk_offset(chunk));
            d.free = d.free.saturating_sub(1);
        } else if d.current_slab != 0 && d.carved < self.geo.chunks_per_slab(class) {
            let slab = (d.current_slab - 1) as u32;
            chunk = (u64::from(slab) * self.geo.units_per_slab() + (d.carved << class)) as u32;
            d.carved += 1;
        } else {
            let slab = self.slabs_carved();
            if slab >= self.geo.params.slab_count {
                return None;
            }
            // A slab carved: control, slab map and descriptor change, far
            // apart (MacR's superblock case).
            self.store(self.geo.control_offset(), u64::from(slab) + 1);
            plan.push(self.geo.control_offset(), 8, true);
            self.set_slab_class(slab, class);
            plan.push(self.geo.slab_map_offset + u64::from(slab), 1, true);
            chunk = (u64::from(slab) * self.geo.units_per_slab()) as u32;
            d.current_slab = u64::from(slab) + 1;
            d.carved = 1;
        }
        d.used = d.used.wrapping_add(1);
        self.set_descriptor(class, d);
        plan.push(self.geo.descriptor_offset(class), 40, true);
        Some(chunk)
    }

    /// Frees `chunk` of `class`: links it first on its class's list.
    fn free(&mut self, chunk: u32, class: u32, plan: &mut Plan) {
        let mut d = self.descriptor(class);
        let at = self.geo.chunk_offset(chunk);
        // The link replaces the item's version, and its checksum is
        // cleared: a freed item never validates again.
        self.store(at, d.free_head);
        self.store(at + 24, 0);
        plan.push(at, 32, true);
        d.free_head = u64::from(chunk) + 1;
        d.free += 1;
        // Recovery frees phantoms, which no count held: saturate.
        d.used = d.used.saturating_sub(1);
        self.set_descriptor(class, d);
        plan.push(self.geo.descriptor_offset(class), 40, true);
    }

    // ---- entries and items ----

    fn entry_commit(&self, entry: u32) -> u64 {
        self.load(self.geo.entry_offset(entry))
    }

    /// Writes the item into `chunk`, returns its bytes.
    fn write_item(&self, chunk: u32, entry: u32, version: u64, key: &[u8], value: &[u8]) -> u64 {
        let h = ItemHeader {
            version,
            entry,
            key_len: key.len() as u32,
            value_len: value.len() as u32,
            checksum: 0,
        };
        let at = self.geo.chunk_offset(chunk);
        self.store(at, version);
        self.store(at + 8, u64::from(entry) | (u64::from(h.key_len) << 32));
        self.store(at + 16, u64::from(h.value_len));
        self.store(at + 24, item_checksum(&h, key, value));
        self.mem.write(self.region.add(at + ITEM_HEADER_BYTES), key);
        self.mem.write(
            self.region.add(at + ITEM_HEADER_BYTES + key.len() as u64),
            value,
        );
        h.bytes()
    }

    fn write_entry(&self, entry: u32, chunk: u32, version: u64, hash: u64, item_bytes: u64) {
        let at = self.geo.entry_offset(entry);
        // Hints first, the commit word last (locally it makes no
        // difference; the WRITE carries the whole line).
        self.store(at + 8, hash);
        self.store(at + 16, version);
        self.store(at + 24, item_bytes);
        self.store(at, commit_word(chunk, version));
    }

    fn clear_entry(&self, entry: u32) {
        let at = self.geo.entry_offset(entry);
        for w in 0..LINE_BYTES / 8 {
            self.store(at + 8 * w, 0);
        }
    }

    /// Puts `key = value` as `version` at `entry` (a new key when the
    /// entry is free): allocation, item, entry, then the old chunk freed.
    fn put_at(
        &mut self,
        entry: u32,
        key: &[u8],
        value: &[u8],
        version: u64,
        session: Option<u64>,
        plan: &mut Plan,
    ) -> Option<u32> {
        let bytes = ITEM_HEADER_BYTES + key.len() as u64 + value.len() as u64;
        let class = class_of(bytes);
        let old = split_commit(self.entry_commit(entry)).map(|(c, _)| c);
        let chunk = self.alloc(class, plan)?;
        let item_bytes = self.write_item(chunk, entry, version, key, value);
        #[cfg(feature = "mutation-testing")]
        if self.entry_before_item {
            self.write_entry(entry, chunk, version, key_hash(key), item_bytes);
            plan.push(self.geo.entry_offset(entry), LINE_BYTES, false);
            plan.push(self.geo.chunk_offset(chunk), item_bytes, false);
            if let Some(at) = session {
                plan.push(at, LINE_BYTES, false);
            }
            if let Some(old) = old {
                let old_class = class_of(self.item_header(old).bytes());
                self.free(old, old_class, plan);
            }
            return Some(chunk);
        }
        plan.push(self.geo.chunk_offset(chunk), item_bytes, false);
        if let Some(at) = session {
            // The client's record, before the commit word (its bytes are
            // written once the reply is known, before any WRITE posts).
            plan.push(at, LINE_BYTES, false);
        }
        self.write_entry(entry, chunk, version, key_hash(key), item_bytes);
        plan.push(self.geo.entry_offset(entry), LINE_BYTES, false);
        if let Some(old) = old {
            let old_class = class_of(self.item_header(old).bytes());
            self.free(old, old_class, plan);
        }
        Some(chunk)
    }

    /// Clears `entry` and frees its chunk.
    fn delete_at(&mut self, entry: u32, session: Option<u64>, plan: &mut Plan) -> bool {
        let Some((chunk, _)) = split_commit(self.entry_commit(entry)) else {
            return false;
        };
        let class = class_of(self.item_header(chunk).bytes());
        if let Some(at) = session {
            plan.push(at, LINE_BYTES, false);
        }
        self.clear_entry(entry);
        plan.push(self.geo.entry_offset(entry), LINE_BYTES, false);
        self.free(chunk, class, plan);
        true
    }

    // ---- the local index ----

    fn rebuild_local_empty(&mut self) {
        for s in 0..self.geo.index_slots {
            self.local_store(8 * s, 0);
        }
        // Entries pop in ascending order: pushed from the highest.
        self.free_entries = 0;
        for e in (0..self.geo.params.entry_count).rev() {
            self.push_free_entry(e);
        }
        self.keys = 0;
        self.indexed = true;
    }

    fn push_free_entry(&mut self, entry: u32) {
        let at = self.geo.entry_stack_offset + 4 * self.free_entries;
        self.mem.write(self.local.add(at), &entry.to_le_bytes());
        self.free_entries += 1;
    }

    fn pop_free_entry(&mut self) -> Option<u32> {
        if self.free_entries == 0 {
            return None;
        }
        self.free_entries -= 1;
        let mut b = [0u8; 4];
        let at = self.geo.entry_stack_offset + 4 * self.free_entries;
        self.mem.read(self.local.add(at), &mut b);
        Some(u32::from_le_bytes(b))
    }

    fn slot_home(&self, hash: u64) -> u64 {
        mix64(hash) & (self.geo.index_slots - 1)
    }

    /// Whether entry `entry` holds `key` (compared where it lies, a piece
    /// at a time).
    fn entry_has_key(&self, entry: u32, key: &[u8]) -> bool {
        let Some((chunk, _)) = split_commit(self.entry_commit(entry)) else {
            return false;
        };
        let h = self.item_header(chunk);
        if h.key_len as usize != key.len() {
            return false;
        }
        let mut at = self.geo.chunk_offset(chunk) + ITEM_HEADER_BYTES;
        let mut piece = [0u8; 64];
        for part in key.chunks(64) {
            self.mem.read(self.region.add(at), &mut piece[..part.len()]);
            if &piece[..part.len()] != part {
                return false;
            }
            at += part.len() as u64;
        }
        true
    }

    /// The entry holding `key`, and its index slot.
    fn find(&self, key: &[u8], hash: u64) -> Option<(u32, u64)> {
        let mask = self.geo.index_slots - 1;
        let mut slot = self.slot_home(hash);
        // At most every slot once: the table is never full (twice the
        // entries).
        for _ in 0..self.geo.index_slots {
            let w = self.local_load(8 * slot);
            if w == 0 {
                return None;
            }
            if w >> 32 == hash >> 32 {
                let entry = (w as u32) - 1;
                if self.entry_has_key(entry, key) {
                    return Some((entry, slot));
                }
            }
            slot = (slot + 1) & mask;
        }
        None
    }

    fn index_insert(&mut self, hash: u64, entry: u32) {
        let mask = self.geo.index_slots - 1;
        let mut slot = self.slot_home(hash);
        for _ in 0..self.geo.index_slots {
            if self.local_load(8 * slot) == 0 {
                self.local_store(8 * slot, (hash & !0xFFFF_FFFF) | (u64::from(entry) + 1));
                self.keys += 1;
                return;
            }
            slot = (slot + 1) & mask;
        }
        panic!("the index is full: it has twice the entries' slots");
    }

    /// Removes the word at `slot`, shifting the run after it back (linear
    /// probing without tombstones).
    fn index_remove(&mut self, mut slot: u64) {
        let mask = self.geo.index_slots - 1;
        let mut next = (slot + 1) & mask;
        for _ in 0..self.geo.index_slots {
            let w = self.local_load(8 * next);
            if w == 0 {
                break;
            }
            let entry = (w as u32) - 1;
            let home = self.slot_home(self.load(self.geo.entry_offset(entry) + 8));
            // Move it back if its home is not in (slot, next].
            let distance_home = next.wrapping_sub(home) & mask;
            let distance_gap = next.wrapping_sub(slot) & mask;
            if distance_home >= distance_gap {
                self.local_store(8 * slot, w);
                slot = next;
            }
            next = (next + 1) & mask;
        }
        self.local_store(8 * slot, 0);
        self.keys -= 1;
    }

    // ---- sessions ----

    fn write_session(&self, r: &SessionRecord) {
        let at = self.geo.session_offset(r.client_id);
        for (i, w) in r.words().iter().enumerate() {
            self.store(at + 8 * i as u64, *w);
        }
    }

    fn read_session_at(&self, at: u64) -> Option<SessionRecord> {
        let mut w = [0u64; 8];
        for (i, x) in w.iter_mut().enumerate() {
            *x = self.load(at + 8 * i as u64);
        }
        SessionRecord::from_words(&w)
    }

    /// The record of `client_id`'s last write, if its slot holds it.
    pub fn session(&self, client_id: u64) -> Option<SessionRecord> {
        if self.geo.params.session_count == 0 {
            return None;
        }
        self.read_session_at(self.geo.session_offset(client_id))
            .filter(|r| r.client_id == client_id)
    }

    // ---- the operations ----

    /// Copies the value of `key` into `out`; its length, `None` when
    /// absent, `Err(len)` when `out` is too small for it.
    pub fn get(&self, key: &[u8], out: &mut [u8]) -> Result<Option<usize>, usize> {
        assert!(self.indexed, "a store serves only once indexed");
        let Some((entry, _)) = self.find(key, key_hash(key)) else {
            return Ok(None);
        };
        let (chunk, _) = split_commit(self.entry_commit(entry)).expect("an indexed entry is used");
        let h = self.item_header(chunk);
        let len = h.value_len as usize;
        if out.len() < len {
            return Err(len);
        }
        let at = self.geo.chunk_offset(chunk) + ITEM_HEADER_BYTES + u64::from(h.key_len);
        self.mem.read(self.region.add(at), &mut out[..len]);
        Ok(Some(len))
    }

    /// Applies a write at the primary as `version` (increasing, never
    /// 0): the reply, the plan of WRITEs and the effect. `scratch` holds
    /// a value while INCR or CAS looks at it (value-limit bytes).
    ///
    /// With `session` (client, request) and a session count above 0, the
    /// write records the client's reply in its session slot: in the plan
    /// before the commit word, or as the whole plan of a write that
    /// changes nothing.
    pub fn apply(
        &mut self,
        op: &KvOp<'_>,
        version: u64,
        session: Option<(u64, u64)>,
        scratch: &mut [u8],
    ) -> Applied {
        assert!(self.indexed, "a store serves only once indexed");
        assert!(version != 0, "versions start at 1");
        let session_at = match session {
            Some((client, _)) if self.geo.params.session_count > 0 => {
                Some(self.geo.session_offset(client))
            }
            _ => None,
        };
        let mut w = Writer {
            store: self,
            scratch,
            version,
            session_at,
            plan: Plan::default(),
            effect: Effect::None,
        };
        let reply = apply_write(&mut w, op);
        let (mut plan, effect) = (w.plan, w.effect);
        if let (Some((client_id, request_id)), Some(at)) = (session, session_at) {
            if effect == Effect::None {
                // A write that changes nothing (a CAS that fails, a DEL of
                // an absent key, an error) records its reply too: the
                // record is its whole plan. Else a copy of the request
                // delivered again later would run anew, perhaps with
                // another outcome (a CAS that fails now may succeed then).
                plan.push(at, LINE_BYTES, false);
            }
            self.write_session(&SessionRecord {
                client_id,
                request_id,
                version,
                effect,
                reply,
            });
        }
        Applied {
            reply,
            plan,
            effect,
        }
    }

    /// Replays a forwarded effect at a backup (MacR's forwarded path): the
    /// same allocator steps as the primary's, so the same bytes. `key` and
    /// `value` are the item's for a [`Effect::Put`].
    pub fn replay(
        &mut self,
        effect: &Effect,
        key: &[u8],
        value: &[u8],
        session: Option<&SessionRecord>,
    ) -> Result<(), ReplayError> {
        let mut plan = Plan::default();
        let session_at = session
            .filter(|_| self.geo.params.session_count > 0)
            .map(|r| self.geo.session_offset(r.client_id));
        let r = self.replay_effect(effect, key, value, session_at, &mut plan);
        if let (Ok(()), Some(rec), Some(_)) = (r, session, session_at) {
            self.write_session(rec);
        }
        r
    }

    fn replay_effect(
        &mut self,
        effect: &Effect,
        key: &[u8],
        value: &[u8],
        session_at: Option<u64>,
        plan: &mut Plan,
    ) -> Result<(), ReplayError> {
        match *effect {
            Effect::None => Ok(()),
            Effect::Put {
                entry,
                chunk,
                version,
            } => {
                if entry >= self.geo.params.entry_count {
                    return Err(ReplayError::EntryOutOfRange);
                }
                let p = self.geo.params;
                if key.is_empty()
                    || key.len() > p.key_bytes_max as usize
                    || value.len() > p.value_bytes_max as usize
                {
                    return Err(ReplayError::TooLarge);
                }
                // A backup's local index is not kept: it takes the entry
                // as it finds it.
                self.indexed = false;
                match self.put_at(entry, key, value, version, session_at, plan) {
                    None => Err(ReplayError::Full),
                    Some(c) if c != chunk => Err(ReplayError::Diverged),
                    Some(_) => Ok(()),
                }
            }
            Effect::Delete { entry } => {
                if entry >= self.geo.params.entry_count {
                    return Err(ReplayError::EntryOutOfRange);
                }
                self.indexed = false;
                if self.delete_at(entry, session_at, plan) {
                    Ok(())
                } else {
                    Err(ReplayError::EntryFree)
                }
            }
        }
    }

    /// Copies the key and value of the item in `chunk` out (to forward a
    /// [`Effect::Put`]); returns (key bytes, value bytes), laid out one
    /// after the other in `out`.
    pub fn item_bytes(&self, chunk: u32, out: &mut [u8]) -> Option<(usize, usize)> {
        self.chunk_class(chunk)?;
        let h = self.item_header(chunk);
        let body = (h.key_len + h.value_len) as usize;
        if out.len() < body {
            return None;
        }
        let at = self.geo.chunk_offset(chunk) + ITEM_HEADER_BYTES;
        self.mem.read(self.region.add(at), &mut out[..body]);
        Some((h.key_len as usize, h.value_len as usize))
    }

    // ---- failover ----

    fn bit(&self, base: u64, chunk: u32) -> bool {
        let w = self.local_load(base + 8 * (u64::from(chunk) / 64));
        w >> (chunk % 64) & 1 == 1
    }
    fn set_bit(&self, base: u64, chunk: u32) {
        let at = base + 8 * (u64::from(chunk) / 64);
        self.local_store(at, self.local_load(at) | 1 << (chunk % 64));
    }
    fn clear_bitmaps(&self) {
        let words = self.geo.heap_units().div_ceil(64);
        for w in 0..words {
            self.local_store(self.geo.live_offset + 8 * w, 0);
            self.local_store(self.geo.free_offset + 8 * w, 0);
        }
    }

    /// Failover (MacR §III-E): cross-validates every entry against its
    /// item (version, entry, checksum), clears those of half-finished
    /// writes, rebuilds the index and the free-entry stack, then mends
    /// the allocator: free lists are cut where a link is not a free chunk
    /// of the class, and every carved chunk that no entry names and no
    /// free list holds (a phantom) is freed. Afterwards the store serves,
    /// and [`Store::audit`] finds nothing. Only local memory changes: the
    /// region must be copied to the backups afterwards (their copies may
    /// hold another prefix of the old primary's WRITEs).
    ///
    /// Bounded: one pass over the entries, one over each free list (at
    /// most every chunk), one over the carved chunks.
    pub fn recover(&mut self, scratch: &mut [u8]) -> Result<RecoveryReport, RecoverError> {
        if self.load(0) != MAGIC
            || self.load(8) != LAYOUT_VERSION
            || self.load(16) != self.geo.hash()
        {
            return Err(RecoverError::NotFormatted);
        }
        let carved = self.load(self.geo.control_offset());
        if carved > u64::from(self.geo.params.slab_count) {
            return Err(RecoverError::ControlCorrupt);
        }
        let mut report = RecoveryReport::default();
        for s in 0..self.geo.index_slots {
            self.local_store(8 * s, 0);
        }
        self.keys = 0;
        self.free_entries = 0;
        self.clear_bitmaps();
        // Entries: keep those whose item is whole.
        for e in 0..self.geo.params.entry_count {
            let Some((chunk, low)) = split_commit(self.entry_commit(e)) else {
                continue;
            };
            let Some(h) = self.valid_item(chunk, e, low, scratch) else {
                self.clear_entry(e);
                report.entries_reclaimed += 1;
                continue;
            };
            let key = &scratch[..h.key_len as usize];
            let hash = key_hash(key);
            // Mend the hints from the item.
            self.write_entry(e, chunk, h.version, hash, h.bytes());
            if self.bit(self.geo.live_offset, chunk) {
                // Two entries name one chunk: keep the first (cannot
                // happen with prefixes of plans; a mended store is still
                // consistent).
                self.clear_entry(e);
                report.duplicates_reclaimed += 1;
                continue;
            }
            if let Some((other, slot)) = self.find(key, hash) {
                // The same key twice: keep the newer version.
                let other_version = self.load(self.geo.entry_offset(other) + 16);
                let loser = if other_version >= h.version {
                    e
                } else {
                    self.index_remove(slot);
                    other
                };
                let (loser_chunk, _) =
                    split_commit(self.entry_commit(loser)).expect("a used entry");
                self.clear_entry(loser);
                report.duplicates_reclaimed += 1;
                if loser == e {
                    continue;
                }
                // The loser's chunk is a phantom now: unmark it, the
                // allocator pass frees it.
                let at = self.geo.live_offset + 8 * (u64::from(loser_chunk) / 64);
                self.local_store(at, self.local_load(at) & !(1 << (loser_chunk % 64)));
            }
            self.set_bit(self.geo.live_offset, chunk);
            self.index_insert(hash, e);
            report.version_max = report.version_max.max(h.version);
        }
        for e in (0..self.geo.params.entry_count).rev() {
            if self.entry_commit(e) == 0 {
                self.push_free_entry(e);
            }
        }
        self.recover_sessions(&mut report);
        // Free lists: walk each, cut where a link is not a free chunk of
        // its class (bounded by the heap's chunks).
        for class in 0..self.geo.class_count {
            let mut d = self.descriptor(class);
            if d.current_slab > carved
                || (d.current_slab != 0
                    && self.slab_class((d.current_slab - 1) as u32) != Some(class))
            {
                // A current slab that is not this class's: none (the
                // class carves a new one when it needs to).
                d.current_slab = 0;
                d.carved = 0;
            }
            d.carved = d.carved.min(self.geo.chunks_per_slab(class));
            if d.current_slab != 0 {
                // A descriptor torn between slabs may count fewer chunks
                // carved than are named: never hand a named one out again.
                let slab = (d.current_slab - 1) as u32;
                let base = u64::from(slab) * self.geo.units_per_slab();
                for k in (d.carved..self.geo.chunks_per_slab(class)).rev() {
                    if self.bit(self.geo.live_offset, (base + (k << class)) as u32) {
                        d.carved = k + 1;
                        break;
                    }
                }
            }
            let mut link_at: Option<u32> = None;
            let mut next = d.free_head;
            let mut free = 0;
            for _ in 0..=self.geo.heap_units() {
                if next == 0 {
                    break;
                }
                let chunk = next - 1;
                let ok = chunk < self.geo.heap_units()
                    && self.chunk_class(chunk as u32) == Some(class)
                    && !self.bit(self.geo.live_offset, chunk as u32)
                    && !self.bit(self.geo.free_offset, chunk as u32)
                    && self.carved_chunk(chunk as u32, class, &d);
                if !ok {
                    report.free_lists_cut += 1;
                    match link_at {
                        None => d.free_head = 0,
                        Some(prev) => self.store(self.geo.chunk_offset(prev), 0),
                    }
                    break;
                }
                let chunk = chunk as u32;
                self.set_bit(self.geo.free_offset, chunk);
                free += 1;
                link_at = Some(chunk);
                next = self.load(self.geo.chunk_offset(chunk));
            }
            d.free = free;
            self.set_descriptor(class, d);
        }
        // Phantoms: carved, not named, not free.
        for slab in 0..carved as u32 {
            let Some(class) = self.slab_class(slab) else {
                continue;
            };
            if class >= self.geo.class_count {
                continue;
            }
            let d = self.descriptor(class);
            for k in 0..self.geo.chunks_per_slab(class) {
                let chunk = (u64::from(slab) * self.geo.units_per_slab() + (k << class)) as u32;
                if !self.carved_chunk(chunk, class, &d) {
                    break;
                }
                if !self.bit(self.geo.live_offset, chunk) && !self.bit(self.geo.free_offset, chunk)
                {
                    let mut scrap = Plan::default();
                    self.free(chunk, class, &mut scrap);
                    self.set_bit(self.geo.free_offset, chunk);
                    report.chunks_reclaimed += 1;
                }
            }
        }
        // Used counts from what is named.
        for class in 0..self.geo.class_count {
            let mut d = self.descriptor(class);
            d.used = 0;
            self.set_descriptor(class, d);
        }
        for e in 0..self.geo.params.entry_count {
            if let Some((chunk, _)) = split_commit(self.entry_commit(e)) {
                let class = self.chunk_class(chunk).expect("validated above");
                let mut d = self.descriptor(class);
                d.used += 1;
                self.set_descriptor(class, d);
            }
        }
        report.keys = self.keys;
        self.indexed = true;
        Ok(report)
    }

    /// Sessions: a torn record is cleared; the newest is the last write's,
    /// which may not have committed (every older write completed its
    /// WRITEs everywhere before the next began): it is cleared unless its
    /// effect is in the entries (a retry then runs it again).
    fn recover_sessions(&mut self, report: &mut RecoveryReport) {
        let mut newest: Option<(u64, SessionRecord)> = None;
        for slot in 0..u64::from(self.geo.params.session_count) {
            let at = self.geo.sessions_offset + slot * LINE_BYTES;
            if (0..8).all(|i| self.load(at + 8 * i) == 0) {
                continue;
            }
            match self.read_session_at(at) {
                None => {
                    for i in 0..8 {
                        self.store(at + 8 * i, 0);
                    }
                    report.sessions_cleared += 1;
                }
                Some(r) => {
                    report.version_max = report.version_max.max(r.version);
                    if newest.is_none_or(|(_, n)| r.version > n.version) {
                        newest = Some((at, r));
                    }
                }
            }
        }
        let Some((at, r)) = newest else {
            return;
        };
        let count = self.geo.params.entry_count;
        let committed = match r.effect {
            Effect::Put { entry, version, .. } => {
                entry < count
                    && split_commit(self.entry_commit(entry))
                        .is_some_and(|(_, low)| low == version as u32)
                    && self.load(self.geo.entry_offset(entry) + 16) == version
            }
            Effect::Delete { entry } => entry < count && self.entry_commit(entry) == 0,
            // The record was the write's whole plan (it changed nothing):
            // whole, it committed.
            Effect::None => true,
        };
        if !committed {
            for i in 0..8 {
                self.store(at + 8 * i, 0);
            }
            report.sessions_cleared += 1;
        }
    }

    /// Whether `chunk` (of a slab of `class`) was handed out by its slab:
    /// every chunk of a slab that is not the class's current one, the
    /// first `carved` of the current one.
    fn carved_chunk(&self, chunk: u32, class: u32, d: &Descriptor) -> bool {
        let slab = self.geo.slab_of(chunk);
        if d.current_slab != u64::from(slab) + 1 {
            return true;
        }
        let k = (u64::from(chunk) % self.geo.units_per_slab()) >> class;
        k < d.carved
    }

    /// A full scan (tests, checkers, `verbatim` after failover): phantoms,
    /// dangling entries, conflicts. Uses the local bitmaps (the index is
    /// not touched).
    pub fn audit(&self, scratch: &mut [u8]) -> Audit {
        let mut a = Audit::default();
        self.clear_bitmaps();
        for e in 0..self.geo.params.entry_count {
            let Some((chunk, low)) = split_commit(self.entry_commit(e)) else {
                continue;
            };
            if self.valid_item(chunk, e, low, scratch).is_none() {
                a.dangling_entries += 1;
                continue;
            }
            if self.bit(self.geo.live_offset, chunk) {
                a.conflicts += 1;
                continue;
            }
            self.set_bit(self.geo.live_offset, chunk);
            a.live_chunks += 1;
        }
        let carved = self.slabs_carved().min(self.geo.params.slab_count);
        for class in 0..self.geo.class_count {
            let d = self.descriptor(class);
            let mut next = d.free_head;
            for _ in 0..=self.geo.heap_units() {
                if next == 0 || next > self.geo.heap_units() {
                    break;
                }
                let chunk = (next - 1) as u32;
                if self.bit(self.geo.live_offset, chunk) || self.bit(self.geo.free_offset, chunk) {
                    a.conflicts += 1;
                    break;
                }
                self.set_bit(self.geo.free_offset, chunk);
                a.free_chunks += 1;
                next = self.load(self.geo.chunk_offset(chunk));
            }
        }
        for slab in 0..carved {
            let Some(class) = self.slab_class(slab) else {
                continue;
            };
            if class >= self.geo.class_count {
                continue;
            }
            let d = self.descriptor(class);
            for k in 0..self.geo.chunks_per_slab(class) {
                let chunk = (u64::from(slab) * self.geo.units_per_slab() + (k << class)) as u32;
                if !self.carved_chunk(chunk, class, &d) {
                    break;
                }
                if !self.bit(self.geo.live_offset, chunk) && !self.bit(self.geo.free_offset, chunk)
                {
                    a.phantoms += 1;
                }
            }
        }
        a
    }

    /// Visits every key and value (a checker's view; `scratch` holds one
    /// item at a time) until `visit` returns false.
    pub fn for_each(&self, scratch: &mut [u8], visit: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        for e in 0..self.geo.params.entry_count {
            let Some((chunk, low)) = split_commit(self.entry_commit(e)) else {
                continue;
            };
            if let Some(h) = self.valid_item(chunk, e, low, scratch) {
                let k = h.key_len as usize;
                let v = h.value_len as usize;
                if !visit(&scratch[..k], &scratch[k..k + v]) {
                    return;
                }
            }
        }
    }
}

fn item_checksum(h: &ItemHeader, key: &[u8], value: &[u8]) -> u64 {
    let mut c = Checksum::new(DOMAIN_ITEM);
    c.word(h.version);
    c.word(u64::from(h.entry) | (u64::from(h.key_len) << 32));
    c.word(u64::from(h.value_len));
    c.bytes(key);
    c.bytes(value);
    c.finish()
}

/// One write at the primary: the key-value semantics over the store.
struct Writer<'a, M: Memory> {
    store: &'a mut Store<M>,
    scratch: &'a mut [u8],
    version: u64,
    session_at: Option<u64>,
    plan: Plan,
    effect: Effect,
}

impl<M: Memory> Writer<'_, M> {
    fn value<'s>(store: &Store<M>, key: &[u8], scratch: &'s mut [u8]) -> Option<&'s [u8]> {
        match store.get(key, scratch) {
            Ok(Some(len)) => Some(&scratch[..len]),
            // A value is never above the limit the scratch is sized for.
            Ok(None) | Err(_) => None,
        }
    }
}

impl<M: Memory> KvWriteAccess for Writer<'_, M> {
    fn value_equals(&mut self, key: &[u8], expected: Option<&[u8]>) -> bool {
        Writer::value(self.store, key, self.scratch) == expected
    }

    fn value_as_i64(&mut self, key: &[u8]) -> Result<Option<i64>, ()> {
        match Writer::value(self.store, key, self.scratch) {
            None => Ok(None),
            Some(v) => crate::kv::parse_i64(v).map(Some).ok_or(()),
        }
    }

    fn set(&mut self, key: &[u8], value: &[u8]) -> Result<(), ()> {
        let hash = key_hash(key);
        let (entry, fresh) = match self.store.find(key, hash) {
            Some((e, _)) => (e, false),
            None => (self.store.pop_free_entry().ok_or(())?, true),
        };
        match self.store.put_at(
            entry,
            key,
            value,
            self.version,
            self.session_at,
            &mut self.plan,
        ) {
            Some(chunk) => {
                if fresh {
                    self.store.index_insert(hash, entry);
                }
                self.effect = Effect::Put {
                    entry,
                    chunk,
                    version: self.version,
                };
                Ok(())
            }
            None => {
                if fresh {
                    self.store.push_free_entry(entry);
                }
                Err(())
            }
        }
    }

    fn del(&mut self, key: &[u8]) -> bool {
        let Some((entry, slot)) = self.store.find(key, key_hash(key)) else {
            return false;
        };
        self.store.index_remove(slot);
        let done = self.store.delete_at(entry, self.session_at, &mut self.plan);
        assert!(done, "an indexed entry is used");
        self.store.push_free_entry(entry);
        self.effect = Effect::Delete { entry };
        true
    }
}

#[cfg(test)]
mod tests;
