//! The local table: the last good copy of every member's row, guarded
//! reads of the copies peers push into local memory, and reducers over
//! columns.

use super::schema::{
    word_member, Column, RowError, RowWords, Schema, SegmentSet, ROW_WORDS_MAX, SEGMENTS_MAX,
};
use crate::fabric::{Addr, MemberId, MAX_MEMBERS};
use crate::mem::Memory;

const _: () = assert!(MAX_MEMBERS <= 32, "MemberMask holds a bit per member");

/// A set of members (bit `m` is member `m`), to filter reducers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MemberMask(pub u32);

impl MemberMask {
    /// Nobody.
    pub const NONE: MemberMask = MemberMask(0);
    /// Members `0 .. count`.
    pub const fn first(count: usize) -> MemberMask {
        assert!(count <= MAX_MEMBERS);
        MemberMask(((1u64 << count) - 1) as u32)
    }
    /// The set with `m` added.
    pub const fn with(self, m: MemberId) -> MemberMask {
        MemberMask(self.0 | (1 << m.0))
    }
    /// The set without `m`.
    pub const fn without(self, m: MemberId) -> MemberMask {
        MemberMask(self.0 & !(1 << m.0))
    }
    /// True when `m` is in the set.
    pub const fn contains(self, m: MemberId) -> bool {
        (m.0 as usize) < MAX_MEMBERS && self.0 & (1 << m.0) != 0
    }
    /// Members in the set.
    pub const fn count(self) -> usize {
        self.0.count_ones() as usize
    }
    /// The members of both sets.
    pub const fn and(self, other: MemberMask) -> MemberMask {
        MemberMask(self.0 & other.0)
    }
    /// The members of either set.
    pub const fn or(self, other: MemberMask) -> MemberMask {
        MemberMask(self.0 | other.0)
    }
    /// The members of this set that are not in `other`.
    pub const fn minus(self, other: MemberMask) -> MemberMask {
        MemberMask(self.0 & !other.0)
    }
    /// The members in the set, in id order (at most [`MAX_MEMBERS`]).
    pub fn iter(self) -> impl Iterator<Item = MemberId> {
        (0..MAX_MEMBERS as u8)
            .map(MemberId)
            .filter(move |&m| self.contains(m))
    }
}

/// What one observation of a member's copy did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Observed {
    /// Segments accepted: valid and newer than the last good copy.
    pub accepted: SegmentSet,
    /// Segments refused as torn, corrupt or malformed (the last good copy
    /// stays); never-written segments are not counted.
    pub rejected: SegmentSet,
    /// Why the first refused segment was refused.
    pub error: Option<RowError>,
}

impl Observed {
    /// True when something new was accepted.
    pub fn changed(&self) -> bool {
        !self.accepted.is_empty()
    }
}

/// The shared state table as this member sees it: per member, the last
/// good copy of each segment of its row and that segment's version.
/// Everything is sized by [`MAX_MEMBERS`] and [`ROW_WORDS_MAX`].
#[derive(Clone, Copy, Debug)]
pub struct Table {
    schema: &'static Schema,
    member_count: usize,
    rows: [RowWords; MAX_MEMBERS],
    /// Per member and segment: version of the last good copy (0: none).
    versions: [[u64; SEGMENTS_MAX]; MAX_MEMBERS],
}

impl Table {
    /// An empty table for `member_count` members.
    pub fn new(schema: &'static Schema, member_count: usize) -> Table {
        assert!((1..=MAX_MEMBERS).contains(&member_count));
        Table {
            schema,
            member_count,
            rows: [[0; ROW_WORDS_MAX]; MAX_MEMBERS],
            versions: [[0; SEGMENTS_MAX]; MAX_MEMBERS],
        }
    }

    /// The schema.
    pub fn schema(&self) -> &'static Schema {
        self.schema
    }

    /// Every member.
    pub fn members(&self) -> MemberMask {
        MemberMask::first(self.member_count)
    }

    /// Guarded read of `member`'s row copy at `at` in local memory (peers
    /// WRITE it behind our back, so it is read through [`Memory`] and
    /// validated): every segment that validates and is newer replaces the
    /// last good copy; a torn or corrupt segment is refused and the last
    /// good copy stays.
    pub fn observe<M: Memory + ?Sized>(&mut self, mem: &M, member: MemberId, at: Addr) -> Observed {
        let m = self.index(member);
        // Cheap first check: a copy whose head versions are the ones we
        // hold has nothing new (a push always changes them).
        let unchanged = (0..self.schema.segment_count()).all(|s| {
            let head = self.schema.segment_words(s).0;
            mem.load_u64(at.add(8 * head as u64)) == self.versions[m][s]
        });
        if unchanged {
            return Observed::default();
        }
        let mut copy = [0u64; ROW_WORDS_MAX];
        for (i, w) in copy.iter_mut().enumerate().take(self.schema.row_words()) {
            *w = mem.load_u64(at.add(8 * i as u64));
        }
        self.accept(member, &copy)
    }

    /// Offers a copy of `member`'s row (from local memory, a READ landing
    /// zone, or our own row as pushed): segment by segment, a valid copy
    /// newer than the last good one replaces it.
    pub fn accept(&mut self, member: MemberId, copy: &RowWords) -> Observed {
        let m = self.index(member);
        let mut seen = Observed::default();
        for s in 0..self.schema.segment_count() {
            match self.schema.check_segment(copy, s) {
                Ok(version) if version > self.versions[m][s] => {
                    let (first, end) = self.schema.segment_words(s);
                    self.rows[m][first..end].copy_from_slice(&copy[first..end]);
                    self.versions[m][s] = version;
                    seen.accepted = seen.accepted.with(s);
                }
                // Older or the same: versions only grow, keep ours.
                Ok(_) | Err(RowError::Empty) => {}
                Err(e) => {
                    seen.rejected = seen.rejected.with(s);
                    seen.error.get_or_insert(e);
                }
            }
        }
        seen
    }

    /// Forgets `member`'s row (for a member that left the group).
    pub fn clear(&mut self, member: MemberId) {
        let m = self.index(member);
        self.rows[m] = [0; ROW_WORDS_MAX];
        self.versions[m] = [0; SEGMENTS_MAX];
    }

    /// Highest version of any good segment of `member`'s row (0: none).
    #[inline]
    pub fn version(&self, member: MemberId) -> u64 {
        let m = self.index(member);
        self.versions[m].iter().copied().max().unwrap_or(0)
    }

    /// Version of the last good copy of segment `s` of `member`'s row.
    #[inline]
    pub fn segment_version(&self, member: MemberId, s: usize) -> u64 {
        self.versions[self.index(member)][s]
    }

    /// The last good copy of `member`'s row: only segments with a non-zero
    /// [`Table::segment_version`] hold data.
    #[inline]
    pub fn words(&self, member: MemberId) -> &RowWords {
        &self.rows[self.index(member)]
    }

    /// A view of `member`'s row.
    #[inline]
    pub fn row(&self, member: MemberId) -> RowRef<'_> {
        let m = self.index(member);
        RowRef {
            schema: self.schema,
            words: &self.rows[m],
            versions: &self.versions[m],
        }
    }

    /// Members of `rows` that hold a good copy of `col`.
    #[inline]
    pub fn with_column(&self, col: &Column, rows: MemberMask) -> MemberMask {
        let s = self.schema.segment_of(col);
        let mut out = MemberMask::NONE;
        for m in rows.and(self.members()).iter() {
            if self.versions[m.index()][s] != 0 {
                out = out.with(m);
            }
        }
        out
    }

    // ----- reducers: bounded by MAX_MEMBERS rows ---------------------------

    /// Smallest element `element` of `col` over the members of `rows` that
    /// hold a good copy of it (`None`: no such member).
    pub fn min(&self, col: &Column, element: usize, rows: MemberMask) -> Option<u64> {
        let w = self.schema.word_of(col, element);
        self.with_column(col, rows)
            .iter()
            .map(|m| self.rows[m.index()][w])
            .min()
    }

    /// Largest element `element` of `col` over the members of `rows` that
    /// hold a good copy of it.
    pub fn max(&self, col: &Column, element: usize, rows: MemberMask) -> Option<u64> {
        let w = self.schema.word_of(col, element);
        self.with_column(col, rows)
            .iter()
            .map(|m| self.rows[m.index()][w])
            .max()
    }

    /// Members of `rows` holding a good copy of `col` whose element
    /// `element` satisfies `pred`, counted.
    pub fn count(
        &self,
        col: &Column,
        element: usize,
        rows: MemberMask,
        pred: impl Fn(u64) -> bool,
    ) -> usize {
        let w = self.schema.word_of(col, element);
        self.with_column(col, rows)
            .iter()
            .filter(|m| pred(self.rows[m.index()][w]))
            .count()
    }

    /// Members of `rows` whose row satisfies `pred` (over several
    /// columns; a column the row has no good copy of reads as `None`).
    pub fn select(&self, rows: MemberMask, pred: impl Fn(RowRef<'_>) -> bool) -> MemberMask {
        let mut out = MemberMask::NONE;
        for m in rows.and(self.members()).iter() {
            if pred(self.row(m)) {
                out = out.with(m);
            }
        }
        out
    }

    /// Members of `rows` whose row satisfies `pred`, counted.
    pub fn count_rows(&self, rows: MemberMask, pred: impl Fn(RowRef<'_>) -> bool) -> usize {
        self.select(rows, pred).count()
    }

    #[inline]
    fn index(&self, member: MemberId) -> usize {
        assert!(
            member.index() < self.member_count,
            "member outside the table"
        );
        member.index()
    }
}

/// One member's row in a [`Table`]: columns whose segment has a good copy.
#[derive(Clone, Copy, Debug)]
pub struct RowRef<'a> {
    schema: &'static Schema,
    words: &'a RowWords,
    versions: &'a [u64; SEGMENTS_MAX],
}

impl RowRef<'_> {
    /// True when the row has a good copy of `col`.
    #[inline]
    pub fn has(&self, col: &Column) -> bool {
        self.versions[self.schema.segment_of(col)] != 0
    }
    /// Element 0 of `col`, if the row has a good copy of it.
    #[inline]
    pub fn get(&self, col: &Column) -> Option<u64> {
        self.get_at(col, 0)
    }
    /// Element `element` of `col`, if the row has a good copy of it.
    #[inline]
    pub fn get_at(&self, col: &Column, element: usize) -> Option<u64> {
        self.has(col)
            .then(|| self.schema.get_at(self.words, col, element))
    }
    /// A member column, if the row has a good copy of it.
    pub fn member(&self, col: &Column) -> Option<Option<MemberId>> {
        self.get(col).map(word_member)
    }
}
