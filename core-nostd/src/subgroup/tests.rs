//! Subgroups among a few members over in-process memories: a fabric that
//! copies each WRITE at once, refusing (and recording) any addressed
//! outside the region's access set.

extern crate std;
use super::*;
use crate::config::ConfigError;
use crate::fabric::{Op, WcStatus, WorkRequest};
use crate::layout::Layout;
use crate::test_memory::TestMemory;
use std::vec;
use std::vec::Vec;

const MEMBERS: u8 = 4;

fn config(id: u8, subgroups: &[u8]) -> Config {
    let mut c = Config::new(MEMBERS, MemberId(id));
    c.mcast_window = 8;
    c.mcast_payload_bytes_max = 64;
    c.incarnation = 100 + u64::from(id);
    c.mcast_subgroups[..subgroups.len()].copy_from_slice(subgroups);
    c
}

struct World {
    layout: Layout,
    mems: Vec<TestMemory>,
    /// Per member, its engine of subgroup `index` (if it is a member).
    engines: Vec<Option<SubgroupEngine<TestMemory>>>,
    /// Work requests the fabric refused: (from, to, region).
    refused: Vec<(MemberId, MemberId, RegionId)>,
    delivered: Vec<Vec<(MemberId, u64, Vec<u8>)>>,
    now: u64,
}

impl World {
    fn new(subgroups: &[u8], index: usize) -> World {
        let configs: Vec<Config> = (0..MEMBERS).map(|i| config(i, subgroups)).collect();
        let layout = Layout::new(&configs[0]).unwrap();
        let mems: Vec<TestMemory> = (0..MEMBERS).map(|_| TestMemory::new(&layout)).collect();
        let lay = layout.subgroups[index].unwrap();
        let engines = (0..usize::from(MEMBERS))
            .map(|i| SubgroupEngine::new(&configs[i], lay, mems[i].clone(), 0))
            .collect();
        World {
            layout,
            mems,
            engines,
            refused: Vec::new(),
            delivered: vec![Vec::new(); usize::from(MEMBERS)],
            now: 0,
        }
    }

    /// One WRITE, as an honest fabric executes it: refused unless the
    /// target's region grants the sender access.
    fn execute(&mut self, from: usize, wr: &WorkRequest) -> WcStatus {
        let Op::Write { local, remote, len } = wr.op else {
            panic!("multicast posts only WRITEs");
        };
        let spec = self
            .layout
            .regions()
            .find(|r| r.id == remote.region)
            .expect("a registered region");
        if !spec.remote.granted_from_start(MemberId(from as u8)) || wr.peer.index() == from {
            self.refused
                .push((MemberId(from as u8), wr.peer, remote.region));
            return WcStatus::AccessDenied;
        }
        let mut buf = vec![0u8; len as usize];
        self.mems[from].read(local, &mut buf);
        self.mems[wr.peer.index()].write(remote, &buf);
        WcStatus::Ok
    }

    fn step(&mut self) {
        self.now += 1_000;
        let now = self.now;
        for i in 0..self.engines.len() {
            let Some(e) = self.engines[i].as_mut() else {
                continue;
            };
            e.handle_timeout(now);
            let mut out = [0u8; 64];
            while let Some(d) = e.poll_delivery(&mut out) {
                self.delivered[i].push((d.sender, d.index, out[..d.len].to_vec()));
            }
            let mut posts = Vec::new();
            while let Some(a) = self.engines[i].as_mut().unwrap().poll_action() {
                if let Action::Post(wr) = a {
                    posts.push(wr);
                }
            }
            for wr in posts {
                let status = self.execute(i, &wr);
                self.engines[i].as_mut().unwrap().handle_completion(
                    now,
                    Completion {
                        wr_id: wr.wr_id,
                        peer: wr.peer,
                        status,
                    },
                );
            }
        }
    }

    fn engine(&mut self, i: usize) -> &mut SubgroupEngine<TestMemory> {
        self.engines[i].as_mut().unwrap()
    }

    fn run_until(&mut self, mut done: impl FnMut(&World) -> bool) {
        for _ in 0..2_000 {
            if done(self) {
                return;
            }
            self.step();
        }
        panic!("the subgroup did not get there in 2,000 steps");
    }

    fn region_untouched(&self, member: usize, region: RegionId) -> bool {
        let bytes = self.layout.region_bytes(region) as usize;
        let mut buf = vec![0u8; bytes];
        self.mems[member].read(crate::fabric::Addr::new(region, 0), &mut buf);
        buf.iter().all(|&b| b == 0)
    }
}

#[test]
fn ranks_and_member_ids_translate_both_ways() {
    let c = config(0, &[0b1010, 0b0111]);
    let [Some(a), Some(b), None, ..] = SubgroupLayout::all(&c) else {
        panic!("two subgroups");
    };
    assert_eq!(a.group.members, 2);
    assert_eq!(a.group.region, subgroup_region(0));
    assert_eq!(b.group.region, subgroup_region(1));
    assert_eq!(a.rank_of(MemberId(1)), Some(MemberId(0)));
    assert_eq!(a.rank_of(MemberId(3)), Some(MemberId(1)));
    assert_eq!(a.rank_of(MemberId(0)), None);
    assert_eq!(a.rank_of(MemberId(2)), None);
    assert_eq!(a.rank_of(MemberId(200)), None);
    assert_eq!(a.member_at(MemberId(0)), MemberId(1));
    assert_eq!(a.member_at(MemberId(1)), MemberId(3));
    assert_eq!(b.member_at(MemberId(2)), MemberId(2));
    assert_eq!(a.region().remote, RemoteAccess::Only(0b1010));
    assert!(a.region().remote.granted_from_start(MemberId(3)));
    assert!(!a.region().remote.granted_from_start(MemberId(0)));
    assert_eq!(subgroup_of_tag(subgroup_tag(5)), Some(5));
    assert_eq!(subgroup_of_tag(EngineTag::MULTICAST), None);
    assert_eq!(subgroup_of_tag(EngineTag(SUBGROUP_TAG_BASE + 6)), None);
}

#[test]
fn the_layout_registers_each_subgroup_and_hashes_its_members() {
    let plain = Layout::new(&config(0, &[])).unwrap();
    let one = Layout::new(&config(0, &[0b1010])).unwrap();
    let other = Layout::new(&config(0, &[0b0110])).unwrap();
    assert_eq!(plain.region_bytes(subgroup_region(0)), 0);
    assert!(one.region_bytes(subgroup_region(0)) > 0);
    // Two rings (two members), not four.
    assert!(one.region_bytes(subgroup_region(0)) < one.multicast.unwrap().region_bytes);
    assert!(one.regions().any(|r| r.id == subgroup_region(0)));
    assert_ne!(plain.hash, one.hash);
    assert_ne!(one.hash, other.hash, "members are part of the layout");
}

#[test]
fn bad_subgroup_configurations_are_refused_naming_the_field() {
    let refused = |c: Config| match c.validate() {
        Err(ConfigError::Inconsistent { field, reason }) => {
            assert_eq!(field, "mcast_subgroups");
            reason
        }
        other => panic!("expected a refusal, got {other:?}"),
    };
    let mut c = config(0, &[0b0011]);
    c.initial_members = 3;
    c.mcast_subgroups[0] = 0b1001;
    assert!(refused(c).contains("outside"));
    assert!(refused(config(0, &[0, 0b0011])).contains("first"));
    let mut c = config(0, &[0b0011]);
    c.mcast_window = 0;
    assert!(refused(c).contains("mcast_window"));
    let mut c = config(0, &[0b0011]);
    c.mcast_persistent = true;
    assert!(refused(c).contains("volatile"));
    assert!(config(0, &[0b0011, 0b1100]).validate().is_ok());
}

#[test]
fn a_subgroup_delivers_the_same_order_among_its_members_only() {
    // Subgroup 1 is members 1 and 3; members 0 and 2 have no engine.
    let mut w = World::new(&[0b0111, 0b1010], 1);
    assert!(w.engines[0].is_none() && w.engines[2].is_none());
    w.run_until(|w| {
        [1, 3]
            .iter()
            .all(|&i| w.engines[i].as_ref().unwrap().status().started)
    });
    for k in 0..5u8 {
        w.engine(1).send(&[1, k]).unwrap();
        w.engine(3).send(&[3, k]).unwrap();
    }
    w.run_until(|w| w.delivered[1].len() == 10 && w.delivered[3].len() == 10);
    assert_eq!(w.delivered[1], w.delivered[3]);
    for (sender, _, payload) in &w.delivered[1] {
        // Senders come out as member ids, their payloads intact.
        assert_eq!(sender.0, payload[0]);
    }
    assert!(w.refused.is_empty(), "{:?}", w.refused);
    // Nothing reached the members outside it.
    for outside in [0, 2] {
        assert!(w.region_untouched(outside, subgroup_region(1)));
    }
    let s = w.engines[1].as_ref().unwrap().status();
    assert_eq!(s.view, 0b1010);
    assert_eq!(s.received[1], 5);
    assert_eq!(s.received[3], 5);
    assert_eq!(s.received[0], 0);
}

#[test]
fn only_a_members_failure_changes_the_subgroups_view() {
    // Members 0, 1 and 3 (a majority survives one loss); 2 is outside.
    let mut w = World::new(&[0b1011], 0);
    w.run_until(|w| {
        [0, 1, 3]
            .iter()
            .all(|&i| w.engines[i].as_ref().unwrap().status().started)
    });
    let now = w.now;
    // Member 2 is outside: its death does not wedge the subgroup.
    for i in [0, 1, 3] {
        w.engine(i).handle_peer_down(now, MemberId(2));
    }
    w.engine(1).send(b"still").unwrap();
    w.run_until(|w| w.delivered[3].len() == 1 && w.delivered[0].len() == 1);
    assert_eq!(w.engines[1].as_ref().unwrap().status().wedged, None);
    // Member 3 is a member: 0 and 1 go on in the next view.
    w.engines[3] = None;
    for i in [0, 1] {
        w.engine(i).handle_peer_down(now, MemberId(3));
    }
    w.run_until(|w| {
        [0, 1]
            .iter()
            .all(|&i| w.engines[i].as_ref().unwrap().view_members() == 0b0011)
    });
    let s = w.engines[1].as_ref().unwrap().status();
    assert_eq!(s.epoch, 1);
    assert_eq!(s.last_trim.unwrap().members, 0b0011);
    w.engine(1).send(b"after").unwrap();
    w.run_until(|w| w.delivered[0].len() == 2 && w.delivered[1].len() == 2);
    assert_eq!(w.delivered[0], w.delivered[1]);
    assert_eq!(w.delivered[0][1].0, MemberId(1));
    assert!(w.refused.is_empty(), "{:?}", w.refused);
}

#[test]
fn a_subgroup_of_two_goes_on_without_a_member_the_top_level_removed() {
    let mut w = World::new(&[0b1010], 0);
    w.run_until(|w| {
        [1, 3]
            .iter()
            .all(|&i| w.engines[i].as_ref().unwrap().status().started)
    });
    let now = w.now;
    w.engines[3] = None;
    w.engine(1).handle_peer_down(now, MemberId(3));
    for _ in 0..50 {
        w.step();
    }
    // Alone, member 1 has no majority of two: it waits.
    let s = w.engines[1].as_ref().unwrap().status();
    assert!(s.minority && s.epoch == 0, "{s:?}");
    let incarnations = |id: MemberId| Some(100 + u64::from(id.0));
    // A top-level view that still has member 3 changes nothing.
    w.engine(1).follow_parent(0b1111, incarnations);
    for _ in 0..50 {
        w.step();
    }
    assert_eq!(w.engines[1].as_ref().unwrap().status().epoch, 0);
    // Nor does a removal of another process in member 3's place (the
    // top level knows a newer incarnation of member 3).
    w.engine(1)
        .follow_parent(0b0111, |id| Some(200 + u64::from(id.0)));
    for _ in 0..50 {
        w.step();
    }
    assert_eq!(w.engines[1].as_ref().unwrap().status().epoch, 0);
    // The top-level group decided a view without member 3: the subgroup
    // ends its epoch without it.
    w.engine(1).follow_parent(0b0111, incarnations);
    w.run_until(|w| w.engines[1].as_ref().unwrap().view_members() == 0b0010);
    w.engine(1).send(b"alone").unwrap();
    w.run_until(|w| w.delivered[1].len() == 1);
    // A new process in 3's place joins the top-level view again; the
    // removal no longer applies (3 is out of the subgroup's view).
    w.engine(1)
        .follow_parent(0b1111, |id| Some(300 + u64::from(id.0)));
    assert_eq!(w.engines[1].as_ref().unwrap().view_members(), 0b0010);
}

#[cfg(feature = "mutation-testing")]
#[test]
fn ranks_taken_for_member_ids_write_outside_the_subgroup() {
    let mut configs: Vec<Config> = (0..MEMBERS).map(|i| config(i, &[0b1010])).collect();
    for c in &mut configs {
        c.mutation = crate::config::Mutation::SubgroupRanksAsIds;
    }
    let mut w = World::new(&[0b1010], 0);
    let lay = w.layout.subgroups[0].unwrap();
    w.engines = (0..usize::from(MEMBERS))
        .map(|i| SubgroupEngine::new(&configs[i], lay, w.mems[i].clone(), 0))
        .collect();
    for _ in 0..50 {
        w.step();
    }
    assert!(!w.refused.is_empty());
}
