//! Multicast subgroups and shards (Derecho §2 and §3.4: a top-level group
//! declares subgroups, and regular shardings whose shards are subgroups;
//! each offers atomic multicast among its own members).
//!
//! # What a subgroup is here
//!
//! A subgroup is a set of top-level members ([`Config::mcast_subgroups`],
//! a bit per member id). It runs the multicast engine of
//! [`crate::multicast`] unchanged, over its own ranks: the subgroup's
//! members in id order are ranks `0 .. k`, so its shared state table has
//! `k` rows, its region `k` rings, and its round-robin order, stability,
//! wedges, ragged trims and joins involve its members only. Bytes move
//! only among them: the subgroup has its own region
//! ([`subgroup_region`]), which only its members may access
//! ([`RemoteAccess::Only`]), and its engine posts only to its members.
//!
//! [`SubgroupEngine`] wraps the engine and translates between ranks and
//! member ids at the seam with the fabric and the host: the peer of every
//! work request, access change, reconnection and completion, death and
//! return notices, the sender of a delivery, and the masks and per-sender
//! counts of its status. The engine's rows and slots hold ranks, which
//! every member of the subgroup derives alike from the configuration.
//!
//! # Epochs
//!
//! Each subgroup ends its own epochs: a member that learns a subgroup
//! peer is gone wedges that subgroup, whose leader (its lowest-ranked
//! unsuspected member) proposes the trim and the next view among the
//! subgroup's members; a restarted member joins each subgroup it belongs
//! to. A failure outside a subgroup does not disturb it. (In Derecho the
//! top-level leader ends every subgroup's epoch in one view change; here
//! each subgroup's own members do, which gives each subgroup the same
//! guarantees, virtual synchrony among its members, without a
//! member's failure stalling subgroups it was not in.)
//!
//! Every member registers every subgroup's region (the layout is the same
//! on every member, as the fabric compares it), but grants access to it
//! only to the subgroup's members; a member outside a subgroup never
//! touches it, so its pages are never written.

use crate::config::Config;
use crate::engine::{Engine, EngineTag};
use crate::fabric::{Action, Completion, FabricError, MemberId, RegionId, MAX_MEMBERS};
use crate::layout::{RegionSpec, RemoteAccess};
use crate::mem::Memory;
use crate::multicast::{
    HaltCause, McastDelivery, McastEngine, McastLayout, McastStatus, SendError, Trim, WedgeCause,
};

/// Most subgroups (and shards) a top-level group declares.
pub const SUBGROUPS_MAX: usize = 6;
/// The first subgroup's region; subgroup `i` has region
/// `SUBGROUP_REGION_BASE + i`.
pub const SUBGROUP_REGION_BASE: u8 = 10;
/// The first subgroup's engine tag; subgroup `i` tags its work requests
/// with `SUBGROUP_TAG_BASE + i`.
pub const SUBGROUP_TAG_BASE: u8 = 16;

const _: () = assert!(SUBGROUP_REGION_BASE as usize + SUBGROUPS_MAX <= crate::fabric::REGIONS_MAX);

/// Subgroup `index`'s region.
pub const fn subgroup_region(index: usize) -> RegionId {
    RegionId(SUBGROUP_REGION_BASE + index as u8)
}

/// Subgroup `index`'s engine tag.
pub const fn subgroup_tag(index: usize) -> EngineTag {
    EngineTag(SUBGROUP_TAG_BASE + index as u8)
}

/// The subgroup an engine tag names, if any.
pub const fn subgroup_of_tag(tag: EngineTag) -> Option<usize> {
    let t = tag.0 as usize;
    let base = SUBGROUP_TAG_BASE as usize;
    if t >= base && t < base + SUBGROUPS_MAX {
        Some(t - base)
    } else {
        None
    }
}

/// Where one subgroup's memory lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SubgroupLayout {
    /// Its place among the configuration's subgroups.
    pub index: u8,
    /// Its members, a bit per member id.
    pub members: u8,
    /// Its multicast group, over ranks (`members.count_ones()` of them),
    /// in its own region.
    pub group: McastLayout,
}

impl SubgroupLayout {
    /// The layouts of the configuration's subgroups (`None` in unused
    /// places). The configuration is validated by the caller.
    pub fn all(config: &Config) -> [Option<SubgroupLayout>; SUBGROUPS_MAX] {
        let mut out = [None; SUBGROUPS_MAX];
        if config.mcast_window == 0 {
            return out;
        }
        for (i, &mask) in config.mcast_subgroups.iter().enumerate() {
            if mask != 0 {
                out[i] = Some(SubgroupLayout {
                    index: i as u8,
                    members: mask,
                    group: McastLayout::of_group(
                        config,
                        mask.count_ones() as u8,
                        subgroup_region(i),
                    ),
                });
            }
        }
        out
    }

    /// The region as the fabric registers it: only the subgroup's members
    /// may access it.
    pub fn region(&self) -> RegionSpec {
        RegionSpec {
            id: self.group.region,
            bytes: self.group.region_bytes,
            remote: RemoteAccess::Only(u64::from(self.members)),
        }
    }

    /// Words that identify the layout (for the layout hash).
    pub fn hash_words(&self) -> [u64; 6] {
        let [a, b, c, d] = self.group.hash_words();
        [u64::from(self.index), u64::from(self.members), a, b, c, d]
    }

    /// `member`'s rank in the subgroup, if it is a member.
    pub fn rank_of(&self, member: MemberId) -> Option<MemberId> {
        let bit = 1u16 << member.0.min(15);
        if member.index() >= MAX_MEMBERS || u16::from(self.members) & bit == 0 {
            return None;
        }
        Some(MemberId(
            (u16::from(self.members) & (bit - 1)).count_ones() as u8
        ))
    }

    /// The member at `rank` (a rank below the member count).
    pub fn member_at(&self, rank: MemberId) -> MemberId {
        let mut seen = 0u8;
        for id in 0..MAX_MEMBERS as u8 {
            if self.members & (1 << id) != 0 {
                if seen == rank.0 {
                    return MemberId(id);
                }
                seen += 1;
            }
        }
        // Ranks come from the engine, which has `count_ones()` of them.
        panic!("subgroup rank {} out of range", rank.0);
    }
}

/// One member's engine of one subgroup: the multicast engine over the
/// subgroup's ranks, seen from outside in member ids.
pub struct SubgroupEngine<M: Memory> {
    lay: SubgroupLayout,
    engine: McastEngine<M>,
    /// Rank → member id, and member id → rank (`u8::MAX`: not a member).
    ids: [MemberId; MAX_MEMBERS],
    ranks: [u8; MAX_MEMBERS],
    /// Per member id, the incarnation the top-level group removed by a
    /// decided view change while that process was in this subgroup's view
    /// (0: none), until a view of ours leaves it out.
    parent_removed: [u64; MAX_MEMBERS],
    #[cfg(feature = "mutation-testing")]
    ignore_parent: bool,
}

impl<M: Memory> SubgroupEngine<M> {
    /// The engine of `config.self_id` in the subgroup `lay`, or `None`
    /// if it is not a member. `config` is the member's own (validated).
    pub fn new(config: &Config, lay: SubgroupLayout, memory: M, now_ns: u64) -> Option<Self> {
        let rank = lay.rank_of(config.self_id)?;
        let mut ids = [MemberId(0); MAX_MEMBERS];
        let mut ranks = [u8::MAX; MAX_MEMBERS];
        for r in 0..lay.group.members {
            let id = lay.member_at(MemberId(r));
            ids[usize::from(r)] = id;
            ranks[id.index()] = r;
        }
        #[cfg(feature = "mutation-testing")]
        if config.mutation == crate::config::Mutation::SubgroupRanksAsIds {
            for r in 0..MAX_MEMBERS {
                ids[r] = MemberId(r as u8);
                ranks[r] = r as u8;
            }
        }
        let mut inner = config.clone();
        inner.initial_members = lay.group.members;
        inner.self_id = rank;
        let engine = McastEngine::with_layout(&inner, lay.group, memory, now_ns)?;
        Some(SubgroupEngine {
            lay,
            engine,
            ids,
            ranks,
            parent_removed: [0; MAX_MEMBERS],
            #[cfg(feature = "mutation-testing")]
            ignore_parent: config.mutation
                == crate::config::Mutation::SubgroupIgnoresParentRemovals,
        })
    }

    /// The layout.
    pub fn layout(&self) -> &SubgroupLayout {
        &self.lay
    }

    /// Its place among the configuration's subgroups.
    pub fn index(&self) -> usize {
        usize::from(self.lay.index)
    }

    /// The engine inside (ranks, not member ids).
    pub fn engine(&self) -> &McastEngine<M> {
        &self.engine
    }

    /// The engine inside, mutably (ranks, not member ids).
    pub fn engine_mut(&mut self) -> &mut McastEngine<M> {
        &mut self.engine
    }

    /// The member at `rank`.
    pub fn member(&self, rank: MemberId) -> MemberId {
        self.ids[rank.index() % MAX_MEMBERS]
    }

    fn rank(&self, member: MemberId) -> Option<MemberId> {
        match self.ranks.get(member.index()) {
            Some(&r) if r != u8::MAX => Some(MemberId(r)),
            _ => None,
        }
    }

    /// A mask of ranks as a mask of member ids.
    pub fn members_of(&self, ranks: u64) -> u64 {
        let mut out = 0;
        for r in 0..usize::from(self.lay.group.members) {
            if ranks & (1 << r) != 0 {
                out |= 1 << self.ids[r].0;
            }
        }
        out
    }

    /// Per-rank counts as per-member counts.
    fn counts_of(&self, by_rank: &[u64; MAX_MEMBERS]) -> [u64; MAX_MEMBERS] {
        let mut out = [0; MAX_MEMBERS];
        for r in 0..usize::from(self.lay.group.members) {
            out[self.ids[r].index()] = by_rank[r];
        }
        out
    }

    fn trim_of(&self, t: Trim) -> Trim {
        Trim {
            members: self.members_of(t.members),
            counts: self.counts_of(&t.counts),
            join: t.join.map(|(r, inc)| (self.member(r), inc)),
            ..t
        }
    }

    /// Counters and state, in member ids.
    pub fn status(&self) -> McastStatus {
        let s = self.engine.status();
        let id = |p: MemberId| self.member(p);
        McastStatus {
            wedged: s.wedged.map(|w| match w {
                WedgeCause::PeerDown(p) => WedgeCause::PeerDown(id(p)),
                WedgeCause::SlotOverwritten(p) => WedgeCause::SlotOverwritten(id(p)),
                WedgeCause::Suspicion(p) => WedgeCause::Suspicion(id(p)),
                WedgeCause::Join(p) => WedgeCause::Join(id(p)),
                WedgeCause::Wedged(p) => WedgeCause::Wedged(id(p)),
            }),
            halted: s.halted.map(|h| match h {
                HaltCause::TrimUnreadable(p) => HaltCause::TrimUnreadable(id(p)),
                other => other,
            }),
            view: self.members_of(s.view),
            suspected: self.members_of(s.suspected),
            received: self.counts_of(&s.received),
            last_trim: s.last_trim.map(|t| self.trim_of(t)),
            ..s
        }
    }

    /// Follows the top-level group's installed view (`top_view`, a bit per
    /// member id; `top_incarnation`, the incarnation of each member the
    /// top-level group pinned): a process of our view that the top-level
    /// group removed by a decided view change is gone for good, and counts
    /// as such in our view change ([`McastEngine::set_parent_removed`]);
    /// so a subgroup of two goes on without a member the top-level
    /// majority removed, as Derecho's subgroups follow the top-level view.
    /// The removal is of that process (its incarnation), not of the member
    /// id: a new process in its place that joins us before it joins the
    /// top-level view again is not removed; it stays until a view of ours
    /// leaves the process out. Pass only views the top-level group
    /// installed, while this member is in them.
    pub fn follow_parent(
        &mut self,
        top_view: u64,
        top_incarnation: impl Fn(MemberId) -> Option<u64>,
    ) {
        #[cfg(feature = "mutation-testing")]
        if self.ignore_parent {
            return;
        }
        let view = self.engine.view();
        let mut ranks = 0u64;
        for r in 0..usize::from(self.lay.group.members) {
            let id = self.ids[r];
            let ours = self.engine.pinned_incarnation(MemberId(r as u8));
            let removed = &mut self.parent_removed[id.index()];
            if view & (1 << r) == 0 {
                *removed = 0;
                continue;
            }
            if let Some(inc) = ours {
                if top_view & (1 << id.0) == 0 && top_incarnation(id) == Some(inc) {
                    *removed = inc;
                }
                if *removed == inc {
                    ranks |= 1 << r;
                }
            }
        }
        self.engine.set_parent_removed(ranks);
    }

    /// The current view's members, a bit per member id.
    pub fn view_members(&self) -> u64 {
        self.members_of(self.engine.view())
    }

    /// Multicasts `payload` to the subgroup ([`McastEngine::send`]).
    pub fn send(&mut self, payload: &[u8]) -> Result<u64, SendError> {
        self.engine.send(payload)
    }

    /// The next delivery ([`McastEngine::poll_delivery`]), its sender a
    /// member id.
    pub fn poll_delivery(&mut self, out: &mut [u8]) -> Option<McastDelivery> {
        let d = self.engine.poll_delivery(out)?;
        Some(McastDelivery {
            sender: self.member(d.sender),
            ..d
        })
    }
}

/// `action` with its peer mapped by `to` (`None` when `to` has no image
/// for it).
fn map_peer(action: &Action, to: impl Fn(MemberId) -> Option<MemberId>) -> Option<Action> {
    Some(match *action {
        Action::Post(mut wr) => {
            wr.peer = to(wr.peer)?;
            Action::Post(wr)
        }
        Action::SetAccess {
            peer,
            region,
            access,
        } => Action::SetAccess {
            peer: to(peer)?,
            region,
            access,
        },
        Action::Reconnect { peer, channel } => Action::Reconnect {
            peer: to(peer)?,
            channel,
        },
    })
}

impl<M: Memory> Engine for SubgroupEngine<M> {
    fn name(&self) -> &'static str {
        "subgroup"
    }

    fn handle_completion(&mut self, now_ns: u64, mut completion: Completion) {
        // Only our own work requests carry our tag; a peer outside the
        // subgroup is never posted to.
        if let Some(rank) = self.rank(completion.peer) {
            completion.peer = rank;
            self.engine.handle_completion(now_ns, completion);
        }
    }

    fn handle_timeout(&mut self, now_ns: u64) {
        self.engine.handle_timeout(now_ns);
    }

    fn handle_peer_down(&mut self, now_ns: u64, peer: MemberId) {
        // A member outside the subgroup does not disturb it.
        if let Some(rank) = self.rank(peer) {
            self.engine.handle_peer_down(now_ns, rank);
        }
    }

    fn handle_peer_up(&mut self, now_ns: u64, peer: MemberId) {
        if let Some(rank) = self.rank(peer) {
            self.engine.handle_peer_up(now_ns, rank);
        }
    }

    fn poll_action(&mut self) -> Option<Action> {
        let a = self.engine.poll_action()?;
        // Ranks the engine uses always have a member.
        map_peer(&a, |r| Some(self.member(r)))
    }

    fn handle_action_failed(&mut self, now_ns: u64, action: &Action, error: FabricError) {
        if let Some(a) = map_peer(action, |p| self.rank(p)) {
            self.engine.handle_action_failed(now_ns, &a, error);
        }
    }

    fn next_deadline(&self) -> u64 {
        self.engine.next_deadline()
    }
}

#[cfg(test)]
mod tests;
