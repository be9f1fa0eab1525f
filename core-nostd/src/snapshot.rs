//! State-machine snapshots for recovery (DARE §3.4): a member that comes
//! back with empty memory asks a follower for a snapshot of its state
//! machine, READs it, restores it, and then reads the committed log entries
//! after it.
//!
//! A snapshot is a byte stream each service writes and reads back in its
//! own self-delimiting format (records with explicit lengths, checked
//! against the service's limits on the way in, so a corrupt or hostile
//! snapshot is refused, never trusted). It goes through a
//! [`SnapshotSink`] (the donor's snapshot region, or a buffer) and comes
//! back through a [`SnapshotSource`] (the joiner's copy of that region);
//! neither side needs to hold the whole state in one piece of memory, and
//! the core never allocates: records are staged in a caller's scratch
//! buffer as large as the largest log entry, which bounds every record a
//! service can hold.

use crate::fabric::Addr;
use crate::mem::Memory;

/// The sink has no room for more bytes: the snapshot is abandoned (the
/// configured snapshot region is too small for the state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotFull;

/// Why a snapshot could not be restored. The state machine is then in an
/// unspecified (but memory-safe) state and must be cleared before reuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreError {
    /// Bytes that are not a snapshot of this service (bad magic, unknown
    /// record tag, a length past its limit, a truncated record).
    Malformed,
    /// The store refused a record (its bound is smaller than the donor's).
    StoreFull,
}

/// How far a restore in pieces got ([`crate::sm::StateMachine::restore_some`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreProgress {
    /// The budget ran out: more records follow.
    More,
    /// The end mark was read: the state is whole.
    Done,
}

/// Where a service's restore in pieces is (kept by the service between
/// calls of [`crate::sm::StateMachine::restore_some`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RestoreCursor {
    /// The magic word is next.
    #[default]
    Start,
    /// Records (or the end mark) are next.
    Records,
    /// The end mark was read.
    Done,
}

/// A service's restore in pieces ([`crate::sm::StateMachine::restore_some`])
/// over the shape every service's snapshot has: a magic word, records each
/// begun by a tag byte, and an end tag. `cursor` keeps the place between
/// calls; `record` restores the record after its tag (and refuses a tag it
/// does not know). At least one record per call, so that every call makes
/// progress; a call stops once `budget_bytes` were read.
pub fn restore_records(
    cursor: &mut RestoreCursor,
    source: &mut dyn SnapshotSource,
    magic: u32,
    end_tag: u8,
    budget_bytes: u64,
    mut record: impl FnMut(u8, &mut dyn SnapshotSource) -> Result<(), RestoreError>,
) -> Result<RestoreProgress, RestoreError> {
    let mut source = CountingSource::new(source);
    if *cursor == RestoreCursor::Start {
        if wire::get_u32(&mut source)? != magic {
            return Err(RestoreError::Malformed);
        }
        *cursor = RestoreCursor::Records;
    }
    loop {
        if *cursor == RestoreCursor::Done {
            return Ok(RestoreProgress::Done);
        }
        let tag = wire::get_u8(&mut source)?;
        if tag == end_tag {
            *cursor = RestoreCursor::Done;
            continue;
        }
        record(tag, &mut source)?;
        if source.count() >= budget_bytes {
            return Ok(RestoreProgress::More);
        }
    }
}

/// A source that counts the bytes read through it, so that a restore in
/// pieces can stop after a budget of bytes.
pub struct CountingSource<'a> {
    inner: &'a mut dyn SnapshotSource,
    count: u64,
}

impl<'a> CountingSource<'a> {
    /// Counts from 0 what is read from `inner`.
    pub fn new(inner: &'a mut dyn SnapshotSource) -> Self {
        CountingSource { inner, count: 0 }
    }

    /// Bytes read so far.
    pub fn count(&self) -> u64 {
        self.count
    }
}

impl SnapshotSource for CountingSource<'_> {
    fn read_exact(&mut self, out: &mut [u8]) -> bool {
        let ok = self.inner.read_exact(out);
        if ok {
            self.count += out.len() as u64;
        }
        ok
    }
}

/// A source that adds every byte read through it to a running checksum,
/// so that a restore checks exactly the bytes it used (one pass over a
/// large snapshot, and nothing written between a check and the restore
/// can slip in).
pub struct ChecksummingSource<'a> {
    inner: &'a mut dyn SnapshotSource,
    checksum: &'a mut StreamChecksum,
}

impl<'a> ChecksummingSource<'a> {
    /// Reads from `inner`, continuing `checksum`.
    pub fn new(inner: &'a mut dyn SnapshotSource, checksum: &'a mut StreamChecksum) -> Self {
        ChecksummingSource { inner, checksum }
    }
}

impl SnapshotSource for ChecksummingSource<'_> {
    fn read_exact(&mut self, out: &mut [u8]) -> bool {
        let ok = self.inner.read_exact(out);
        if ok {
            self.checksum.bytes(out);
        }
        ok
    }
}

/// Where a snapshot's bytes go, in order.
pub trait SnapshotSink {
    /// Appends `bytes`.
    fn write(&mut self, bytes: &[u8]) -> Result<(), SnapshotFull>;
}

/// Where a snapshot's bytes come from, in order.
pub trait SnapshotSource {
    /// Fills `out` with the next bytes; false (and nothing consumed) when
    /// fewer than `out.len()` remain.
    fn read_exact(&mut self, out: &mut [u8]) -> bool;
}

/// A sink over a byte slice (tests, and hosts that stage a snapshot in
/// memory of their own).
pub struct SliceSink<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> SliceSink<'a> {
    /// An empty sink over `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        SliceSink { buf, len: 0 }
    }

    /// Bytes written.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl SnapshotSink for SliceSink<'_> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), SnapshotFull> {
        let end = self.len.checked_add(bytes.len()).ok_or(SnapshotFull)?;
        let dst = self.buf.get_mut(self.len..end).ok_or(SnapshotFull)?;
        dst.copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }
}

/// A source over a byte slice.
pub struct SliceSource<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> SliceSource<'a> {
    /// A source reading `bytes` from the start.
    pub fn new(bytes: &'a [u8]) -> Self {
        SliceSource { bytes, at: 0 }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }
}

impl SnapshotSource for SliceSource<'_> {
    fn read_exact(&mut self, out: &mut [u8]) -> bool {
        let Some(end) = self.at.checked_add(out.len()) else {
            return false;
        };
        let Some(src) = self.bytes.get(self.at..end) else {
            return false;
        };
        out.copy_from_slice(src);
        self.at = end;
        true
    }
}

/// The header of a snapshot region: what a donor publishes and a joiner
/// checks before and after it reads the payload.
///
/// ```text
/// 0 magic | 8 generation | 16 state | 24 apply index | 32 apply position
/// 40 term of the last applied entry | 48 sessions bytes | 56 state-machine bytes
/// 64 payload checksum | 72 header checksum        (payload from byte 128)
/// ```
///
/// The payload is the donor's session table (as it lies in its `Sessions`
/// region), then its state machine's [`crate::sm::StateMachine::snapshot`]
/// bytes, both as of `apply_index`: every entry below it applied, none
/// from it on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// The request this snapshot answers (the joiner's generation).
    pub generation: u64,
    /// Where the donor is with it.
    pub state: SnapshotState,
    /// First log index not in the snapshot.
    pub apply_index: u64,
    /// Log position just after the last entry in the snapshot.
    pub apply_pos: u64,
    /// Term of the last entry in the snapshot.
    pub last_term: u64,
    /// Bytes of the session table image.
    pub sessions_bytes: u64,
    /// Bytes of the state machine's snapshot.
    pub sm_bytes: u64,
    /// Checksum of the payload (sessions image then state machine bytes).
    pub payload_checksum: u64,
    /// The group configuration as of `apply_index` (DARE §3.4), encoded
    /// ([`crate::membership::Configuration::encode`]; the joiner decodes
    /// and validates it), and the index of its CONFIG entry (0: initial).
    pub configuration: [u8; crate::membership::CONFIGURATION_BYTES],
    /// See `configuration`.
    pub config_index: u64,
}

/// Progress of a snapshot in a donor's region.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u64)]
pub enum SnapshotState {
    /// Nothing there.
    #[default]
    Empty = 0,
    /// Being written: not to be read.
    Writing = 1,
    /// Complete and checked.
    Complete = 2,
    /// The state does not fit the region (raise `snapshot_bytes_max`).
    TooLarge = 3,
}

impl SnapshotHeader {
    /// Bytes from the start of the region to the payload.
    pub const PAYLOAD_OFFSET: u64 = 128;
    const MAGIC: u64 = u64::from_le_bytes(*b"VBSNAP02");
    const DOMAIN: u64 = 0x534E_4150_4844; // "SNAPHD"
    /// Words of the encoded header.
    pub const WORDS: usize = 12;

    /// The encoded header (its last word checks the others).
    pub fn encode(&self) -> [u64; Self::WORDS] {
        let mut w = [
            Self::MAGIC,
            self.generation,
            self.state as u64,
            self.apply_index,
            self.apply_pos,
            self.last_term,
            self.sessions_bytes,
            self.sm_bytes,
            self.payload_checksum,
            u64::from_le_bytes(self.configuration),
            self.config_index,
            0,
        ];
        w[11] = crate::checksum::checksum_words(Self::DOMAIN, &w[..11]);
        w
    }

    /// Decodes a copy; `None` for anything that is not a whole, consistent
    /// header (torn, corrupt, or never written).
    pub fn decode(w: &[u64; Self::WORDS]) -> Option<SnapshotHeader> {
        if w[0] != Self::MAGIC || crate::checksum::checksum_words(Self::DOMAIN, &w[..11]) != w[11] {
            return None;
        }
        let state = match w[2] {
            0 => SnapshotState::Empty,
            1 => SnapshotState::Writing,
            2 => SnapshotState::Complete,
            3 => SnapshotState::TooLarge,
            _ => return None,
        };
        Some(SnapshotHeader {
            generation: w[1],
            state,
            apply_index: w[3],
            apply_pos: w[4],
            last_term: w[5],
            sessions_bytes: w[6],
            sm_bytes: w[7],
            payload_checksum: w[8],
            configuration: w[9].to_le_bytes(),
            config_index: w[10],
        })
    }

    /// Bytes of the payload.
    pub fn payload_bytes(&self) -> u64 {
        self.sessions_bytes.saturating_add(self.sm_bytes)
    }
}

/// A checksum of a byte stream that does not depend on how the stream is
/// cut into calls (the donor writes records of every size, the joiner
/// checks in fixed chunks): bytes are gathered into whole words.
#[derive(Clone, Copy, Debug)]
pub struct StreamChecksum {
    words: crate::checksum::Checksum,
    pending: [u8; 8],
    pending_len: usize,
}

impl StreamChecksum {
    const DOMAIN: u64 = 0x534E_4150_504C; // "SNAPPL"

    /// An empty stream (for constant initialisers).
    pub const NEW: StreamChecksum = StreamChecksum {
        words: crate::checksum::Checksum::new(Self::DOMAIN),
        pending: [0; 8],
        pending_len: 0,
    };

    /// An empty stream.
    pub fn new() -> Self {
        Self::NEW
    }

    /// Adds bytes.
    pub fn bytes(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let take = (8 - self.pending_len).min(bytes.len());
            self.pending[self.pending_len..self.pending_len + take].copy_from_slice(&bytes[..take]);
            self.pending_len += take;
            bytes = &bytes[take..];
            if self.pending_len == 8 {
                self.words.word(u64::from_le_bytes(self.pending));
                self.pending_len = 0;
            }
        }
    }

    /// The checksum (a trailing partial word zero-padded, the length mixed
    /// in by the word checksum's own finish).
    pub fn finish(mut self) -> u64 {
        if self.pending_len > 0 {
            let mut w = [0u8; 8];
            w[..self.pending_len].copy_from_slice(&self.pending[..self.pending_len]);
            self.words.word(u64::from_le_bytes(w));
            // Distinguish the padding from real zero bytes.
            self.words.word(self.pending_len as u64);
        }
        self.words.finish()
    }
}

impl Default for StreamChecksum {
    fn default() -> Self {
        Self::new()
    }
}

/// Writes a snapshot's state-machine bytes into registered memory, from
/// `at` on, never past `end`, keeping a running checksum.
pub struct MemorySink<'m, M: Memory + ?Sized> {
    mem: &'m M,
    at: Addr,
    end: u64,
    written: u64,
    checksum: StreamChecksum,
}

impl<'m, M: Memory + ?Sized> MemorySink<'m, M> {
    /// A sink from `at` up to offset `end` of the same region, whose
    /// checksum continues `checksum`.
    pub fn new(mem: &'m M, at: Addr, end: u64, checksum: StreamChecksum) -> Self {
        MemorySink {
            mem,
            at,
            end,
            written: 0,
            checksum,
        }
    }

    /// Bytes written and the checksum so far.
    pub fn finish(self) -> (u64, u64) {
        (self.written, self.checksum.finish())
    }
}

impl<M: Memory + ?Sized> SnapshotSink for MemorySink<'_, M> {
    fn write(&mut self, bytes: &[u8]) -> Result<(), SnapshotFull> {
        let len = bytes.len() as u64;
        if self.at.offset.checked_add(len).is_none_or(|e| e > self.end) {
            return Err(SnapshotFull);
        }
        self.mem.write(self.at, bytes);
        self.checksum.bytes(bytes);
        self.at = self.at.add(len);
        self.written += len;
        Ok(())
    }
}

/// Reads snapshot bytes back out of registered memory (copies: the
/// memory is never behind a reference), at most `len` of them.
pub struct MemorySource<'m, M: Memory + ?Sized> {
    mem: &'m M,
    at: Addr,
    left: u64,
}

impl<'m, M: Memory + ?Sized> MemorySource<'m, M> {
    /// `len` bytes from `at`.
    pub fn new(mem: &'m M, at: Addr, len: u64) -> Self {
        MemorySource { mem, at, left: len }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> u64 {
        self.left
    }
}

impl<M: Memory + ?Sized> SnapshotSource for MemorySource<'_, M> {
    fn read_exact(&mut self, out: &mut [u8]) -> bool {
        let len = out.len() as u64;
        if len > self.left {
            return false;
        }
        self.mem.read(self.at, out);
        self.at = self.at.add(len);
        self.left -= len;
        true
    }
}

/// Little-endian record fields, shared by the services' formats.
pub mod wire {
    use super::{RestoreError, SnapshotFull, SnapshotSink, SnapshotSource};

    /// Writes a `u8`.
    pub fn put_u8(s: &mut dyn SnapshotSink, v: u8) -> Result<(), SnapshotFull> {
        s.write(&[v])
    }
    /// Writes a `u16`.
    pub fn put_u16(s: &mut dyn SnapshotSink, v: u16) -> Result<(), SnapshotFull> {
        s.write(&v.to_le_bytes())
    }
    /// Writes a `u32`.
    pub fn put_u32(s: &mut dyn SnapshotSink, v: u32) -> Result<(), SnapshotFull> {
        s.write(&v.to_le_bytes())
    }
    /// Writes a `u64`.
    pub fn put_u64(s: &mut dyn SnapshotSink, v: u64) -> Result<(), SnapshotFull> {
        s.write(&v.to_le_bytes())
    }
    /// Reads a `u8`.
    pub fn get_u8(s: &mut dyn SnapshotSource) -> Result<u8, RestoreError> {
        let mut b = [0u8; 1];
        s.read_exact(&mut b)
            .then_some(b[0])
            .ok_or(RestoreError::Malformed)
    }
    /// Reads a `u16`.
    pub fn get_u16(s: &mut dyn SnapshotSource) -> Result<u16, RestoreError> {
        let mut b = [0u8; 2];
        s.read_exact(&mut b)
            .then(|| u16::from_le_bytes(b))
            .ok_or(RestoreError::Malformed)
    }
    /// Reads a `u32`.
    pub fn get_u32(s: &mut dyn SnapshotSource) -> Result<u32, RestoreError> {
        let mut b = [0u8; 4];
        s.read_exact(&mut b)
            .then(|| u32::from_le_bytes(b))
            .ok_or(RestoreError::Malformed)
    }
    /// Reads a `u64`.
    pub fn get_u64(s: &mut dyn SnapshotSource) -> Result<u64, RestoreError> {
        let mut b = [0u8; 8];
        s.read_exact(&mut b)
            .then(|| u64::from_le_bytes(b))
            .ok_or(RestoreError::Malformed)
    }
    /// Reads `len` bytes into the front of `scratch` (refused when longer
    /// than `max` or than the scratch buffer); returns them.
    pub fn get_bytes<'s>(
        s: &mut dyn SnapshotSource,
        len: usize,
        max: usize,
        scratch: &'s mut [u8],
    ) -> Result<&'s mut [u8], RestoreError> {
        if len > max {
            return Err(RestoreError::Malformed);
        }
        let dst = scratch.get_mut(..len).ok_or(RestoreError::Malformed)?;
        if s.read_exact(dst) {
            Ok(dst)
        } else {
            Err(RestoreError::Malformed)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::fabric::{MemberId, RegionId};
    use crate::layout::Layout;
    use crate::test_memory::TestMemory;

    #[test]
    fn a_stream_checksum_does_not_depend_on_how_the_stream_is_cut() {
        let bytes: [u8; 37] = core::array::from_fn(|i| (i * 7 + 3) as u8);
        let mut whole = StreamChecksum::new();
        whole.bytes(&bytes);
        let whole = whole.finish();
        for cut in [1, 2, 3, 5, 8, 13] {
            let mut c = StreamChecksum::new();
            for chunk in bytes.chunks(cut) {
                c.bytes(chunk);
            }
            assert_eq!(c.finish(), whole, "chunks of {cut}");
        }
        let mut shorter = StreamChecksum::new();
        shorter.bytes(&bytes[..36]);
        assert_ne!(shorter.finish(), whole);
        let mut zero_padded = StreamChecksum::new();
        zero_padded.bytes(&bytes[..36]);
        zero_padded.bytes(&[0, 0, 0, 0]);
        let mut exact = StreamChecksum::new();
        exact.bytes(&bytes[..36]);
        exact.bytes(&[0]);
        assert_ne!(zero_padded.finish(), exact.finish(), "trailing zeros count");
    }

    #[test]
    fn headers_round_trip_and_torn_ones_are_refused() {
        let h = SnapshotHeader {
            generation: 9,
            state: SnapshotState::Complete,
            apply_index: 40,
            apply_pos: 4096,
            last_term: 3,
            sessions_bytes: 512,
            sm_bytes: 77,
            payload_checksum: 0xABCD,
            configuration: crate::membership::Configuration::initial(3).encode(),
            config_index: 7,
        };
        let w = h.encode();
        assert_eq!(SnapshotHeader::decode(&w), Some(h));
        assert_eq!(SnapshotHeader::decode(&[0; SnapshotHeader::WORDS]), None);
        for i in 0..SnapshotHeader::WORDS {
            let mut t = w;
            t[i] ^= 1;
            assert_eq!(SnapshotHeader::decode(&t), None, "word {i}");
        }
    }

    #[test]
    fn memory_sinks_stop_at_their_end_and_sources_read_back() {
        let layout = Layout::new(&Config::new(3, MemberId(0))).unwrap();
        let mem = TestMemory::new(&layout);
        let at = Addr::new(RegionId::Scratch, 8);
        let mut sink = MemorySink::new(&mem, at, 8 + 10, StreamChecksum::new());
        assert_eq!(sink.write(b"0123456"), Ok(()));
        assert_eq!(sink.write(b"789"), Ok(()));
        assert_eq!(sink.write(b"x"), Err(SnapshotFull));
        let (n, sum) = sink.finish();
        assert_eq!(n, 10);
        let mut expect = StreamChecksum::new();
        expect.bytes(b"0123456789");
        assert_eq!(sum, expect.finish());
        let mut src = MemorySource::new(&mem, at, 10);
        let mut out = [0u8; 6];
        assert!(src.read_exact(&mut out));
        assert_eq!(&out, b"012345");
        assert!(!src.read_exact(&mut out), "4 left");
        assert_eq!(src.remaining(), 4);
    }

    #[test]
    fn slices_stop_at_their_ends() {
        let mut buf = [0u8; 5];
        let mut sink = SliceSink::new(&mut buf);
        assert_eq!(sink.write(b"abc"), Ok(()));
        assert_eq!(sink.write(b"def"), Err(SnapshotFull));
        assert_eq!(sink.write(b"de"), Ok(()));
        assert_eq!(sink.len(), 5);
        let mut src = SliceSource::new(&buf);
        let mut out = [0u8; 4];
        assert!(src.read_exact(&mut out));
        assert_eq!(&out, b"abcd");
        assert!(!src.read_exact(&mut out), "only one byte left");
        assert_eq!(src.remaining(), 1);
        let mut scratch = [0u8; 8];
        assert_eq!(
            wire::get_bytes(&mut src, 2, 8, &mut scratch),
            Err(RestoreError::Malformed)
        );
        assert_eq!(
            wire::get_bytes(&mut src, 1, 0, &mut scratch),
            Err(RestoreError::Malformed)
        );
        assert_eq!(
            wire::get_bytes(&mut src, 1, 8, &mut scratch).map(|b| b[0]),
            Ok(b'e')
        );
    }
}
