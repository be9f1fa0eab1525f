//! Every parser of outside input, fed deterministic random and mutated
//! inputs (the same properties as the fuzz targets in `fuzz/`, so CI
//! exercises them without libFuzzer): never a panic, and whatever is
//! accepted is well-formed.

use std::sync::Arc;
use verbatim_client::manifest::Manifest;
use verbatim_client::resp::{parse_command, parse_frame, RespLimits};
use verbatim_client::slots::SlotServer;
use verbatim_core::kv::{KvLimits, KvOp};
use verbatim_core::layout::ROW_WORDS;
use verbatim_core::rng::SplitMix64;
use verbatim_core::sst::Row;

const ROUNDS: usize = 20_000;

fn random_bytes(rng: &mut SplitMix64, max: u64) -> Vec<u8> {
    let n = rng.range_inclusive(0, max) as usize;
    (0..n).map(|_| rng.next_u64() as u8).collect()
}

fn mutate(rng: &mut SplitMix64, base: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..rng.range_inclusive(1, 4) {
        if v.is_empty() {
            v.push(rng.next_u64() as u8);
            continue;
        }
        let i = rng.range_inclusive(0, v.len() as u64 - 1) as usize;
        match rng.range_inclusive(0, 3) {
            0 => v[i] = rng.next_u64() as u8,
            1 => {
                v.remove(i);
            }
            2 => v.insert(i, rng.next_u64() as u8),
            _ => v.truncate(i),
        }
    }
    v
}

#[test]
fn resp_frames_and_commands_never_panic() {
    let kv = KvLimits {
        key_bytes_max: 64,
        value_bytes_max: 256,
    };
    let limits = RespLimits::for_kv(&kv);
    let seeds: [&[u8]; 6] = [
        b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n",
        b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n",
        b"*5\r\n$3\r\nCAS\r\n$1\r\nk\r\n$1\r\nn\r\n$4\r\nIFEQ\r\n$1\r\ne\r\n",
        b"INCRBY counter 5\r\n",
        b"*1\r\n*1\r\n:7\r\n",
        b"$-1\r\n+OK\r\n-ERR x\r\n",
    ];
    let mut rng = SplitMix64::new(1);
    for round in 0..ROUNDS {
        let input = if round % 2 == 0 {
            random_bytes(&mut rng, 96)
        } else {
            mutate(&mut rng, seeds[round % seeds.len()])
        };
        let mut at = 0;
        while at < input.len() {
            match parse_frame(&input[at..], &limits) {
                Ok(Some((frame, used))) => {
                    assert!(used >= 1 && at + used <= input.len());
                    let _ = parse_command(&frame, &kv);
                    at += used;
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
}

#[test]
fn kv_operations_decode_or_refuse() {
    let limits = KvLimits {
        key_bytes_max: 16,
        value_bytes_max: 64,
    };
    let mut rng = SplitMix64::new(2);
    let mut buf = [0u8; 256];
    let n = KvOp::Cas {
        key: b"key",
        expected: Some(b"old"),
        new: b"new",
    }
    .encode(&mut buf)
    .unwrap();
    let valid = buf[..n].to_vec();
    for round in 0..ROUNDS {
        let input = if round % 2 == 0 {
            random_bytes(&mut rng, 80)
        } else {
            mutate(&mut rng, &valid)
        };
        if let Ok(op) = KvOp::decode(&input, &limits) {
            let mut out = [0u8; 256];
            let m = op.encode(&mut out).expect("an accepted operation fits");
            assert_eq!(KvOp::decode(&out[..m], &limits), Ok(op));
        }
    }
}

#[test]
fn manifests_parse_or_name_the_field() {
    let base = Manifest::local("fuzz", 3, 7000).to_toml().into_bytes();
    let mut rng = SplitMix64::new(3);
    let mut accepted = 0;
    for _ in 0..2_000 {
        let text = String::from_utf8_lossy(&mutate(&mut rng, &base)).into_owned();
        match Manifest::parse(&text, &[]) {
            Ok(m) => {
                accepted += 1;
                assert_eq!(Manifest::parse(&m.to_toml(), &[]).expect("re-parses"), m);
            }
            Err(e) => assert!(!e.field.is_empty() && !e.message.is_empty()),
        }
    }
    assert!(
        accepted > 0,
        "some mutations (e.g. inside a comment-free value) stay valid"
    );
}

#[test]
fn sst_rows_decode_canonically_or_refuse() {
    let mut rng = SplitMix64::new(4);
    let good = Row {
        term: 3,
        apply_index: 9,
        ..Row::default()
    }
    .encode(7);
    for round in 0..ROUNDS {
        let mut words = [0u64; ROW_WORDS];
        if round % 2 == 0 {
            for w in words.iter_mut() {
                *w = rng.next_u64();
            }
        } else {
            words = good;
            let i = rng.range_inclusive(0, ROW_WORDS as u64 - 1) as usize;
            words[i] ^= 1 << rng.range_inclusive(0, 63);
        }
        if let Ok((row, version)) = Row::decode(&words) {
            assert_eq!(row.encode(version), words);
        }
    }
}

#[test]
fn client_slots_from_hostile_clients_stay_in_bounds() {
    use verbatim_client::shared::SharedMap;
    use verbatim_client::slots::{SlotGeometry, SlotSegment, HEADER_BYTES, PENDING_OFFSET};
    let dir = tempfile::tempdir().unwrap();
    let geometry = SlotGeometry::new(8, 512).unwrap();
    let seg = Arc::new(SlotSegment::create(&dir.path().join("s.clients"), geometry).unwrap());
    // The hostile client maps the same file and writes whatever it likes
    // into the slots and the pending bitmap.
    let hostile = SharedMap::open(seg.path(), HEADER_BYTES + 8 * 512, "short").unwrap();
    let mut server = SlotServer::new(seg.clone());
    let mut rng = SplitMix64::new(5);
    let mut out = Vec::new();
    for _ in 0..2_000 {
        let garbage = random_bytes(&mut rng, 8 * 512);
        hostile.write(HEADER_BYTES, &garbage);
        hostile
            .word(PENDING_OFFSET)
            .store(rng.next_u64(), std::sync::atomic::Ordering::Release);
        out.clear();
        server.take_pending(&mut out);
        for r in &out {
            assert!(r.slot < 8);
            assert!(r.payload.len() as u64 <= geometry.area_bytes);
        }
    }
}
