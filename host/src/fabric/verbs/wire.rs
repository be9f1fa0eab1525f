//! The connection-setup protocol, spoken over TCP between the exchange
//! addresses of two members (no external registry, no rdma_cm).
//!
//! Every member listens on its `exchange_addr` and dials every peer; each
//! TCP connection carries requests of the dialling side only, answered in
//! order by the listening side:
//!
//! | request | answer | purpose |
//! | --- | --- | --- |
//! | `Hello` | `HelloOk` / `Refuse` | identities, protocol version, layout hash |
//! | `Connect` | `Connected` / `Refuse` | (re)connect one channel: QP numbers, PSNs, LID, GID, MTU; the target's region addresses, lengths and rkeys |
//! | `Grant` | `Ack` | the target's new log rkey for the dialling side |
//!
//! Frames are a little-endian `u32` length and a body of at most
//! [`FRAME_BYTES_MAX`] bytes whose first byte is the message type. Anything
//! malformed is a [`WireError`], never a panic: the peer is not trusted to
//! be well-formed.

use std::io::{self, Read, Write};

/// "VRBTMXCH".
pub const MAGIC: u64 = u64::from_le_bytes(*b"VRBTMXCH");
/// Bumped when a message changes.
pub const VERSION: u16 = 1;
/// Largest frame body.
pub const FRAME_BYTES_MAX: usize = 1024;
/// Longest refusal reason.
const REASON_BYTES_MAX: usize = 512;

/// A malformed or unreadable frame.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed or closed.
    #[error("exchange connection: {0}")]
    Io(#[from] io::Error),
    /// Length prefix out of range.
    #[error("frame of {0} bytes (at most {FRAME_BYTES_MAX})")]
    FrameLength(usize),
    /// Shorter than its type says.
    #[error("truncated {0} message")]
    Truncated(&'static str),
    /// Longer than its type says.
    #[error("{0} message with {1} trailing bytes")]
    Trailing(&'static str, usize),
    /// Unknown type byte.
    #[error("unknown message type {0}")]
    UnknownType(u8),
    /// A field out of its range.
    #[error("{0}")]
    Invalid(&'static str),
}

/// One side of a queue pair, as exchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireQp {
    /// QP number (24 bits).
    pub qpn: u32,
    /// First PSN (24 bits).
    pub psn: u32,
    /// LID (InfiniBand).
    pub lid: u16,
    /// GID (RoCE).
    pub gid: [u8; 16],
    /// Active MTU of the port (an `ibv_mtu`, 1..=5).
    pub mtu: u8,
}

/// A remotely accessible region, as exchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct WireRegion {
    /// Virtual address at the target.
    pub addr: u64,
    /// Bytes.
    pub len: u64,
    /// Remote key (meaningful only when granted).
    pub rkey: u32,
    /// Whether the dialling side may access it now.
    pub granted: bool,
    /// Grant epoch: larger is newer (orders grants against connects).
    pub epoch: u64,
}

/// A message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// First request on a connection.
    Hello {
        /// [`MAGIC`].
        magic: u64,
        /// [`VERSION`].
        version: u16,
        /// The dialling member.
        from: u8,
        /// The member it believes it reached.
        to: u8,
        /// Group size.
        members: u8,
        /// `Layout::hash` of the dialling member.
        layout_hash: u64,
        /// Changes with every start of the dialling member.
        incarnation: u64,
    },
    /// Hello accepted.
    HelloOk {
        /// The listener's incarnation.
        incarnation: u64,
    },
    /// A request refused, with the reason (layout mismatch, wrong member).
    Refuse {
        /// Why.
        reason: String,
    },
    /// Connect (or reconnect) the dialling side's channel `channel`: its
    /// fresh QP is `qp`.
    Connect {
        /// `Channel` index.
        channel: u8,
        /// The dialling side's QP.
        qp: WireQp,
    },
    /// The listener's fresh QP for the channel, and its regions.
    Connected {
        /// The listener's QP.
        qp: WireQp,
        /// The control region.
        control: WireRegion,
        /// The log region.
        log: WireRegion,
        /// The heartbeat engine's counters (readable by every member).
        heartbeat: WireRegion,
    },
    /// The listener's log access for the dialling side changed.
    Grant {
        /// The log region (rkey, granted, epoch).
        log: WireRegion,
    },
    /// Grant received.
    Ack,
}

const T_HELLO: u8 = 1;
const T_HELLO_OK: u8 = 2;
const T_REFUSE: u8 = 3;
const T_CONNECT: u8 = 4;
const T_CONNECTED: u8 = 5;
const T_GRANT: u8 = 6;
const T_ACK: u8 = 7;

struct Enc(Vec<u8>);

impl Enc {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn qp(&mut self, q: &WireQp) {
        self.u32(q.qpn);
        self.u32(q.psn);
        self.u16(q.lid);
        self.0.extend_from_slice(&q.gid);
        self.u8(q.mtu);
    }
    fn region(&mut self, r: &WireRegion) {
        self.u64(r.addr);
        self.u64(r.len);
        self.u32(r.rkey);
        self.u8(u8::from(r.granted));
        self.u64(r.epoch);
    }
}

struct Dec<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl Dec<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], WireError> {
        if self.b.len() < n {
            return Err(WireError::Truncated(self.what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn bool(&mut self) -> Result<bool, WireError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(WireError::Invalid("a boolean that is neither 0 nor 1")),
        }
    }
    fn qp(&mut self) -> Result<WireQp, WireError> {
        let qpn = self.u32()?;
        let psn = self.u32()?;
        let lid = self.u16()?;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(self.take(16)?);
        let mtu = self.u8()?;
        if qpn >= 1 << 24 || psn >= 1 << 24 {
            return Err(WireError::Invalid("QP number or PSN wider than 24 bits"));
        }
        if !(1..=5).contains(&mtu) {
            return Err(WireError::Invalid("MTU code outside 1..=5"));
        }
        Ok(WireQp {
            qpn,
            psn,
            lid,
            gid,
            mtu,
        })
    }
    fn region(&mut self) -> Result<WireRegion, WireError> {
        let addr = self.u64()?;
        let len = self.u64()?;
        if addr.checked_add(len).is_none() {
            return Err(WireError::Invalid("region wraps around the address space"));
        }
        Ok(WireRegion {
            addr,
            len,
            rkey: self.u32()?,
            granted: self.bool()?,
            epoch: self.u64()?,
        })
    }
    fn end(self) -> Result<(), WireError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(WireError::Trailing(self.what, self.b.len()))
        }
    }
}

impl Msg {
    /// The body (type byte and fields).
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc(Vec::with_capacity(96));
        match self {
            Msg::Hello {
                magic,
                version,
                from,
                to,
                members,
                layout_hash,
                incarnation,
            } => {
                e.u8(T_HELLO);
                e.u64(*magic);
                e.u16(*version);
                e.u8(*from);
                e.u8(*to);
                e.u8(*members);
                e.u64(*layout_hash);
                e.u64(*incarnation);
            }
            Msg::HelloOk { incarnation } => {
                e.u8(T_HELLO_OK);
                e.u64(*incarnation);
            }
            Msg::Refuse { reason } => {
                e.u8(T_REFUSE);
                let mut end = reason.len().min(REASON_BYTES_MAX);
                while !reason.is_char_boundary(end) {
                    end -= 1;
                }
                e.u16(end as u16);
                e.0.extend_from_slice(&reason.as_bytes()[..end]);
            }
            Msg::Connect { channel, qp } => {
                e.u8(T_CONNECT);
                e.u8(*channel);
                e.qp(qp);
            }
            Msg::Connected {
                qp,
                control,
                log,
                heartbeat,
            } => {
                e.u8(T_CONNECTED);
                e.qp(qp);
                e.region(control);
                e.region(log);
                e.region(heartbeat);
            }
            Msg::Grant { log } => {
                e.u8(T_GRANT);
                e.region(log);
            }
            Msg::Ack => e.u8(T_ACK),
        }
        e.0
    }

    /// Parses a body.
    pub fn decode(body: &[u8]) -> Result<Msg, WireError> {
        let (&t, rest) = body.split_first().ok_or(WireError::Truncated("empty"))?;
        let mut d = Dec { b: rest, what: "" };
        let m = match t {
            T_HELLO => {
                d.what = "hello";
                Msg::Hello {
                    magic: d.u64()?,
                    version: d.u16()?,
                    from: d.u8()?,
                    to: d.u8()?,
                    members: d.u8()?,
                    layout_hash: d.u64()?,
                    incarnation: d.u64()?,
                }
            }
            T_HELLO_OK => {
                d.what = "hello-ok";
                Msg::HelloOk {
                    incarnation: d.u64()?,
                }
            }
            T_REFUSE => {
                d.what = "refuse";
                let n = usize::from(d.u16()?);
                if n > REASON_BYTES_MAX {
                    return Err(WireError::Invalid("refusal reason too long"));
                }
                let reason = String::from_utf8_lossy(d.take(n)?).into_owned();
                Msg::Refuse { reason }
            }
            T_CONNECT => {
                d.what = "connect";
                let channel = d.u8()?;
                if channel > 1 {
                    return Err(WireError::Invalid("channel index above 1"));
                }
                Msg::Connect {
                    channel,
                    qp: d.qp()?,
                }
            }
            T_CONNECTED => {
                d.what = "connected";
                Msg::Connected {
                    qp: d.qp()?,
                    control: d.region()?,
                    log: d.region()?,
                    heartbeat: d.region()?,
                }
            }
            T_GRANT => {
                d.what = "grant";
                Msg::Grant { log: d.region()? }
            }
            T_ACK => {
                d.what = "ack";
                Msg::Ack
            }
            other => return Err(WireError::UnknownType(other)),
        };
        d.end()?;
        Ok(m)
    }
}

/// Writes one frame.
pub fn send(w: &mut impl Write, m: &Msg) -> Result<(), WireError> {
    let body = m.encode();
    debug_assert!(body.len() <= FRAME_BYTES_MAX);
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame.
pub fn recv(r: &mut impl Read) -> Result<Msg, WireError> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let n = u32::from_le_bytes(len) as usize;
    if n == 0 || n > FRAME_BYTES_MAX {
        return Err(WireError::FrameLength(n));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body)?;
    Msg::decode(&body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qp() -> WireQp {
        WireQp {
            qpn: 0x11,
            psn: 0xABCDE,
            lid: 3,
            gid: [7; 16],
            mtu: 3,
        }
    }

    #[test]
    fn every_message_round_trips() {
        let region = WireRegion {
            addr: 0x7000_0000,
            len: 4096,
            rkey: 0x1234,
            granted: true,
            epoch: 9,
        };
        let msgs = [
            Msg::Hello {
                magic: MAGIC,
                version: VERSION,
                from: 1,
                to: 2,
                members: 3,
                layout_hash: 0xDEAD,
                incarnation: 42,
            },
            Msg::HelloOk { incarnation: 5 },
            Msg::Refuse {
                reason: "layout differs: log_ring_bytes".into(),
            },
            Msg::Connect {
                channel: 1,
                qp: qp(),
            },
            Msg::Connected {
                qp: qp(),
                control: region,
                log: WireRegion::default(),
                heartbeat: region,
            },
            Msg::Grant { log: region },
            Msg::Ack,
        ];
        for m in msgs {
            let mut buf = Vec::new();
            send(&mut buf, &m).unwrap();
            assert_eq!(recv(&mut buf.as_slice()).unwrap(), m);
        }
    }

    #[test]
    fn malformed_frames_are_errors_not_panics() {
        assert!(matches!(Msg::decode(&[]), Err(WireError::Truncated(_))));
        assert!(matches!(
            Msg::decode(&[99]),
            Err(WireError::UnknownType(99))
        ));
        assert!(matches!(
            Msg::decode(&[T_HELLO, 1, 2]),
            Err(WireError::Truncated(_))
        ));
        assert!(matches!(
            Msg::decode(&[T_ACK, 0]),
            Err(WireError::Trailing(..))
        ));
        let mut c = Msg::Connect {
            channel: 0,
            qp: qp(),
        }
        .encode();
        c[1] = 7;
        assert!(matches!(Msg::decode(&c), Err(WireError::Invalid(_))));
        let mut big = Vec::new();
        big.extend_from_slice(&(1u32 << 20).to_le_bytes());
        assert!(matches!(
            recv(&mut big.as_slice()),
            Err(WireError::FrameLength(_))
        ));
        // Every truncation of every message is an error.
        let full = Msg::Connected {
            qp: qp(),
            control: WireRegion::default(),
            log: WireRegion::default(),
            heartbeat: WireRegion::default(),
        }
        .encode();
        for n in 0..full.len() {
            assert!(Msg::decode(&full[..n]).is_err(), "prefix of {n} bytes");
        }
    }
}
