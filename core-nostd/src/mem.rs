//! Access to the member's own registered memory.
//!
//! Peers write this memory behind the compiler's back (one-sided WRITEs),
//! so the core never holds a Rust reference into it: it loads and stores
//! aligned 64-bit control words atomically and copies byte ranges out (then
//! re-validates them with a checksum) or in.

use crate::fabric::Addr;

/// The member's registered regions, as laid out by [`crate::layout::Layout`].
///
/// Implementations:
/// * must be safe against concurrent writes by peers (atomics or volatile
///   copies, never `&[u8]` into shared memory);
/// * may panic on an address outside the region, which is a programming
///   error of the core (all addresses come from the layout).
pub trait Memory {
    /// Loads an 8-aligned little-endian word with acquire ordering.
    fn load_u64(&self, at: Addr) -> u64;
    /// Stores an 8-aligned little-endian word with release ordering.
    fn store_u64(&self, at: Addr, value: u64);
    /// Copies `dst.len()` bytes out. May observe a torn mixture if a peer
    /// writes concurrently; callers validate.
    fn read(&self, at: Addr, dst: &mut [u8]);
    /// Copies bytes in.
    fn write(&self, at: Addr, src: &[u8]);
}

/// Reads `N` consecutive little-endian words.
pub fn read_words<M: Memory + ?Sized, const N: usize>(mem: &M, at: Addr) -> [u64; N] {
    let mut out = [0u64; N];
    for (i, w) in out.iter_mut().enumerate() {
        *w = mem.load_u64(at.add(8 * i as u64));
    }
    out
}

/// Writes consecutive little-endian words.
pub fn write_words<M: Memory + ?Sized>(mem: &M, at: Addr, words: &[u64]) {
    for (i, &w) in words.iter().enumerate() {
        mem.store_u64(at.add(8 * i as u64), w);
    }
}
