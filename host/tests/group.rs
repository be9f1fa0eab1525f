//! The embeddable group member (`verbatim_host::group`): members on
//! threads of this process, each with its own segment, fabric endpoint
//! and death notices, as separate processes would have.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};
use verbatim_core::fabric::MemberId;
use verbatim_host::group::{Group, GroupError, GroupOptions, View};

const TIMEOUT: Duration = Duration::from_secs(60);

fn options(name: &str, members: u8, me: u8) -> GroupOptions {
    let mut o = GroupOptions::new(&format!("test-{}-{name}", std::process::id()), members, me);
    o.window = 16;
    // Not a whole number of words (the engine rounds its slots up).
    o.payload_bytes_max = 60;
    o
}

/// What a member delivered: (view, sender, payload), in order.
type Delivered = Vec<(u64, u8, Vec<u8>)>;

fn message(me: u8, k: u32) -> Vec<u8> {
    format!("m{me}-{k}").into_bytes()
}

/// Polls `g`, collecting deliveries into `out`, until `done` or the
/// timeout.
fn run_until(
    g: &mut Group,
    out: &mut Delivered,
    mut done: impl FnMut(&mut Group, &Delivered) -> bool,
) {
    let began = Instant::now();
    while !done(g, out) {
        assert!(
            began.elapsed() < TIMEOUT,
            "member {} stuck: view {:?}, {} delivered, status {:?}",
            g.me().0,
            g.view(),
            out.len(),
            g.status()
        );
        let worked = g.poll();
        while let Some(d) = g.next_delivery() {
            out.push((d.epoch, d.sender.0, d.payload.to_vec()));
        }
        if !worked {
            std::thread::yield_now();
        }
    }
}

/// Sends our messages `next .. count` while the group holds them.
fn send_up_to(g: &mut Group, me: u8, next: &mut u32, count: u32) {
    while *next < count {
        match g.send(&message(me, *next)) {
            Ok(()) => *next += 1,
            Err(GroupError::Backlog(_)) => break,
            Err(e) => panic!("send: {e}"),
        }
    }
}

/// Each sender's messages appear once each, in send order, and all of
/// them: `m<s>-0 .. m<s>-<count>`.
fn assert_each_once_in_order(out: &Delivered, sender: u8, count: u32) {
    let got: Vec<&Vec<u8>> = out
        .iter()
        .filter(|(_, s, _)| *s == sender)
        .map(|(_, _, p)| p)
        .collect();
    let want: Vec<Vec<u8>> = (0..count).map(|k| message(sender, k)).collect();
    assert_eq!(got.len(), want.len(), "messages of member {sender}");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(*g, w, "message {k} of member {sender}");
    }
}

#[test]
fn every_member_delivers_every_message_in_the_same_order() {
    const N: u8 = 3;
    const PER_SENDER: u32 = 300;
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..N)
        .map(|me| {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut g = Group::join(&options("order", N, me)).expect("join");
                let view = g.wait_formed(TIMEOUT).expect("formed");
                let mut out = Delivered::new();
                let mut next = 0;
                let total = usize::from(N) * PER_SENDER as usize;
                // Send while delivering: the window is smaller than what
                // each sends, so sends wait for deliveries.
                run_until(&mut g, &mut out, |g, out| {
                    send_up_to(g, me, &mut next, PER_SENDER);
                    out.len() >= total
                });
                // Stay until every member delivered everything (a member
                // that leaves early is a death to the others).
                done.fetch_add(1, Ordering::AcqRel);
                run_until(&mut g, &mut out, |_, _| {
                    done.load(Ordering::Acquire) == usize::from(N)
                });
                (view, out, g.view())
            })
        })
        .collect();
    let results: Vec<(View, Delivered, View)> = threads
        .into_iter()
        .map(|t| t.join().expect("member thread"))
        .collect();
    let all = View {
        epoch: 0,
        members: (0..N).map(MemberId).collect(),
    };
    for (formed, out, last) in &results {
        assert_eq!(formed, &all);
        assert_eq!(last, &all, "no view change without a failure");
        for s in 0..N {
            assert_each_once_in_order(out, s, PER_SENDER);
        }
        assert_eq!(
            out, &results[0].1,
            "every member delivers the same sequence"
        );
    }
}

#[test]
fn a_member_that_leaves_is_removed_and_the_others_lose_no_message() {
    const N: u8 = 3;
    const PER_SURVIVOR: u32 = 3000;
    let formed = Arc::new(Barrier::new(usize::from(N)));
    let leaver = {
        let formed = formed.clone();
        std::thread::spawn(move || {
            let mut g = Group::join(&options("leave", N, 2)).expect("join");
            g.wait_formed(TIMEOUT).expect("formed");
            formed.wait();
            // Some messages of its own, then, while the others send at
            // full rate, it is gone: dropping the group ends its notice
            // thread, as its process's death would.
            for k in 0..20 {
                let _ = g.send(&message(2, k));
            }
            let mut out = Delivered::new();
            run_until(&mut g, &mut out, |_, out| {
                out.iter().filter(|(_, s, _)| *s < 2).count() >= 300
            });
        })
    };
    let done = Arc::new(AtomicUsize::new(0));
    let survivors: Vec<_> = (0..2u8)
        .map(|me| {
            let formed = formed.clone();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut g = Group::join(&options("leave", N, me)).expect("join");
                g.wait_formed(TIMEOUT).expect("formed");
                formed.wait();
                let mut out = Delivered::new();
                let mut next = 0;
                let ours = |out: &Delivered| out.iter().filter(|(_, s, _)| *s < 2).count();
                run_until(&mut g, &mut out, |g, out| {
                    send_up_to(g, me, &mut next, PER_SURVIVOR);
                    ours(out) >= 2 * PER_SURVIVOR as usize
                });
                // The other survivor may still need our rows.
                done.fetch_add(1, Ordering::AcqRel);
                run_until(&mut g, &mut out, |_, _| done.load(Ordering::Acquire) == 2);
                (out, g.view(), g.resent())
            })
        })
        .collect();
    leaver.join().expect("leaver");
    let results: Vec<(Delivered, View, u64)> = survivors
        .into_iter()
        .map(|t| t.join().expect("survivor thread"))
        .collect();
    for (out, view, _) in &results {
        assert!(
            view.epoch >= 1,
            "a view change removed the leaver: {view:?}"
        );
        assert_eq!(view.members, vec![MemberId(0), MemberId(1)]);
        // Every survivor message once, in order, wherever the trim fell
        // (those it left out were sent again in the next view).
        assert_each_once_in_order(out, 0, PER_SURVIVOR);
        assert_each_once_in_order(out, 1, PER_SURVIVOR);
        // The leaver's messages: a prefix of what it sent, once each.
        let of_leaver: Vec<&Vec<u8>> = out
            .iter()
            .filter(|(_, s, _)| *s == 2)
            .map(|(_, _, p)| p)
            .collect();
        for (k, p) in of_leaver.iter().enumerate() {
            assert_eq!(**p, message(2, k as u32));
        }
        assert!(
            out.iter().all(|(e, s, _)| *s != 2 || *e == 0),
            "nothing of the leaver after its removal"
        );
    }
    // Virtual synchrony: both delivered the same sequence.
    assert_eq!(results[0].0, results[1].0);
}

#[test]
fn bad_options_and_oversized_messages_are_refused_with_what_to_change() {
    let msg = |o: GroupOptions| match Group::join(&o) {
        Err(GroupError::Options(m)) => m,
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("accepted"),
    };
    let base = options("bad", 2, 0);
    assert!(msg(GroupOptions {
        members: 1,
        ..base.clone()
    })
    .contains("2 to 8 members"));
    assert!(msg(GroupOptions {
        me: 2,
        ..base.clone()
    })
    .contains("from 0 to 1"));
    assert!(msg(GroupOptions {
        name: "../etc".into(),
        ..base.clone()
    })
    .contains("names files"));
    assert!(msg(GroupOptions {
        payload_bytes_max: 1 << 20,
        ..base.clone()
    })
    .contains("payload_bytes_max"));
    assert!(msg(GroupOptions {
        window: 1,
        ..base.clone()
    })
    .contains("window = 1: use 2 to"));

    // A member alone (its peer never starts) still refuses what it can
    // never send, and says so.
    let mut o = base;
    o.connect_timeout = Duration::from_millis(10);
    let mut g = Group::join(&o).expect("join without the peer");
    match g.send(&[0u8; 61]) {
        Err(GroupError::TooLarge { len: 61, max: 60 }) => {}
        other => panic!("{other:?}"),
    }
    assert!(g.send(&[0u8; 60]).is_ok());
    assert!(!g.formed());
    match g.wait_formed(Duration::from_millis(50)) {
        Err(GroupError::NotFormed(_)) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(g.pending(), 1, "the message waits for the group");
}

/// `verbatim mcast join` members as separate processes: lines in, the
/// group's order out; a SIGKILLed member is removed (its death notice)
/// and the survivors go on in the same order.
#[test]
fn processes_joined_from_the_command_line_survive_a_sigkill() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, Command, Stdio};
    use std::sync::mpsc::{channel, Receiver};

    struct Member {
        child: Child,
        lines: Receiver<String>,
        seen: Vec<String>,
    }
    impl Drop for Member {
        fn drop(&mut self) {
            // A failed test leaves no member running.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
    impl Member {
        /// Reads lines until one satisfies `f`; returns it.
        fn until(&mut self, what: &str, f: impl Fn(&str) -> bool) -> String {
            let began = Instant::now();
            loop {
                let left = TIMEOUT.saturating_sub(began.elapsed());
                match self.lines.recv_timeout(left) {
                    Ok(l) => {
                        self.seen.push(l.clone());
                        if f(&l) {
                            return l;
                        }
                    }
                    Err(e) => panic!("waiting for {what}: {e}; seen {:?}", self.seen),
                }
            }
        }
        fn say(&mut self, line: &str) {
            let stdin = self.child.stdin.as_mut().expect("stdin");
            writeln!(stdin, "{line}").expect("write a line");
        }
        /// The delivered message lines seen so far (`view seq sender
        /// message`), without the view lines.
        fn delivered(&self) -> Vec<String> {
            self.seen
                .iter()
                .filter(|l| !l.starts_with('#'))
                .cloned()
                .collect()
        }
    }
    let group = format!("cli-{}", std::process::id());
    let mut members: Vec<Member> = (0..3u8)
        .map(|me| {
            let mut child = Command::new(env!("CARGO_BIN_EXE_verbatim"))
                .args(["mcast", "join", &group, "--members", "3", "--me"])
                .arg(me.to_string())
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start verbatim mcast join");
            let out = child.stdout.take().expect("stdout");
            let (tx, lines) = channel();
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines() {
                    let Ok(l) = l else { break };
                    if tx.send(l).is_err() {
                        break;
                    }
                }
            });
            Member {
                child,
                lines,
                seen: Vec::new(),
            }
        })
        .collect();
    for m in &mut members {
        m.until("the first view", |l| l == "# view 0: members 0 1 2");
    }
    for (i, m) in members.iter_mut().enumerate() {
        for k in 0..10 {
            m.say(&format!("before-{i}-{k}"));
        }
    }
    let mut before = Vec::new();
    for m in &mut members {
        while m.delivered().len() < 30 {
            m.until("30 messages", |_| true);
        }
        before.push(m.delivered());
    }
    assert_eq!(before[0], before[1]);
    assert_eq!(before[0], before[2]);

    // SIGKILL member 2: no goodbye, only its death notice.
    members[2].child.kill().expect("SIGKILL");
    members[2].child.wait().expect("reaped");
    // What a killed member leaves behind (its successor would replace it).
    let killed = format!("/dev/shm/verbatim-group-{group}-2");
    let _ = std::fs::remove_file(&killed);
    let _ = std::fs::remove_file(format!("{killed}.alive"));
    for m in &mut members[..2] {
        let view = m.until("the view without member 2", |l| l.starts_with("# view"));
        assert!(view.ends_with(": members 0 1"), "{view}");
    }
    for (i, m) in members[..2].iter_mut().enumerate() {
        for k in 0..10 {
            m.say(&format!("after-{i}-{k}"));
        }
    }
    for m in &mut members[..2] {
        while m
            .delivered()
            .iter()
            .filter(|l| l.contains(" after-"))
            .count()
            < 20
        {
            m.until("20 messages after the kill", |_| true);
        }
    }
    assert_eq!(members[0].delivered(), members[1].delivered());
    let after: Vec<&String> = members[0]
        .seen
        .iter()
        .skip_while(|l| !l.starts_with("# view 1"))
        .collect();
    assert!(after.iter().all(|l| !l.contains("-2-")), "{after:?}");
    // The end of stdin ends a member once its lines are delivered.
    for m in &mut members[..2] {
        drop(m.child.stdin.take());
    }
    for m in &mut members[..2] {
        let began = Instant::now();
        loop {
            if let Some(status) = m.child.try_wait().expect("try_wait") {
                assert!(status.success(), "{status}");
                break;
            }
            if began.elapsed() > TIMEOUT {
                let _ = m.child.kill();
                panic!("a member did not end at the end of its stdin");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

fn large_options(name: &str, members: u8, me: u8) -> GroupOptions {
    let mut o = options(name, members, me);
    o.large_slots = 2;
    o.large_chunk_bytes = 4096;
    o.large_message_bytes_max = 256 * 1024;
    o
}

/// Message `k` of member `me` in the mixed runs: small ones (`m<me>-<k>`)
/// between large ones of varied lengths (a chunk, a chunk and a bit, the
/// largest) whose bytes say who and which.
fn mixed_message(me: u8, k: u32) -> Vec<u8> {
    let len = match k % 4 {
        0 | 2 => return message(me, k),
        1 => [4096usize, 4097, 256 * 1024, 100_000][(k as usize / 4) % 4],
        _ => 61,
    };
    (0..len)
        .map(|i| (i as u64 * 131 + u64::from(k) * 17 + u64::from(me) * 7) as u8)
        .collect()
}

/// Polls `g` until `done`, collecting deliveries and sending our mixed
/// messages `next .. count` while the group holds them.
fn run_mixed(
    g: &mut Group,
    me: u8,
    next: &mut u32,
    count: u32,
    out: &mut Delivered,
    mut done: impl FnMut(&Group, &Delivered) -> bool,
) {
    run_until(g, out, |g, out| {
        while *next < count {
            match g.send(&mixed_message(me, *next)) {
                Ok(()) => *next += 1,
                Err(GroupError::Backlog(_)) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        done(g, out)
    });
}

fn assert_mixed_once_in_order(out: &Delivered, sender: u8, count: u32) {
    let got: Vec<&Vec<u8>> = out
        .iter()
        .filter(|(_, s, _)| *s == sender)
        .map(|(_, _, p)| p)
        .collect();
    assert_eq!(got.len(), count as usize, "messages of member {sender}");
    for (k, g) in got.iter().enumerate() {
        assert!(
            **g == mixed_message(sender, k as u32),
            "message {k} of member {sender} ({} bytes) whole and in order",
            g.len()
        );
    }
}

#[test]
fn large_messages_are_delivered_whole_in_the_same_total_order_as_small_ones() {
    // Three members: not a power of two, so one member relays to a twin.
    const N: u8 = 3;
    const PER_SENDER: u32 = 40;
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..N)
        .map(|me| {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut g = Group::join(&large_options("large", N, me)).expect("join");
                g.wait_formed(TIMEOUT).expect("formed");
                let mut out = Delivered::new();
                let mut next = 0;
                let total = usize::from(N) * PER_SENDER as usize;
                run_mixed(&mut g, me, &mut next, PER_SENDER, &mut out, |_, out| {
                    out.len() >= total
                });
                done.fetch_add(1, Ordering::AcqRel);
                run_mixed(&mut g, me, &mut next, PER_SENDER, &mut out, |_, _| {
                    done.load(Ordering::Acquire) == usize::from(N)
                });
                (out, g.large_status().expect("large messages on"))
            })
        })
        .collect();
    let results: Vec<_> = threads
        .into_iter()
        .map(|t| t.join().expect("member thread"))
        .collect();
    for (out, status) in &results {
        for s in 0..N {
            assert_mixed_once_in_order(out, s, PER_SENDER);
        }
        assert_eq!(
            out, &results[0].0,
            "every member delivers the same sequence"
        );
        assert!(status.wedged.is_none());
    }
    assert!(
        results.iter().all(|(_, s)| s.chunks_written > 0),
        "every member relays chunks"
    );
}

#[test]
fn after_a_member_leaves_large_messages_go_on_in_the_next_view_and_none_is_lost() {
    const N: u8 = 3;
    const PER_SURVIVOR: u32 = 60;
    let formed = Arc::new(Barrier::new(usize::from(N)));
    let leaver = {
        let formed = formed.clone();
        std::thread::spawn(move || {
            let mut g = Group::join(&large_options("large-leave", N, 2)).expect("join");
            g.wait_formed(TIMEOUT).expect("formed");
            formed.wait();
            // A few of its own, then gone while the others send.
            let mut out = Delivered::new();
            let mut next = 0;
            run_mixed(&mut g, 2, &mut next, 6, &mut out, |_, out| out.len() >= 10);
        })
    };
    let done = Arc::new(AtomicUsize::new(0));
    let survivors: Vec<_> = (0..2u8)
        .map(|me| {
            let formed = formed.clone();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut g = Group::join(&large_options("large-leave", N, me)).expect("join");
                g.wait_formed(TIMEOUT).expect("formed");
                formed.wait();
                let mut out = Delivered::new();
                let mut next = 0;
                let ours = |out: &Delivered| out.iter().filter(|(_, s, _)| *s < 2).count();
                run_mixed(&mut g, me, &mut next, PER_SURVIVOR, &mut out, |_, out| {
                    ours(out) >= 2 * PER_SURVIVOR as usize
                });
                done.fetch_add(1, Ordering::AcqRel);
                run_mixed(&mut g, me, &mut next, PER_SURVIVOR, &mut out, |_, _| {
                    done.load(Ordering::Acquire) == 2
                });
                (out, g.view())
            })
        })
        .collect();
    leaver.join().expect("leaver");
    let results: Vec<(Delivered, View)> = survivors
        .into_iter()
        .map(|t| t.join().expect("survivor"))
        .collect();
    for (out, view) in &results {
        assert!(view.epoch >= 1, "the leaver is removed: {view:?}");
        assert_mixed_once_in_order(out, 0, PER_SURVIVOR);
        assert_mixed_once_in_order(out, 1, PER_SURVIVOR);
        // The leaver's: a prefix of what it sent, each whole.
        let of_leaver: Vec<&Vec<u8>> = out
            .iter()
            .filter(|(_, s, _)| *s == 2)
            .map(|(_, _, p)| p)
            .collect();
        for (k, p) in of_leaver.iter().enumerate() {
            assert!(**p == mixed_message(2, k as u32));
        }
    }
    assert_eq!(results[0].0, results[1].0, "virtual synchrony");
}

#[test]
fn bad_large_message_options_say_which_to_change() {
    let mut o = large_options("large-bad", 2, 0);
    o.large_chunk_bytes = 1000;
    let e = Group::join(&o).err().expect("refused").to_string();
    assert!(e.contains("large_chunk_bytes"), "{e}");
    let mut o = large_options("large-bad", 2, 0);
    o.large_slots = 1000;
    let e = Group::join(&o).err().expect("refused").to_string();
    assert!(e.contains("large_slots"), "{e}");
    let mut o = large_options("large-bad", 2, 0);
    o.payload_bytes_max = 8;
    let e = Group::join(&o).err().expect("refused").to_string();
    assert!(e.contains("payload_bytes_max"), "{e}");
    let mut o = options("large-off", 2, 0);
    o.connect_timeout = Duration::from_millis(1);
    let mut g = Group::join(&o).expect("join");
    assert!(matches!(
        g.send(&[0u8; 61]),
        Err(GroupError::TooLarge { .. })
    ));
    let mut o = large_options("large-on", 2, 0);
    o.connect_timeout = Duration::from_millis(1);
    let mut g = Group::join(&o).expect("join");
    assert!(matches!(
        g.send(&vec![0u8; 256 * 1024 + 1]),
        Err(GroupError::LargeTooLarge { .. })
    ));
}

#[test]
fn a_large_message_sent_before_the_group_formed_waits_and_is_delivered() {
    const N: u8 = 2;
    let done = Arc::new(AtomicUsize::new(0));
    let threads: Vec<_> = (0..N)
        .map(|me| {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut g = Group::join(&large_options("large-early", N, me)).expect("join");
                let mut next = 0;
                let mut out = Delivered::new();
                // Sent at once: no RDMC session until the group formed.
                if me == 0 {
                    g.send(&mixed_message(0, 1))
                        .expect("held until the group forms");
                }
                run_mixed(&mut g, me, &mut next, 0, &mut out, |_, out| !out.is_empty());
                // Stay until both delivered (leaving is a death to the
                // other, and a group of two cannot lose a member).
                done.fetch_add(1, Ordering::AcqRel);
                run_mixed(&mut g, me, &mut next, 0, &mut out, |_, _| {
                    done.load(Ordering::Acquire) == usize::from(N)
                });
                out
            })
        })
        .collect();
    for t in threads {
        let out = t.join().expect("member");
        assert_eq!(out.len(), 1);
        assert!(out[0].2 == mixed_message(0, 1), "delivered whole");
    }
}
