//! Schemas (typed columns over row words), the guard of each segment, and
//! the member's own row with its pushes.
//!
//! # Row words
//!
//! A row is an array of little-endian 64-bit words (at most
//! [`ROW_WORDS_MAX`], the Control region's row). A schema lists its columns
//! by *data word*: the guard words are not counted, the framework inserts
//! them. The data words are cut into one or more *segments*; each segment
//! is stored as
//!
//! ```text
//! | version | data word 0 | ... | data word n-1 | checksum | version |
//! ```
//!
//! so that data word `d` of segment `s` sits at physical word
//! `d + 3·s + 1`.
//!
//! # Why every segment carries its own guard
//!
//! A push of a column range WRITEs the segments that hold the range, each
//! with its guard, as one contiguous byte range. The alternatives were
//! worse:
//!
//! * one guard for the whole row, pushed with every range: the head
//!   version, the range and the checksum and tail version are not
//!   contiguous, so a range push would cost three WRITEs per peer (or be a
//!   whole-row push); and the checksum, covering words the push does not
//!   carry, would only validate at a reader that holds a bit-identical copy
//!   of the rest of the row. A reader that missed one push (a broken
//!   connection, its pushes flushed) would then reject every later range
//!   push until the next whole-row push.
//! * a guard per range chosen at push time: readers could not find it.
//!
//! With a guard per segment a pushed range validates on its own: versions
//! at both ends catch a copy that lands in address order and is caught in
//! the middle; the checksum (over the head version and the data) catches
//! any other placement order and corruption. A reader keeps the last good
//! copy of each segment separately, so a torn segment never hides a good
//! one, and never acts on a torn one.
//!
//! The price is three words per segment and the atomicity it defines:
//! columns of one segment are always seen together (from the same push);
//! columns of different segments are each seen monotonically but may come
//! from different pushes, as in Derecho's SST, whose predicates are
//! monotonic per column. A schema therefore puts columns that are read
//! together in one segment (DARE's row is a single segment).

use crate::checksum::checksum_words;
use crate::fabric::{Addr, MemberId, MAX_MEMBERS};
use crate::layout::ROW_WORDS;
use crate::mem::Memory;

/// Words of the largest row, guards included: the Control region's row.
pub const ROW_WORDS_MAX: usize = 32;
const _: () = assert!(ROW_WORDS <= ROW_WORDS_MAX);
/// Segments a schema may cut its row into, at most.
pub const SEGMENTS_MAX: usize = 4;
/// Guard words per segment: head version, checksum, tail version.
pub const GUARD_WORDS: usize = 3;
/// The word that means "no member" in a [`Kind::Member`] column.
pub const NO_MEMBER: u64 = u64::MAX;

// Reserved words are tracked in a u64 mask, segments in a u8.
const _: () = assert!(ROW_WORDS_MAX <= 64 && SEGMENTS_MAX <= 8);

/// A row as words, guards included. Words past the schema's
/// [`Schema::row_words`] are unused (zero).
pub type RowWords = [u64; ROW_WORDS_MAX];

/// What the words of a column may hold. Readers refuse a copy that holds
/// anything else ([`RowError::Malformed`]), so typed views never see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Any 64-bit value.
    U64,
    /// An optional member id: [`NO_MEMBER`] or an id below [`MAX_MEMBERS`].
    Member,
    /// An enumeration code below `count`.
    Code {
        /// Number of codes.
        count: u64,
    },
}

impl Kind {
    /// True when `word` is a value of this kind.
    pub const fn admits(self, word: u64) -> bool {
        match self {
            Kind::U64 => true,
            Kind::Member => word == NO_MEMBER || word < MAX_MEMBERS as u64,
            Kind::Code { count } => word < count,
        }
    }
}

/// One typed column of a schema: `words` consecutive data words (an array
/// of `words` elements of `kind`) starting at data word `word`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Column {
    /// Name (for status and errors).
    pub name: &'static str,
    /// First data word (guard words not counted).
    pub word: u16,
    /// Width in 8-byte words; every word is one element.
    pub words: u16,
    /// What each element holds.
    pub kind: Kind,
}

impl Column {
    /// A column of `words` elements of `kind` from data word `word`.
    pub const fn new(name: &'static str, word: u16, words: u16, kind: Kind) -> Column {
        Column {
            name,
            word,
            words,
            kind,
        }
    }
    /// A one-word `u64` column.
    pub const fn u64(name: &'static str, word: u16) -> Column {
        Column::new(name, word, 1, Kind::U64)
    }
    /// A one-word optional member id.
    pub const fn member(name: &'static str, word: u16) -> Column {
        Column::new(name, word, 1, Kind::Member)
    }
    /// A one-word enumeration code below `count`.
    pub const fn code(name: &'static str, word: u16, count: u64) -> Column {
        Column::new(name, word, 1, Kind::Code { count })
    }
}

/// Why a schema was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaError {
    /// No segment, more than [`SEGMENTS_MAX`], or an empty one.
    Segments,
    /// Data and guards take more than [`ROW_WORDS_MAX`] words.
    TooWide,
    /// A column is empty, overlaps the previous one (columns are listed in
    /// word order), straddles two segments or ends past the data words.
    Column,
    /// An enumeration column with no code.
    Kind,
}

/// Why a row copy (or one segment of it) was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowError {
    /// Never written (version 0 at both ends).
    Empty,
    /// The two versions differ: a write was in progress.
    Torn,
    /// The checksum does not match: torn or corrupt.
    Checksum,
    /// A column holds a value its kind does not admit (a member id out of
    /// range, an unknown code), or a reserved word is not zero.
    Malformed,
}

/// A set of segments (bit `s` is segment `s`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SegmentSet(pub u8);

impl SegmentSet {
    /// No segment.
    pub const EMPTY: SegmentSet = SegmentSet(0);
    /// Segments `first..=last`.
    pub const fn span(first: usize, last: usize) -> SegmentSet {
        assert!(first <= last && last < SEGMENTS_MAX);
        SegmentSet(((1u16 << (last + 1)) - (1u16 << first)) as u8)
    }
    /// True when segment `s` is in the set.
    pub const fn contains(self, s: usize) -> bool {
        s < SEGMENTS_MAX && self.0 & (1 << s) != 0
    }
    /// The set with segment `s` added.
    pub const fn with(self, s: usize) -> SegmentSet {
        assert!(s < SEGMENTS_MAX);
        SegmentSet(self.0 | (1 << s))
    }
    /// True when no segment is in the set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
    /// The lowest and highest segment in the set.
    pub const fn bounds(self) -> Option<(usize, usize)> {
        if self.0 == 0 {
            None
        } else {
            Some((
                self.0.trailing_zeros() as usize,
                7 - self.0.leading_zeros() as usize,
            ))
        }
    }
}

/// The bytes a push WRITEs: from `offset_bytes` after the row's start,
/// `len_bytes` long, holding `segments` with their guards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PushSpan {
    /// Offset from the start of the row, in bytes.
    pub offset_bytes: u64,
    /// Length in bytes.
    pub len_bytes: u64,
    /// The segments it carries (each whole, guard included).
    pub segments: SegmentSet,
}

impl PushSpan {
    /// Index of the first word it carries.
    pub const fn first_word(self) -> usize {
        (self.offset_bytes / 8) as usize
    }
    /// Index past the last word it carries.
    pub const fn end_word(self) -> usize {
        ((self.offset_bytes + self.len_bytes) / 8) as usize
    }
}

/// The typed columns of a member row and where the framework keeps the
/// guards. Build one with [`Schema::new`] in a `static` (an invalid schema
/// is then a compile error) or [`Schema::try_new`] at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Schema {
    name: &'static str,
    /// Checksum domain: a copy of one schema's row never validates as
    /// another's, nor one segment as another.
    domain: u64,
    columns: &'static [Column],
    segment_count: usize,
    /// Per segment: physical word of its head version.
    segment_first_word: [u16; SEGMENTS_MAX],
    /// Per segment: its data words.
    segment_data_words: [u16; SEGMENTS_MAX],
    row_words: usize,
    /// Physical data words no column covers: always zero, so that an
    /// accepted copy is canonical.
    reserved_mask: u64,
    /// Per data word: its physical word (precomputed: readers and writers
    /// look columns up on every row they touch, the leader on every read).
    data_physical: [u8; ROW_WORDS_MAX],
    /// Per data word: its segment.
    data_segment: [u8; ROW_WORDS_MAX],
    /// Per physical word: the largest value it admits (`u64::MAX` for a
    /// `u64` column, `count - 1` for a code, 0 for a reserved word); member
    /// words are checked through `member_mask` instead.
    word_max: [u64; ROW_WORDS_MAX],
    /// Physical words of [`Kind::Member`] columns.
    member_mask: u64,
    /// Data words in all segments.
    data_words_total: usize,
}

impl Schema {
    /// A schema named `name` whose checksums use `domain`, with one
    /// segment per entry of `segment_data_words` (its data words, guards
    /// not counted) and `columns` in word order.
    pub const fn try_new(
        name: &'static str,
        domain: u64,
        segment_data_words: &'static [u16],
        columns: &'static [Column],
    ) -> Result<Schema, SchemaError> {
        let segment_count = segment_data_words.len();
        if segment_count == 0 || segment_count > SEGMENTS_MAX {
            return Err(SchemaError::Segments);
        }
        let mut first_word = [0u16; SEGMENTS_MAX];
        let mut first_data = [0u16; SEGMENTS_MAX];
        let mut data_words = [0u16; SEGMENTS_MAX];
        let mut physical = 0usize;
        let mut data = 0usize;
        let mut s = 0;
        while s < segment_count {
            let n = segment_data_words[s] as usize;
            if n == 0 {
                return Err(SchemaError::Segments);
            }
            if physical + n + GUARD_WORDS > ROW_WORDS_MAX {
                return Err(SchemaError::TooWide);
            }
            first_word[s] = physical as u16;
            first_data[s] = data as u16;
            data_words[s] = n as u16;
            physical += n + GUARD_WORDS;
            data += n;
            s += 1;
        }
        // Every data word starts reserved; columns claim theirs.
        let mut reserved_mask = 0u64;
        let mut s = 0;
        while s < segment_count {
            let mut w = 0;
            while w < data_words[s] as usize {
                reserved_mask |= 1 << (first_word[s] as usize + 1 + w);
                w += 1;
            }
            s += 1;
        }
        let mut data_physical = [0u8; ROW_WORDS_MAX];
        let mut data_segment = [0u8; ROW_WORDS_MAX];
        let mut s = 0;
        while s < segment_count {
            let mut w = 0;
            while w < data_words[s] as usize {
                let d = first_data[s] as usize + w;
                data_physical[d] = (first_word[s] as usize + 1 + w) as u8;
                data_segment[d] = s as u8;
                w += 1;
            }
            s += 1;
        }
        // Reserved words admit only zero until a column claims them.
        let mut word_max = [0u64; ROW_WORDS_MAX];
        let mut member_mask = 0u64;
        let mut next_free = 0usize;
        let mut c = 0;
        while c < columns.len() {
            let col = columns[c];
            let start = col.word as usize;
            let end = start + col.words as usize;
            if col.words == 0 || start < next_free || end > data {
                return Err(SchemaError::Column);
            }
            if let Kind::Code { count: 0 } = col.kind {
                return Err(SchemaError::Kind);
            }
            // The column lies inside one segment.
            let mut s = 0;
            while s < segment_count {
                let lo = first_data[s] as usize;
                let hi = lo + data_words[s] as usize;
                if start >= lo && start < hi {
                    if end > hi {
                        return Err(SchemaError::Column);
                    }
                    let mut w = start;
                    while w < end {
                        let physical = w + GUARD_WORDS * s + 1;
                        reserved_mask &= !(1 << physical);
                        match col.kind {
                            Kind::U64 => word_max[physical] = u64::MAX,
                            Kind::Member => member_mask |= 1 << physical,
                            Kind::Code { count } => word_max[physical] = count - 1,
                        }
                        w += 1;
                    }
                }
                s += 1;
            }
            next_free = end;
            c += 1;
        }
        Ok(Schema {
            name,
            domain,
            columns,
            segment_count,
            segment_first_word: first_word,
            segment_data_words: data_words,
            row_words: physical,
            reserved_mask,
            data_physical,
            data_segment,
            word_max,
            member_mask,
            data_words_total: data,
        })
    }

    /// [`Schema::try_new`] for schemas declared in a `static`: an invalid
    /// schema fails the build.
    pub const fn new(
        name: &'static str,
        domain: u64,
        segment_data_words: &'static [u16],
        columns: &'static [Column],
    ) -> Schema {
        match Schema::try_new(name, domain, segment_data_words, columns) {
            Ok(s) => s,
            Err(_) => panic!("invalid SST schema"),
        }
    }

    /// The schema's name.
    pub const fn name(&self) -> &'static str {
        self.name
    }
    /// Its columns, in word order.
    pub const fn columns(&self) -> &'static [Column] {
        self.columns
    }
    /// Words of a row, guards included.
    pub const fn row_words(&self) -> usize {
        self.row_words
    }
    /// Number of segments.
    pub const fn segment_count(&self) -> usize {
        self.segment_count
    }
    /// Every segment.
    pub const fn all_segments(&self) -> SegmentSet {
        SegmentSet::span(0, self.segment_count - 1)
    }

    /// Physical words of segment `s`: its head version, data, checksum and
    /// tail version are `first`, `first + 1 ..`, `end - 2` and `end - 1`.
    #[inline]
    pub const fn segment_words(&self, s: usize) -> (usize, usize) {
        assert!(s < self.segment_count);
        let first = self.segment_first_word[s] as usize;
        (
            first,
            first + self.segment_data_words[s] as usize + GUARD_WORDS,
        )
    }

    /// The segment holding data word `data_word`.
    #[inline]
    fn segment_of_data(&self, data_word: usize) -> usize {
        assert!(
            data_word < self.data_words_total,
            "column outside the schema's data words"
        );
        usize::from(self.data_segment[data_word])
    }

    /// The segment holding `col`.
    pub fn segment_of(&self, col: &Column) -> usize {
        self.segment_of_data(usize::from(col.word))
    }

    /// Physical word of element `element` of `col`.
    #[inline]
    pub fn word_of(&self, col: &Column, element: usize) -> usize {
        assert!(element < usize::from(col.words), "element outside column");
        let d = usize::from(col.word) + element;
        assert!(
            d < self.data_words_total,
            "column outside the schema's data words"
        );
        usize::from(self.data_physical[d])
    }

    /// The bytes to WRITE for a push of `segments`: from the first to the
    /// last of them (any segment in between goes too: one WRITE per peer).
    pub fn span_of(&self, segments: SegmentSet) -> PushSpan {
        let (first, last) = segments.bounds().expect("a push carries a segment");
        assert!(last < self.segment_count, "segment outside the schema");
        let start = self.segment_words(first).0;
        let end = self.segment_words(last).1;
        PushSpan {
            offset_bytes: 8 * start as u64,
            len_bytes: 8 * (end - start) as u64,
            segments: SegmentSet::span(first, last),
        }
    }

    /// The bytes to WRITE for a push of the whole row.
    pub fn whole_row(&self) -> PushSpan {
        self.span_of(self.all_segments())
    }

    /// The bytes to WRITE for a push of the columns `first ..= last` (in
    /// word order): every segment holding one of them, each with its
    /// guard, so that readers can validate the range on its own.
    pub fn push_span(&self, first: &Column, last: &Column) -> PushSpan {
        assert!(first.word <= last.word, "a column range is in word order");
        let s0 = self.segment_of(first);
        let s1 = self.segment_of_data(usize::from(last.word) + usize::from(last.words) - 1);
        self.span_of(SegmentSet::span(s0, s1))
    }

    // ----- values ----------------------------------------------------------

    /// Element 0 of `col`.
    pub fn get(&self, row: &RowWords, col: &Column) -> u64 {
        row[self.word_of(col, 0)]
    }
    /// Element `element` of `col`.
    pub fn get_at(&self, row: &RowWords, col: &Column, element: usize) -> u64 {
        row[self.word_of(col, element)]
    }
    /// A member column of a validated row.
    pub fn get_member(&self, row: &RowWords, col: &Column) -> Option<MemberId> {
        assert_eq!(
            col.kind,
            Kind::Member,
            "{} is not a member column",
            col.name
        );
        word_member(self.get(row, col))
    }
    /// Sets element 0 of `col`.
    pub fn set(&self, row: &mut RowWords, col: &Column, value: u64) {
        self.set_at(row, col, 0, value);
    }
    /// Sets element `element` of `col`; the value must be of its kind
    /// (the core never writes a row its readers would refuse).
    pub fn set_at(&self, row: &mut RowWords, col: &Column, element: usize, value: u64) {
        assert!(
            col.kind.admits(value),
            "{}: value of another kind",
            col.name
        );
        row[self.word_of(col, element)] = value;
    }
    /// Sets a member column.
    pub fn set_member(&self, row: &mut RowWords, col: &Column, member: Option<MemberId>) {
        self.set(row, col, member_word(member));
    }

    // ----- the guard -------------------------------------------------------

    fn segment_domain(&self, s: usize) -> u64 {
        // Segment 0 keeps the schema's domain (DARE's row is byte-for-byte
        // what it was before the framework).
        self.domain ^ ((s as u64) << 56)
    }

    /// Stamps the guard of every segment in `segments` as version
    /// `version` (non-zero): head and tail versions, then the checksum of
    /// the head version and the data.
    pub fn seal(&self, row: &mut RowWords, segments: SegmentSet, version: u64) {
        assert!(version != 0, "row version 0 means never written");
        assert!(
            row.iter()
                .enumerate()
                .all(|(i, &w)| self.reserved_mask & (1 << i) == 0 || w == 0),
            "reserved words stay zero"
        );
        for s in 0..self.segment_count {
            if !segments.contains(s) {
                continue;
            }
            let (first, end) = self.segment_words(s);
            row[first] = version;
            row[end - 1] = version;
            row[end - 2] = checksum_words(self.segment_domain(s), &row[first..end - 2]);
        }
    }

    /// Validates segment `s` of a copy; returns its version.
    pub fn check_segment(&self, row: &RowWords, s: usize) -> Result<u64, RowError> {
        let (first, end) = self.segment_words(s);
        let version = row[first];
        if version == 0 && row[end - 1] == 0 {
            return Err(RowError::Empty);
        }
        if version != row[end - 1] {
            return Err(RowError::Torn);
        }
        // The tail version equals the head version, which the checksum
        // covers with everything up to it.
        if checksum_words(self.segment_domain(s), &row[first..end - 2]) != row[end - 2] {
            return Err(RowError::Checksum);
        }
        // One pass over the data words against the precomputed kinds
        // (a reserved word admits only zero).
        for (k, &word) in row[first + 1..end - 2].iter().enumerate() {
            let i = first + 1 + k;
            let admitted = if self.member_mask & (1 << i) != 0 {
                Kind::Member.admits(word)
            } else {
                word <= self.word_max[i]
            };
            if !admitted {
                return Err(RowError::Malformed);
            }
        }
        Ok(version)
    }

    /// Validates every segment of a whole copy (the first failure, in
    /// segment order, is the answer); returns the highest version.
    pub fn check(&self, row: &RowWords) -> Result<u64, RowError> {
        let mut version = 0;
        for s in 0..self.segment_count {
            version = version.max(self.check_segment(row, s)?);
        }
        if row[self.row_words..].iter().any(|&w| w != 0) {
            return Err(RowError::Malformed);
        }
        Ok(version)
    }
}

/// The word of an optional member id.
pub const fn member_word(m: Option<MemberId>) -> u64 {
    match m {
        Some(m) => m.0 as u64,
        None => NO_MEMBER,
    }
}

/// The optional member id of a validated [`Kind::Member`] word.
pub fn word_member(w: u64) -> Option<MemberId> {
    assert!(Kind::Member.admits(w), "member word not validated");
    if w == NO_MEMBER {
        None
    } else {
        Some(MemberId(w as u8))
    }
}

/// Writes `span` of `words` into local memory at the row starting at `at`,
/// in address order (head version first, tail version last), through the
/// [`Memory`] trait: this memory is read by peers' READs.
pub fn store_span<M: Memory + ?Sized>(mem: &M, at: Addr, words: &RowWords, span: PushSpan) {
    for (i, &word) in words
        .iter()
        .enumerate()
        .take(span.end_word())
        .skip(span.first_word())
    {
        mem.store_u64(at.add(8 * i as u64), word);
    }
}

/// The member's own row: set columns, then push the whole row, a column
/// range or what changed. A push seals the segments it carries with a new
/// version (one counter for the row, so every segment's version grows);
/// the caller stores the span into its own row slot and an immutable
/// staging copy, and WRITEs that span to every peer.
#[derive(Clone, Copy, Debug)]
pub struct OwnRow {
    schema: &'static Schema,
    words: RowWords,
    version: u64,
    /// Segments changed since they were last sealed.
    dirty: SegmentSet,
}

impl OwnRow {
    /// An all-zero row; every segment is dirty (the first push should be
    /// whole, so that readers see every column).
    pub fn new(schema: &'static Schema) -> OwnRow {
        OwnRow {
            schema,
            words: [0; ROW_WORDS_MAX],
            version: 0,
            dirty: schema.all_segments(),
        }
    }
    /// The schema.
    pub fn schema(&self) -> &'static Schema {
        self.schema
    }
    /// The words (sealed segments are as last pushed; dirty ones are not
    /// sealed yet and must not be copied out).
    pub fn words(&self) -> &RowWords {
        &self.words
    }
    /// The version of the last push (0: none).
    pub fn version(&self) -> u64 {
        self.version
    }
    /// Segments changed since their last push.
    pub fn dirty(&self) -> SegmentSet {
        self.dirty
    }
    /// Element 0 of `col`.
    pub fn get(&self, col: &Column) -> u64 {
        self.schema.get(&self.words, col)
    }
    /// Element `element` of `col`.
    pub fn get_at(&self, col: &Column, element: usize) -> u64 {
        self.schema.get_at(&self.words, col, element)
    }
    /// Sets element 0 of `col`.
    pub fn set(&mut self, col: &Column, value: u64) {
        self.set_at(col, 0, value);
    }
    /// Sets element `element` of `col`.
    pub fn set_at(&mut self, col: &Column, element: usize, value: u64) {
        if self.get_at(col, element) != value {
            self.schema.set_at(&mut self.words, col, element, value);
            self.dirty = self.dirty.with(self.schema.segment_of(col));
        }
    }
    /// Sets a member column.
    pub fn set_member(&mut self, col: &Column, member: Option<MemberId>) {
        self.set(col, member_word(member));
    }
    /// Seals the segments `span` carries (from [`Schema::push_span`],
    /// [`Schema::whole_row`] or [`OwnRow::dirty_span`]) with the next
    /// version and returns it.
    pub fn seal(&mut self, span: PushSpan) -> u64 {
        self.version += 1;
        self.schema
            .seal(&mut self.words, span.segments, self.version);
        self.dirty.0 &= !span.segments.0;
        self.version
    }
    /// The span that carries every dirty segment, if any.
    pub fn dirty_span(&self) -> Option<PushSpan> {
        (!self.dirty.is_empty()).then(|| self.schema.span_of(self.dirty))
    }
}
