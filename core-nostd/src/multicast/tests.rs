//! The multicast engine among a few members over in-process memories: a
//! fabric that copies each WRITE at once, or holds a member's incoming
//! WRITEs to play a slow receiver.

extern crate std;
use super::*;
use crate::fabric::WcStatus;
use crate::layout::Layout;
use crate::test_memory::TestMemory;
use std::vec;
use std::vec::Vec;

struct Group {
    engines: Vec<Option<McastEngine<TestMemory>>>,
    mems: Vec<TestMemory>,
    config: Vec<Config>,
    /// Members whose incoming WRITEs wait (in order) instead of landing.
    held: Vec<bool>,
    /// Members whose incoming WRITEs fail (a broken channel): they do not
    /// land and complete with an error.
    broken: Vec<bool>,
    /// Reconnects asked: (by, peer).
    reconnects: Vec<(usize, MemberId)>,
    queued: Vec<(usize, WorkRequest)>,
    now: u64,
    delivered: Vec<Vec<(MemberId, u64, Vec<u8>)>>,
    /// Restart tails each member was asked to deliver from its log.
    tails: Vec<Vec<RestartTail>>,
    /// Members whose host does not sync the record of a view installed.
    views_held: Vec<bool>,
}

fn config(n: u8, id: u8, window: u32) -> Config {
    let mut c = Config::new(n, MemberId(id));
    c.mcast_window = window;
    c.mcast_payload_bytes_max = 64;
    c.incarnation = 100 + u64::from(id);
    c
}

impl Group {
    fn new(n: u8, window: u32) -> Group {
        let config: Vec<Config> = (0..n).map(|i| config(n, i, window)).collect();
        let layout = Layout::new(&config[0]).unwrap();
        let mems: Vec<TestMemory> = (0..n).map(|_| TestMemory::new(&layout)).collect();
        let engines = (0..n as usize)
            .map(|i| McastEngine::new(&config[i], mems[i].clone(), 0))
            .collect();
        Group {
            engines,
            mems,
            config,
            held: vec![false; n as usize],
            broken: vec![false; n as usize],
            reconnects: Vec::new(),
            queued: Vec::new(),
            now: 0,
            delivered: vec![Vec::new(); n as usize],
            tails: vec![Vec::new(); n as usize],
            views_held: vec![false; n as usize],
        }
    }

    /// A group in the persistent mode.
    fn persistent(n: u8, window: u32) -> Group {
        let mut g = Group::new(n, window);
        for c in &mut g.config {
            c.mcast_persistent = true;
        }
        g.engines = (0..usize::from(n))
            .map(|i| McastEngine::new(&g.config[i], g.mems[i].clone(), 0))
            .collect();
        g
    }

    fn engine(&mut self, i: usize) -> &mut McastEngine<TestMemory> {
        self.engines[i].as_mut().unwrap()
    }

    fn land(&mut self, from: usize, wr: &WorkRequest) {
        let Op::Write { local, remote, len } = wr.op else {
            panic!("multicast posts only WRITEs");
        };
        let mut buf = vec![0u8; len as usize];
        self.mems[from].read(local, &mut buf);
        self.mems[wr.peer.index()].write(remote, &buf);
    }

    /// One step of every member: timers, deliveries, posts.
    fn step(&mut self) {
        self.now += 1_000;
        for i in 0..self.engines.len() {
            let now = self.now;
            let Some(e) = self.engines[i].as_mut() else {
                continue;
            };
            e.handle_timeout(now);
            if let Some((epoch, _)) = e.view_to_persist() {
                // The host syncs the view's record (unless held).
                if !self.views_held[i] {
                    e.view_persisted(epoch);
                }
            }
            if let Some(tail) = e.restart_tail() {
                // The host delivers it from its log at once.
                self.tails[i].push(tail);
                e.restart_delivered();
            }
            let mut out = [0u8; 64];
            while let Some(d) = e.poll_delivery(&mut out) {
                self.delivered[i].push((d.sender, d.index, out[..d.len].to_vec()));
            }
            let mut posts = Vec::new();
            while let Some(a) = self.engines[i].as_mut().unwrap().poll_action() {
                match a {
                    Action::Post(wr) => posts.push(wr),
                    Action::Reconnect { peer, .. } => self.reconnects.push((i, peer)),
                    other => panic!("multicast asked {other:?}"),
                }
            }
            for wr in posts {
                let peer = wr.peer.index();
                let status = if self.broken[peer] {
                    WcStatus::Flushed
                } else if self.held[peer] {
                    self.queued.push((i, wr));
                    WcStatus::Ok
                } else {
                    self.land(i, &wr);
                    WcStatus::Ok
                };
                self.engine(i).handle_completion(
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

    fn steps(&mut self, n: usize) {
        for _ in 0..n {
            self.step();
        }
    }

    fn release(&mut self, member: usize) {
        self.held[member] = false;
        let queued = core::mem::take(&mut self.queued);
        for (from, wr) in queued {
            if wr.peer.index() == member {
                self.land(from, &wr);
            } else {
                self.queued.push((from, wr));
            }
        }
    }
}

fn order(g: &Group, i: usize) -> Vec<(u8, u64)> {
    g.delivered[i].iter().map(|(s, k, _)| (s.0, *k)).collect()
}

#[test]
fn every_member_delivers_the_same_messages_in_round_robin_order() {
    let mut g = Group::new(3, 16);
    g.steps(3);
    assert!(
        g.engine(0).status().started,
        "rows seen, incarnations pinned"
    );
    for round in 0..5u8 {
        for m in 0..3 {
            g.engine(m).send(&[m as u8, round]).unwrap();
        }
        g.steps(2);
    }
    g.steps(5);
    let expected: Vec<(u8, u64)> = (0..5u64)
        .flat_map(|k| (0..3u8).map(move |s| (s, k)))
        .collect();
    for m in 0..3 {
        assert_eq!(order(&g, m), expected, "member {m}");
        for (s, k, payload) in &g.delivered[m] {
            assert_eq!(payload, &vec![s.0, *k as u8]);
        }
    }
    assert_eq!(
        g.engine(1).status().sent_nulls,
        0,
        "everyone sent: no nulls"
    );
}

#[test]
fn idle_senders_fill_their_turns_with_nulls_that_are_never_delivered() {
    let mut g = Group::new(3, 8);
    g.steps(3);
    for i in 0..20u8 {
        // More than the window: the sender waits for deliveries.
        while g.engine(1).send(&[i]).is_err() {
            g.step();
        }
    }
    g.steps(10);
    for m in 0..3 {
        let got: Vec<Vec<u8>> = g.delivered[m].iter().map(|d| d.2.clone()).collect();
        assert_eq!(
            got,
            (0..20u8).map(|i| vec![i]).collect::<Vec<_>>(),
            "member {m}"
        );
        assert!(g.delivered[m].iter().all(|d| d.0 == MemberId(1)));
    }
    assert!(g.engine(0).status().sent_nulls >= 19);
    assert!(g.engine(2).status().sent_nulls >= 19);
    assert_eq!(g.engine(1).status().sent_nulls, 0);
    // Idle again: nobody sends anything more.
    let sent: Vec<u64> = (0..3).map(|m| g.engine(m).status().sent).collect();
    g.steps(5);
    let after: Vec<u64> = (0..3).map(|m| g.engine(m).status().sent).collect();
    assert_eq!(sent, after, "no nulls while every sender is idle");
}

#[test]
fn nothing_is_delivered_until_every_member_received_it_and_a_full_window_waits() {
    let mut g = Group::new(3, 4);
    g.steps(3);
    g.held[2] = true;
    for i in 0..4u8 {
        g.engine(0).send(&[i]).unwrap();
    }
    assert_eq!(g.engine(0).send(&[9]), Err(SendError::WindowFull));
    g.steps(6);
    for m in 0..3 {
        assert!(
            g.delivered[m].is_empty(),
            "member {m} delivered before 2 received"
        );
    }
    assert_eq!(g.engine(0).send(&[9]), Err(SendError::WindowFull));
    g.release(2);
    g.steps(6);
    for m in 0..3 {
        assert_eq!(g.delivered[m].len(), 4, "member {m}");
    }
    assert_eq!(g.engine(0).send(&[9]), Ok(4), "the window moved");
}

#[test]
fn a_torn_or_foreign_slot_is_not_received() {
    let mut g = Group::new(2, 4);
    g.steps(3);
    let lay = *g.engine(0).layout();
    // Member 1's slot 0 in member 0's memory: a head without the rest.
    let at = lay.slot(MemberId(1), 0);
    g.mems[0].store_u64(at, 1);
    g.steps(2);
    assert_eq!(g.engine(0).received(MemberId(1)), 0, "torn slot taken");
    // A whole slot of another incarnation (a restarted process).
    let payload = [7u8; 8];
    let meta_word = meta(8, KIND_DATA, MemberId(1));
    let other = 999;
    g.mems[0].store_u64(at.add(8), meta_word);
    g.mems[0].store_u64(at.add(16), other);
    g.mems[0].store_u64(at.add(24), 0);
    g.mems[0].write(at.add(32), &payload);
    g.mems[0].store_u64(at.add(40), slot_checksum(1, meta_word, other, 0, &payload));
    g.mems[0].store_u64(at.add(48), 1);
    g.steps(2);
    assert_eq!(g.engine(0).received(MemberId(1)), 0, "foreign slot taken");
    // The same slot of the pinned incarnation is taken.
    let inc = g.config[1].incarnation;
    g.mems[0].store_u64(at.add(16), inc);
    g.mems[0].store_u64(at.add(40), slot_checksum(1, meta_word, inc, 0, &payload));
    g.steps(1);
    assert_eq!(g.engine(0).received(MemberId(1)), 1);
}

#[test]
fn a_restarted_member_is_not_counted_by_the_running_group() {
    let mut g = Group::new(3, 8);
    g.steps(3);
    g.engine(0).send(b"a").unwrap();
    g.steps(4);
    // Member 2 restarts: fresh memory, a new incarnation.
    let layout = Layout::new(&g.config[2]).unwrap();
    g.mems[2] = TestMemory::new(&layout);
    g.config[2].incarnation = 777;
    g.engines[2] = McastEngine::new(&g.config[2], g.mems[2].clone(), g.now);
    g.delivered[2].clear();
    g.steps(4);
    // Its row now reaches the others with another incarnation: they stop
    // counting it, so a new message never becomes stable.
    g.engine(0).send(b"b").unwrap();
    g.steps(6);
    assert_eq!(
        g.delivered[0].len(),
        1,
        "delivered a message the restarted member may lack"
    );
    assert_eq!(g.delivered[1].len(), 1);
    assert!(g.delivered[2].is_empty());
    // And whatever it sends is ignored.
    // It never sends into the running group: the others' rows show the
    // incarnations they pinned, its predecessor's among them.
    assert_eq!(g.engine(2).send(b"z"), Err(SendError::NotStarted));
    g.steps(4);
    assert_eq!(g.engine(2).status().sent, 0, "not even nulls");
}

#[test]
fn a_message_overwritten_before_delivery_wedges_instead_of_being_delivered() {
    let mut g = Group::new(3, 4);
    g.steps(3);
    // Member 2 does not get it yet: member 1 receives it, cannot deliver.
    g.held[2] = true;
    g.engine(0).send(b"hello").unwrap();
    g.steps(3);
    assert_eq!(g.engine(1).received(MemberId(0)), 1);
    assert!(g.delivered[1].is_empty());
    // Member 1's copy changes after it was received, before delivery.
    let at = g.engine(0).layout().slot(MemberId(0), 0);
    g.mems[1].write(at.add(32), b"HELLO");
    g.release(2);
    g.steps(8);
    assert!(g.delivered[1].is_empty(), "a corrupt copy was delivered");
    assert_eq!(
        g.engine(1).wedged(),
        Some(WedgeCause::SlotOverwritten(MemberId(0)))
    );
    // It suspects the sender, which is excluded; the trim holds the
    // message member 1 no longer has whole, so member 1 stops too.
    assert_eq!(g.engine(0).halted(), Some(HaltCause::Excluded));
    assert_eq!(
        g.engine(1).halted(),
        Some(HaltCause::TrimUnreadable(MemberId(0)))
    );
    assert_eq!(g.engine(1).send(b"x"), Err(SendError::Halted));
    assert_eq!(g.delivered[0].len(), 1, "the sender's own copy is intact");
    assert_eq!(g.delivered[2].len(), 1);
}

/// Kills member `i`: it runs no more, and every other member is told.
fn kill(g: &mut Group, i: usize) {
    g.engines[i] = None;
    let now = g.now;
    for e in g.engines.iter_mut().flatten() {
        e.handle_peer_down(now, MemberId(i as u8));
    }
}

#[test]
fn a_peer_that_is_gone_is_removed_by_a_view_change() {
    let mut g = Group::new(3, 4);
    g.steps(3);
    let now = g.now;
    g.engine(0).handle_peer_down(now, MemberId(2));
    assert_eq!(g.engine(0).send(b"x"), Err(SendError::Wedged));
    assert_eq!(
        g.engine(0).wedged(),
        Some(WedgeCause::PeerDown(MemberId(2)))
    );
    assert_eq!(
        g.engine(1).send(b"y"),
        Ok(0),
        "a member that does not know goes on"
    );
    g.steps(1);
    assert_eq!(
        g.engine(0).received(MemberId(1)),
        0,
        "a wedged member receives nothing more"
    );
    g.steps(6);
    // Member 2 (alive here, but suspected) sees it and stops; 0 and 1
    // end the epoch with the same trim: "y" was received by 1 alone, so
    // it is left out, and neither delivers it.
    assert_eq!(g.engine(2).halted(), Some(HaltCause::Excluded));
    for i in 0..2 {
        let e = g.engine(i);
        assert_eq!((e.epoch(), e.view()), (1, 0b011), "member {i}");
        assert_eq!(e.status().last_trim.unwrap().counts[1], 0);
        assert!(g.delivered[i].is_empty());
    }
    assert_eq!(g.engine(1).status().trimmed_own, 1);
    // The new view works: both send, both deliver both, in one order.
    g.engine(1).send(b"y again").unwrap();
    g.engine(0).send(b"z").unwrap();
    g.steps(4);
    assert_eq!(order(&g, 0), vec![(0, 0), (1, 0)]);
    assert_eq!(order(&g, 0), order(&g, 1));
}

#[test]
fn after_a_death_during_traffic_the_survivors_deliver_the_same_sequence() {
    for held_member in [1usize, 3] {
        let mut g = Group::new(4, 8);
        g.steps(3);
        // Member `held_member` lags, so the members have received
        // different prefixes when member 2 dies.
        g.held[held_member] = true;
        for k in 0..5u8 {
            for i in [0usize, 2, 3] {
                let _ = g.engine(i).send(&[i as u8, k]);
            }
            g.steps(1);
        }
        kill(&mut g, 2);
        g.release(held_member);
        g.steps(12);
        let survivors = [0usize, 1, 3];
        for &i in &survivors {
            let e = g.engine(i);
            assert_eq!((e.epoch(), e.view()), (1, 0b1011), "member {i}");
        }
        let seq0: Vec<_> = g.delivered[0].clone();
        for &i in &survivors[1..] {
            assert_eq!(
                g.delivered[i], seq0,
                "member {i} delivered another sequence"
            );
        }
        // Every message inside the trim was delivered, none outside.
        let trim = g.engine(0).status().last_trim.unwrap();
        for s in [0u8, 2, 3] {
            let of_s = seq0.iter().filter(|(m, _, _)| m.0 == s).count() as u64;
            assert!(of_s <= trim.counts[usize::from(s)]);
        }
        // And the new view delivers again.
        for &i in &survivors {
            g.engine(i).send(b"next").unwrap();
        }
        g.steps(4);
        for &i in &survivors {
            assert_eq!(g.delivered[i].len(), seq0.len() + 3, "member {i}");
        }
    }
}

#[test]
fn a_trim_is_acted_on_only_once_a_majority_of_the_view_echoed_it() {
    let mut g = Group::new(5, 4);
    g.steps(3);
    // Members 2 and 3 hear nothing more; 4 dies.
    g.held[2] = true;
    g.held[3] = true;
    kill(&mut g, 4);
    g.steps(6);
    // Member 0 leads but 2 and 3 never showed it their wedged rows... they
    // did not even learn of the death; nothing is decided.
    assert_eq!(g.engine(0).epoch(), 0);
    assert!(g.engine(0).ending().is_none());
    g.release(2);
    g.release(3);
    g.steps(8);
    for i in 0..4 {
        assert_eq!((g.engine(i).epoch(), g.engine(i).view()), (1, 0b1111));
    }
}

#[test]
fn a_new_leader_adopts_the_trim_its_dead_predecessor_proposed_and_others_echoed() {
    let mut g = Group::new(5, 8);
    g.steps(3);
    for k in 0..3u8 {
        for i in 0..4usize {
            let _ = g.engine(i).send(&[i as u8, k]);
        }
        g.steps(1);
    }
    // Member 1 lags: the others received more than it did. Member 3
    // hears nothing more either, so member 0's proposal is echoed by
    // member 2 alone: not a majority, not decided.
    g.held[1] = true;
    g.engine(3).send(b"late").unwrap();
    g.steps(1);
    g.held[3] = true;
    kill(&mut g, 4);
    let mut proposal = None;
    for _ in 0..20 {
        g.steps(1);
        if let Some(t) = g.engine(2).trim_for_test() {
            proposal = Some(t);
            break;
        }
    }
    let proposal = proposal.expect("member 2 echoed member 0's trim");
    assert_eq!((proposal.ballot, proposal.members), (1, 0b1111));
    assert_eq!(g.engine(0).epoch(), 0, "decided without a majority");
    kill(&mut g, 0);
    g.release(1);
    g.release(3);
    // Member 1 leads now: the trim that ends epoch 0 everywhere is the
    // one member 2 echoed (it might have been decided), under member 1's
    // ballot.
    let mut ended = [None; 4];
    for _ in 0..30 {
        g.steps(1);
        for (i, e) in ended.iter_mut().enumerate().skip(1) {
            let engine = g.engines[i].as_ref().unwrap();
            if e.is_none() && engine.epoch() == 1 {
                *e = engine.status().last_trim;
            }
        }
    }
    for (i, t) in ended.iter().enumerate().skip(1) {
        let t = t.expect("epoch 0 ended");
        assert!(
            t.same_value(&proposal),
            "member {i} ended with another trim"
        );
        assert_eq!(t.ballot, 2);
    }
    // Epoch 1 still had member 0 (the adopted trim's view): it ended too,
    // without it.
    for i in 1..4 {
        assert_eq!((g.engine(i).epoch(), g.engine(i).view()), (2, 0b1110));
    }
    assert_eq!(g.delivered[1], g.delivered[2]);
    assert_eq!(g.delivered[2], g.delivered[3]);
}

#[test]
fn a_member_that_suspects_a_majority_waits_without_leading() {
    let mut g = Group::new(3, 4);
    g.steps(3);
    let now = g.now;
    g.engine(0).handle_peer_down(now, MemberId(1));
    g.engine(0).handle_peer_down(now, MemberId(2));
    g.steps(3);
    let e = g.engine(0);
    assert!(e.status().minority);
    assert_eq!(e.halted(), None);
    assert_eq!(e.trim_for_test(), None, "it proposed although cut off");
    assert_eq!(e.epoch(), 0);
    assert_eq!(g.engine(0).send(b"x"), Err(SendError::Wedged));
}

/// A member that stops for good says so in its row (it suspects itself):
/// members already in the next view suspect it and go on without it.
#[test]
fn a_member_that_stopped_in_the_ended_epoch_is_dropped_by_the_next_view() {
    let mut g = Group::new(5, 4);
    g.steps(3);
    // Member 4 dies. Members 0, 1 and 2 get through the view change;
    // member 3 hears nothing more until it has stopped.
    g.held[3] = true;
    kill(&mut g, 4);
    let mut guard = 0;
    while (0..3).any(|i| g.engine(i).epoch() == 0) {
        g.steps(1);
        guard += 1;
        assert!(guard < 30, "members 0 to 2 did not install the next view");
    }
    assert_eq!(g.engine(0).view(), 0b01111);
    // Member 3 stops (here: a trim it cannot reach) and says so.
    let now = g.now;
    let e3 = g.engine(3);
    e3.halt(HaltCause::TrimUnreadable(MemberId(0)));
    e3.handle_timeout(now);
    g.release(3);
    g.steps(12);
    for i in 0..3 {
        let e = g.engine(i);
        assert_eq!((e.epoch(), e.view()), (2, 0b00111), "member {i}");
        assert_eq!(e.halted(), None);
    }
    g.engine(0).send(b"on").unwrap();
    g.steps(4);
    assert_eq!(g.delivered[1].last().unwrap().2, b"on".to_vec());
}

#[test]
fn sends_before_start_and_oversized_ones_are_refused() {
    let mut g = Group::new(3, 4);
    assert_eq!(g.engine(0).send(b"x"), Err(SendError::NotStarted));
    g.steps(3);
    assert_eq!(g.engine(0).send(&[0u8; 65]), Err(SendError::TooLarge));
    assert_eq!(g.engine(0).send(&[0u8; 64]), Ok(0));
}

#[test]
fn multicast_off_or_outside_the_group_has_no_engine() {
    let c = config(3, 0, 0);
    let layout = Layout::new(&c).unwrap();
    assert!(layout.multicast.is_none());
    assert!(McastEngine::new(&c, TestMemory::new(&layout), 0).is_none());
    let mut c = config(3, 2, 4);
    c.initial_members = 2;
    let layout = Layout::new(&c).unwrap();
    assert!(McastEngine::new(&c, TestMemory::new(&layout), 0).is_none());
}

#[test]
fn bad_multicast_settings_are_refused_with_the_field_named() {
    let mut c = config(3, 0, 1);
    assert!(matches!(
        c.validate(),
        Err(crate::config::ConfigError::OutOfRange {
            field: "mcast_window",
            ..
        })
    ));
    c.mcast_window = 8;
    c.mcast_payload_bytes_max = 4096;
    assert!(matches!(
        c.validate(),
        Err(crate::config::ConfigError::OutOfRange {
            field: "mcast_payload_bytes_max",
            ..
        })
    ));
}

#[test]
fn writes_that_fail_are_posted_again_after_a_reconnect() {
    let mut g = Group::new(3, 8);
    g.steps(3);
    g.broken[2] = true;
    for i in 0..3u8 {
        g.engine(0).send(&[i]).unwrap();
    }
    g.steps(3);
    assert!(
        g.delivered[0].is_empty(),
        "member 2 has nothing: nothing is stable"
    );
    assert!(g.engine(0).status().write_errors > 0);
    // Nothing goes out before the backoff, then the channel first.
    assert!(g.reconnects.is_empty(), "reconnected before the backoff");
    g.broken[2] = false;
    let backoff = g.config[0].reconnect_backoff_ns;
    g.now += backoff;
    g.steps(6);
    assert!(
        g.reconnects.contains(&(0, MemberId(2))),
        "{:?}",
        g.reconnects
    );
    for m in 0..3 {
        let got: Vec<Vec<u8>> = g.delivered[m].iter().map(|d| d.2.clone()).collect();
        assert_eq!(got, vec![vec![0], vec![1], vec![2]], "member {m}");
    }
}

#[test]
fn nothing_is_due_while_idle_or_before_the_group_formed() {
    let mut g = Group::new(3, 4);
    // Only member 0 runs: it never forms a group, and must not ask to be
    // called again at once (a parked host would spin).
    g.engines[1] = None;
    g.engines[2] = None;
    g.steps(3);
    let e = g.engine(0);
    assert_eq!(e.send(b"x"), Err(SendError::NotStarted));
    assert!(
        e.next_deadline() > g.now,
        "due at once before the group formed"
    );
    let mut g = Group::new(3, 4);
    g.steps(4);
    let now = g.now;
    for m in 0..3 {
        assert!(
            g.engine(m).next_deadline() > now,
            "member {m} due while idle"
        );
    }
}

/// Restarts member `i` as a new process: fresh memory, a new incarnation;
/// the others are told it runs again.
fn restart(g: &mut Group, i: usize, incarnation: u64) {
    let layout = Layout::new(&g.config[i]).unwrap();
    g.mems[i] = TestMemory::new(&layout);
    g.config[i].incarnation = incarnation;
    g.delivered[i].clear();
    let now = g.now;
    g.engines[i] = McastEngine::new(&g.config[i], g.mems[i].clone(), now);
    for (k, e) in g.engines.iter_mut().enumerate() {
        if k != i {
            if let Some(e) = e {
                e.handle_peer_up(now, MemberId(i as u8));
            }
        }
    }
}

#[test]
fn a_restarted_member_joins_the_next_view_and_receives_from_then_on() {
    let mut g = Group::new(3, 4);
    g.steps(3);
    g.engine(0).send(b"before").unwrap();
    g.steps(3);
    kill(&mut g, 2);
    g.steps(8);
    for i in 0..2 {
        assert_eq!((g.engine(i).epoch(), g.engine(i).view()), (1, 0b011));
    }
    g.engine(1).send(b"while out").unwrap();
    g.steps(3);
    restart(&mut g, 2, 777);
    g.steps(12);
    // The removal, then the join: one view change each.
    for i in 0..3 {
        let e = g.engine(i);
        assert_eq!((e.epoch(), e.view()), (2, 0b111), "member {i}");
        assert!(!e.status().joining);
    }
    let t = g.engine(0).status().last_trim.unwrap();
    assert_eq!(t.join, Some((MemberId(2), 777)));
    // From the new view on, the new process receives and delivers as the
    // others do; nothing from before it joined.
    let before_join: Vec<usize> = (0..3).map(|i| g.delivered[i].len()).collect();
    assert_eq!(before_join[2], 0);
    g.engine(2).send(b"new").unwrap();
    g.engine(0).send(b"hello").unwrap();
    g.steps(4);
    let tail = |i: usize| -> Vec<Vec<u8>> {
        g.delivered[i][before_join[i]..]
            .iter()
            .map(|d| d.2.clone())
            .collect()
    };
    assert_eq!(tail(0), vec![b"hello".to_vec(), b"new".to_vec()]);
    assert_eq!(tail(1), tail(0));
    assert_eq!(tail(2), tail(0));
}

/// Hands member `i`'s received messages to its "disk"; returns them and
/// the mark that covers them.
fn hand_to_disk(g: &mut Group, i: usize) -> (Vec<(McastPersist, Vec<u8>)>, PersistMark) {
    let mut out = [0u8; 64];
    let mut records = Vec::new();
    while let Some(r) = g.engine(i).poll_persist(&mut out) {
        records.push((r, out[..r.len].to_vec()));
    }
    (records, g.engine(i).persist_mark())
}

#[test]
fn persistent_mode_delivers_only_what_every_member_reported_on_disk() {
    let mut g = Group::persistent(3, 8);
    g.steps(3);
    assert!(g.engine(0).persistent());
    g.engine(0).send(b"a").unwrap();
    g.engine(1).send(b"b").unwrap();
    g.steps(4);
    // Received everywhere, on no disk: nothing is delivered.
    for m in 0..3 {
        assert_eq!(g.engine(m).received(MemberId(0)), 1);
        assert!(g.delivered[m].is_empty(), "member {m}");
    }
    let mut marks = Vec::new();
    for m in 0..3 {
        let (records, mark) = hand_to_disk(&mut g, m);
        let data: Vec<(u8, u64, Vec<u8>)> = records
            .iter()
            .filter(|(r, _)| !r.null)
            .map(|(r, p)| (r.sender.0, r.index, p.clone()))
            .collect();
        assert_eq!(data, vec![(0, 0, b"a".to_vec()), (1, 0, b"b".to_vec())]);
        assert!(records.iter().all(|(r, _)| r.epoch == 0));
        marks.push(mark);
    }
    // Members 0 and 1 synced; member 2's disk is slow.
    g.engine(0).mark_persisted(marks[0]);
    g.engine(1).mark_persisted(marks[1]);
    g.steps(4);
    for m in 0..3 {
        assert!(g.delivered[m].is_empty(), "member {m}: not on 2's disk yet");
    }
    // A mark of another epoch, or past what was handed out, counts for
    // nothing more.
    let mut stale = marks[2];
    stale.epoch = 7;
    g.engine(2).mark_persisted(stale);
    g.steps(4);
    assert!(g.delivered[0].is_empty());
    let mut inflated = marks[2];
    inflated.counts[0] = 50;
    g.engine(2).mark_persisted(inflated);
    g.steps(4);
    for m in 0..3 {
        assert_eq!(order(&g, m), vec![(0, 0), (1, 0)], "member {m}");
    }
    assert!(
        g.engine(2).poll_persist(&mut [0u8; 64]).is_none(),
        "nothing new to persist"
    );
}

#[test]
fn a_member_that_leaves_is_dropped_by_the_next_view() {
    let mut g = Group::new(3, 8);
    g.steps(3);
    g.engine(2).leave();
    assert_eq!(g.engine(2).halted(), Some(HaltCause::Left));
    assert_eq!(g.engine(2).send(b"x"), Err(SendError::Halted));
    g.steps(20);
    for m in 0..2 {
        let e = g.engine(m);
        assert_eq!(e.epoch(), 1, "member {m}");
        assert_eq!(e.view(), 0b011, "member {m}");
    }
    g.engine(0).send(b"after").unwrap();
    g.steps(6);
    for m in 0..2 {
        assert_eq!(
            g.delivered[m].last().map(|d| d.2.clone()),
            Some(b"after".to_vec())
        );
    }
}

fn point(epoch: u64, view: u64, persisted: [u64; 3], delivered: u64) -> RestartPoint {
    let mut p = RestartPoint {
        epoch,
        view,
        persisted: [0; MAX_MEMBERS],
        delivered,
    };
    p.persisted[..3].copy_from_slice(&persisted);
    p
}

#[test]
fn a_total_restart_cuts_where_a_log_delivered_most_and_a_member_lacking_it_joins() {
    // Epoch 4 ended in a ragged trim member 2 was suspected in: members 0
    // and 1 have 6 messages of each sender on disk and member 0 delivered
    // the trim's first 16 sequence numbers; member 2 has only 3 of each
    // (every member of the view has those: 9 sequence numbers).
    let mut g = Group::new(3, 8);
    g.engine(0).restart(point(4, 0b111, [6, 6, 6], 16)).unwrap();
    g.engine(1).restart(point(4, 0b111, [6, 6, 6], 9)).unwrap();
    g.engine(2).restart(point(4, 0b111, [3, 3, 3], 9)).unwrap();
    assert!(g.engine(0).status().restarting);
    assert_eq!(
        g.engine(0).restart(point(4, 0b111, [6, 6, 6], 16)),
        Err(RestartError::Started)
    );
    g.steps(30);
    // The cut is the most delivered (16): members 0 and 1 deliver their
    // tails of it from their logs and form epoch 5; member 2's disk lacks
    // part of it, so it joins as a new member (epoch 6).
    let tail = |from, to| RestartTail {
        epoch: 4,
        view: 0b111,
        from,
        to,
    };
    assert_eq!(g.tails[0], vec![tail(16, 16)]);
    assert_eq!(g.tails[1], vec![tail(9, 16)]);
    assert!(g.tails[2].is_empty(), "member 2 cannot deliver the cut");
    for m in 0..3 {
        let e = g.engine(m);
        assert!(!e.status().restarting, "member {m}");
        assert_eq!((e.epoch(), e.view()), (6, 0b111), "member {m}");
    }
    let last = g.engine(0).status().last_trim.unwrap();
    assert_eq!(last.epoch, 5, "the join ended the restarted view");
    g.engine(2).send(b"back").unwrap();
    g.steps(8);
    for m in 0..3 {
        assert_eq!(
            g.delivered[m].last().map(|d| d.2.clone()),
            Some(b"back".to_vec()),
            "member {m}"
        );
    }
    // Sequence number 15 is message 5 of member 0: the tail's last one.
    assert_eq!(tail(9, 16).at_seq(15), (MemberId(0), 5));
    assert_eq!(tail(9, 16).at_seq(14), (MemberId(2), 4));
    let two = RestartTail {
        epoch: 1,
        view: 0b101,
        from: 0,
        to: 4,
    };
    assert_eq!(two.at_seq(3), (MemberId(2), 1));
}

#[test]
fn a_total_restart_waits_for_every_member_of_the_last_view() {
    let mut g = Group::new(3, 8);
    g.engines[2] = None;
    g.engine(0).restart(point(2, 0b111, [4, 4, 4], 12)).unwrap();
    g.engine(1).restart(point(2, 0b111, [4, 4, 4], 12)).unwrap();
    g.steps(30);
    for m in 0..2 {
        // Member 2's log may hold deliveries nobody else's shows.
        assert!(g.tails[m].is_empty(), "member {m}");
        let e = g.engine(m);
        assert!(e.status().restarting);
        assert_eq!(e.send(b"x"), Err(SendError::NotStarted));
    }
    // It comes back with a log that ends a view earlier: it cannot be in
    // the restarted view, but it was not in the last one either, so the
    // others cut without it and it joins.
    let mut c = config(3, 2, 8);
    c.incarnation = 900;
    g.engines[2] = McastEngine::new(&c, g.mems[2].clone(), g.now);
    g.engine(2).restart(point(1, 0b111, [9, 9, 9], 27)).unwrap();
    g.steps(40);
    assert_eq!(g.tails[0].len(), 1);
    assert_eq!(g.tails[0][0].to, 12);
    for m in 0..3 {
        let e = g.engine(m);
        assert_eq!((e.epoch(), e.view()), (4, 0b111), "member {m}");
    }
}

#[test]
fn a_restart_point_outside_the_layout_is_refused() {
    let mut g = Group::new(3, 8);
    assert_eq!(
        g.engine(0).restart(point(1, 0b110, [0; 3], 0)),
        Err(RestartError::View)
    );
    assert_eq!(
        g.engine(0).restart(point(1, 0b1001, [0; 3], 0)),
        Err(RestartError::View)
    );
    g.steps(5);
    assert_eq!(
        g.engine(0).restart(point(1, 0b111, [0; 3], 0)),
        Err(RestartError::Started)
    );
}

#[test]
fn a_persistent_member_shows_a_view_only_once_its_record_is_on_disk() {
    let mut g = Group::persistent(3, 8);
    g.steps(4);
    assert!(g.engine(0).status().started);
    // Member 2 is gone; member 1's host does not get the next view's
    // record on disk.
    g.views_held[1] = true;
    let now = g.now;
    g.engine(0).handle_peer_down(now, MemberId(2));
    g.engine(1).handle_peer_down(now, MemberId(2));
    g.engines[2] = None;
    g.steps(30);
    assert_eq!(g.engine(0).epoch(), 1);
    assert_eq!(g.engine(1).epoch(), 1, "member 1 installed the view");
    assert_eq!(g.engine(1).view_to_persist(), Some((1, 0b011)));
    assert!(
        !g.engine(0).status().started,
        "member 0 cannot see member 1 in the view before its record is on disk"
    );
    assert_eq!(g.engine(0).send(b"x"), Err(SendError::NotStarted));
    g.views_held[1] = false;
    g.steps(6);
    assert_eq!(g.engine(1).view_to_persist(), None);
    assert!(g.engine(0).status().started);
    g.engine(0).send(b"x").unwrap();
}

/// The RDMC index and length a large message's reference carries.
fn large_of(payload: &[u8]) -> (u64, u64) {
    assert_eq!(payload.len(), LARGE_REF_BYTES);
    (
        u64::from_le_bytes(payload[..8].try_into().unwrap()),
        u64::from_le_bytes(payload[8..].try_into().unwrap()),
    )
}

/// Member 1 sends a large message's reference, member 2 a small message
/// after it in the round-robin order.
fn large_ref_then_small(g: &mut Group) {
    g.steps(3);
    assert_eq!(g.engine(1).ready_to_send(), Ok(()));
    assert_eq!(g.engine(1).send_large_ref(0, 5000), Ok(0));
    g.engine(2).send(&[7]).unwrap();
    g.steps(6);
}

#[test]
fn a_large_messages_reference_counts_only_once_its_payload_is_whole_at_the_member() {
    let mut g = Group::new(3, 16);
    large_ref_then_small(&mut g);
    for m in 0..3 {
        assert!(
            g.delivered[m].is_empty(),
            "member {m}: nothing past a reference whose payload is missing somewhere"
        );
    }
    // The counts of another view's session do not count.
    for m in 0..3 {
        g.engine(m).set_large_received(4, MemberId(1), 1);
    }
    g.steps(6);
    assert!(g.delivered.iter().all(|d| d.is_empty()));
    // Members 0 and 1 have it, member 2 not yet: still nothing.
    for m in 0..2 {
        g.engine(m).set_large_received(0, MemberId(1), 1);
    }
    g.steps(6);
    assert!(g.delivered.iter().all(|d| d.is_empty()));
    g.engine(2).set_large_received(0, MemberId(1), 1);
    g.steps(6);
    for m in 0..3 {
        let d = &g.delivered[m];
        assert_eq!(d.len(), 2, "member {m}: the reference, then the small one");
        assert_eq!((d[0].0, d[0].1), (MemberId(1), 0));
        assert_eq!(large_of(&d[0].2), (0, 5000));
        assert_eq!((d[1].0, d[1].2.clone()), (MemberId(2), vec![7]));
    }
}

#[cfg(feature = "mutation-testing")]
#[test]
fn the_mutation_counting_a_reference_before_its_payload_delivers_it_without_the_payload() {
    let mut g = Group::new(3, 16);
    for i in 0..3 {
        g.config[i].mutation = crate::config::Mutation::LargeRefBeforePayload;
        g.engines[i] = McastEngine::new(&g.config[i], g.mems[i].clone(), 0);
    }
    large_ref_then_small(&mut g);
    // No member's RDMC has the payload, yet the reference is delivered:
    // the host would have nothing to hand out.
    assert!(g.delivered.iter().all(|d| d.len() == 2));
}
