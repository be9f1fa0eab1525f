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
