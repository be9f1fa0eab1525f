//! The connection-setup protocol, spoken over TCP between the exchange
//! addresses of two members (no external registry, no rdma_cm).
//!
//! Every member listens on its `exchange_addr` and dials every peer; each
//! TCP connection carries requests of the dialling side only, answered in
//! order by the listening side:
//!
//! | request | answer | purpose |
//! | --- | --- | --- |
//! | `Open` | `Challenge` | protocol magic and version; one nonce from each side |
//! | `Hello` | `HelloOk` / `Refuse` | identities, layout hash, incarnation |
//! | `Connect` | `Connected` / `Refuse` | (re)connect one channel: QP numbers, PSNs, LID, GID, MTU; the target's region addresses, lengths and rkeys |
//! | `Grant` | `Ack` | the target's new log rkey for the dialling side |
//!
//! # Frames
//! A little-endian `u32` length and a body of at most [`FRAME_BYTES_MAX`]
//! bytes whose first byte is the message type. Anything malformed is a
//! [`WireError`], never a panic, and a length is checked before anything
//! is allocated for it: the peer is not trusted to be well-formed.
//!
//! # Authentication
//! Every message after `Open` ends with an HMAC-SHA256 tag ([`Session`]):
//!
//! * the connection key is `HMAC(secret, "verbatim exchange v2" ‖ Nd ‖ Nl)`,
//!   where `secret` is `[cluster] exchange_secret`, `Nd` the dialler's
//!   nonce (in `Open`) and `Nl` the listener's (in `Challenge`), both
//!   16 fresh random bytes per connection;
//! * a message's tag is `HMAC(key, direction ‖ sequence ‖ length ‖ body)`,
//!   with a sequence number per direction counted by both ends.
//!
//! So a message recorded on one connection fails on any other (another
//! nonce pair), replayed or reordered on its own connection it fails (the
//! sequence), and sent back to its author it fails (the direction). The
//! listener answers `Open` with a tagged `Challenge` before the dialler
//! says anything else, so a dialler learns that it reached a member before
//! it sends its identity and layout hash. `Open` is the only message
//! without a tag (no key exists before both nonces do); the only other one
//! is the bare refusal ([`PLAIN_REFUSAL`]) sent to a peer that failed
//! authentication, which says nothing but "refused".
//!
//! Without a secret (loopback test setups; the manifest requires one for
//! any other address) the key is derived from the empty string: messages
//! are still framed and tagged the same way, but anyone who can connect
//! can compute the tags, so such a peer counts as unauthenticated and a
//! refusal tells it nothing but "refused" ([`RefuseCode::Refused`]).

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

type HmacSha256 = Hmac<Sha256>;

/// "VRBTMXCH".
pub const MAGIC: u64 = u64::from_le_bytes(*b"VRBTMXCH");
/// Bumped when a message changes (2: authenticated framing, `Open` and
/// `Challenge`, refusal codes; 3: `Connected` carries the snapshot region;
/// 4: and the coordinators' slot words; 5: and the other engines'
/// regions by id).
pub const VERSION: u16 = 5;
/// Largest frame body, tag included: the largest message (`Connected`
/// listing all [`OTHER_REGIONS_MAX`] other regions) is 654 bytes and its
/// tag 32, so 1024 leaves room and bounds what a peer can make us buffer.
pub const FRAME_BYTES_MAX: usize = 1024;
/// Bytes of each side's per-connection nonce.
pub const NONCE_BYTES: usize = 16;
/// Bytes of a message's tag (a full HMAC-SHA256).
pub const MAC_BYTES: usize = 32;
/// Shortest secret the fabric accepts (the manifest's rule too).
pub const SECRET_BYTES_MIN: usize = 16;
/// How often a blocked read wakes up to check its deadline and the stop
/// flag: the read timeout [`prepare`] sets on a socket.
pub const READ_TICK: Duration = Duration::from_millis(50);
/// Domain separation of the connection key.
const KEY_LABEL: &[u8] = b"verbatim exchange v2";

/// The shared secret of the exchange (`[cluster] exchange_secret`). Its
/// `Debug` never shows it.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// A secret from its bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Secret {
        Secret(bytes.into())
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True for the empty secret.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// A malformed, unauthenticated or unreadable frame.
#[derive(Debug, thiserror::Error)]
pub enum WireError {
    /// The socket failed.
    #[error("exchange connection: {0}")]
    Io(#[from] io::Error),
    /// The peer closed the connection.
    #[error("the peer closed the exchange connection")]
    Closed,
    /// Nothing (or not all of a message) arrived in time.
    #[error("no {0} in time; connection closed")]
    TimedOut(&'static str),
    /// The fabric is stopping.
    #[error("the exchange is stopping")]
    Stopped,
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
    /// A field out of its range, or a message out of place.
    #[error("{0}")]
    Invalid(&'static str),
    /// The peer speaks another version of this protocol.
    #[error("exchange protocol version {0}, this member speaks {VERSION}")]
    Version(u16),
    /// A tag missing or wrong: another secret, a replayed, reordered or
    /// altered message.
    #[error("a message failed authentication (a different cluster.exchange_secret, or a replayed or altered message)")]
    BadMac,
    /// The peer refused the connection without a reason (it explains
    /// itself only to authenticated peers, and in its own log).
    #[error("refused without a reason (the peer's log says why)")]
    Refused,
    /// No randomness for a nonce: the connection is not opened with a
    /// predictable one.
    #[error("no randomness for a connection nonce: {0}")]
    Nonce(getrandom::Error),
    /// The HMAC could not be keyed (never, for HMAC; kept as an error
    /// rather than a panic).
    #[error("HMAC key rejected")]
    Key,
}

impl WireError {
    /// True when the error means the connection is gone (closed or reset
    /// by the peer, or its kernel), as opposed to a protocol violation.
    pub fn is_disconnect(&self) -> bool {
        match self {
            WireError::Closed => true,
            WireError::Io(e) => matches!(
                e.kind(),
                io::ErrorKind::ConnectionReset
                    | io::ErrorKind::ConnectionAborted
                    | io::ErrorKind::BrokenPipe
                    | io::ErrorKind::UnexpectedEof
            ),
            _ => false,
        }
    }
}

/// Why a hello or connect was refused. Sent only to authenticated peers;
/// an unauthenticated one always gets [`RefuseCode::Refused`], and the
/// details (layout hashes, member ids) stay in the refusing member's log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RefuseCode {
    /// No reason given.
    Refused = 0,
    /// The exchange address belongs to another member than the one dialled.
    WrongMember = 1,
    /// Another group size, or a member id outside it.
    Group = 2,
    /// Another memory layout (other `[cluster]` settings).
    Layout = 3,
    /// The listener could not build its side of a channel.
    Channel = 4,
}

impl RefuseCode {
    fn from_u8(v: u8) -> RefuseCode {
        match v {
            1 => RefuseCode::WrongMember,
            2 => RefuseCode::Group,
            3 => RefuseCode::Layout,
            4 => RefuseCode::Channel,
            // Unknown codes (a newer peer) carry no more than "refused".
            _ => RefuseCode::Refused,
        }
    }

    /// What the dialling side should be told, and what to check.
    pub fn explain(self) -> &'static str {
        match self {
            RefuseCode::Refused => {
                "refused (reasons go only to peers with the same cluster.exchange_secret; the refusing member's log says why)"
            }
            RefuseCode::WrongMember => {
                "this exchange address belongs to another member (check members[].verbs.exchange_addr in the manifest)"
            }
            RefuseCode::Group => {
                "another group size or member id (every member must list the same [[members]])"
            }
            RefuseCode::Layout => {
                "layout mismatch: every member must run with the same [cluster] settings (log_ring_bytes, value_bytes_max, session_slot_count, client_slot_count)"
            }
            RefuseCode::Channel => "it could not build its side of the channel (its log says why)",
        }
    }
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

/// Most regions a `Connected` lists beyond its fixed ones (and the bound
/// on their ids): the core's `REGIONS_MAX`.
pub const OTHER_REGIONS_MAX: usize = verbatim_core::fabric::REGIONS_MAX;

/// A message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// First message on a connection, from the dialling side, untagged.
    Open {
        /// [`MAGIC`].
        magic: u64,
        /// [`VERSION`].
        version: u16,
        /// The dialling side's nonce for this connection.
        nonce: [u8; NONCE_BYTES],
    },
    /// The listener's answer to `Open`, tagged.
    Challenge {
        /// The listening side's nonce for this connection.
        nonce: [u8; NONCE_BYTES],
    },
    /// First request after the challenge.
    Hello {
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
    /// A request refused.
    Refuse {
        /// Why (only [`RefuseCode::Refused`] to an unauthenticated peer).
        code: RefuseCode,
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
        /// The snapshot a recovering member READs (readable by every
        /// member; empty when the listener has none).
        snapshot: WireRegion,
        /// The view engine's slot words, which coordinators CAS and READ
        /// (empty when the listener runs without views).
        consensus: WireRegion,
        /// The other engines' regions the dialling side may access (the
        /// multicast's, RDMC's, the subgroups' it is a member of), by
        /// region id: at most [`OTHER_REGIONS_MAX`], ids distinct.
        others: Vec<(u8, WireRegion)>,
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
const T_OPEN: u8 = 8;
const T_CHALLENGE: u8 = 9;

/// The one untagged refusal: to a peer that failed authentication (or
/// sent something that is not an exchange opening). It says "refused" and
/// nothing else; the connection is closed after it.
pub const PLAIN_REFUSAL: [u8; 2] = [T_REFUSE, RefuseCode::Refused as u8];

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
    fn nonce(&mut self) -> Result<[u8; NONCE_BYTES], WireError> {
        let mut n = [0u8; NONCE_BYTES];
        n.copy_from_slice(self.take(NONCE_BYTES)?);
        Ok(n)
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
    /// The message's name, for logs (which never show its fields: they
    /// hold rkeys and the layout hash).
    pub fn kind(&self) -> &'static str {
        match self {
            Msg::Open { .. } => "open",
            Msg::Challenge { .. } => "challenge",
            Msg::Hello { .. } => "hello",
            Msg::HelloOk { .. } => "hello-ok",
            Msg::Refuse { .. } => "refuse",
            Msg::Connect { .. } => "connect",
            Msg::Connected { .. } => "connected",
            Msg::Grant { .. } => "grant",
            Msg::Ack => "ack",
        }
    }

    /// The body (type byte and fields), without a tag.
    pub fn encode(&self) -> Vec<u8> {
        let mut e = Enc(Vec::with_capacity(128));
        match self {
            Msg::Open {
                magic,
                version,
                nonce,
            } => {
                e.u8(T_OPEN);
                e.u64(*magic);
                e.u16(*version);
                e.0.extend_from_slice(nonce);
            }
            Msg::Challenge { nonce } => {
                e.u8(T_CHALLENGE);
                e.0.extend_from_slice(nonce);
            }
            Msg::Hello {
                from,
                to,
                members,
                layout_hash,
                incarnation,
            } => {
                e.u8(T_HELLO);
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
            Msg::Refuse { code } => {
                e.u8(T_REFUSE);
                e.u8(*code as u8);
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
                snapshot,
                consensus,
                others,
            } => {
                e.u8(T_CONNECTED);
                e.qp(qp);
                e.region(control);
                e.region(log);
                e.region(heartbeat);
                e.region(snapshot);
                e.region(consensus);
                // (The sender never lists more: its regions are the core's.)
                e.u8(others.len().min(OTHER_REGIONS_MAX) as u8);
                for (id, r) in others.iter().take(OTHER_REGIONS_MAX) {
                    e.u8(*id);
                    e.region(r);
                }
            }
            Msg::Grant { log } => {
                e.u8(T_GRANT);
                e.region(log);
            }
            Msg::Ack => e.u8(T_ACK),
        }
        e.0
    }

    /// Parses a body (without its tag).
    pub fn decode(body: &[u8]) -> Result<Msg, WireError> {
        let (&t, rest) = body.split_first().ok_or(WireError::Truncated("empty"))?;
        let mut d = Dec { b: rest, what: "" };
        let m = match t {
            T_OPEN => {
                d.what = "open";
                Msg::Open {
                    magic: d.u64()?,
                    version: d.u16()?,
                    nonce: d.nonce()?,
                }
            }
            T_CHALLENGE => {
                d.what = "challenge";
                Msg::Challenge { nonce: d.nonce()? }
            }
            T_HELLO => {
                d.what = "hello";
                Msg::Hello {
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
                Msg::Refuse {
                    code: RefuseCode::from_u8(d.u8()?),
                }
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
                let qp = d.qp()?;
                let control = d.region()?;
                let log = d.region()?;
                let heartbeat = d.region()?;
                let snapshot = d.region()?;
                let consensus = d.region()?;
                let count = usize::from(d.u8()?);
                if count > OTHER_REGIONS_MAX {
                    return Err(WireError::Invalid("more regions than a member has"));
                }
                let mut others: Vec<(u8, WireRegion)> = Vec::with_capacity(count);
                for _ in 0..count {
                    let id = d.u8()?;
                    if usize::from(id) >= OTHER_REGIONS_MAX {
                        return Err(WireError::Invalid("a region id past the last region"));
                    }
                    if others.iter().any(|(seen, _)| *seen == id) {
                        return Err(WireError::Invalid("a region listed twice"));
                    }
                    others.push((id, d.region()?));
                }
                Msg::Connected {
                    qp,
                    control,
                    log,
                    heartbeat,
                    snapshot,
                    consensus,
                    others,
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

/// Which end of a connection a [`Session`] is (also the direction byte
/// of the tags it makes: a message cannot be reflected to its author).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The member that dialled (sends requests).
    Dialler = 0,
    /// The member that accepted (answers them).
    Listener = 1,
}

impl Side {
    fn other(self) -> Side {
        match self {
            Side::Dialler => Side::Listener,
            Side::Listener => Side::Dialler,
        }
    }
}

/// One connection's authentication state: the key derived from the
/// secret and both nonces, and the sequence numbers of both directions.
pub struct Session {
    /// HMAC keyed with the connection key; cloned per message.
    mac: HmacSha256,
    side: Side,
    sent: u64,
    received: u64,
    authenticated: bool,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("side", &self.side)
            .field("sent", &self.sent)
            .field("received", &self.received)
            .field("authenticated", &self.authenticated)
            .finish_non_exhaustive()
    }
}

fn keyed(key: &[u8]) -> Result<HmacSha256, WireError> {
    <HmacSha256 as Mac>::new_from_slice(key).map_err(|_| WireError::Key)
}

impl Session {
    /// The session of one connection, from the secret (none: the empty
    /// key, unauthenticated) and both sides' nonces.
    pub fn new(
        secret: Option<&Secret>,
        side: Side,
        dialler_nonce: &[u8; NONCE_BYTES],
        listener_nonce: &[u8; NONCE_BYTES],
    ) -> Result<Session, WireError> {
        let mut kdf = keyed(secret.map_or(&[][..], |s| s.0.as_slice()))?;
        kdf.update(KEY_LABEL);
        kdf.update(dialler_nonce);
        kdf.update(listener_nonce);
        let key = kdf.finalize().into_bytes();
        Ok(Session {
            mac: keyed(&key)?,
            side,
            sent: 0,
            received: 0,
            authenticated: secret.is_some_and(|s| !s.is_empty()),
        })
    }

    /// True when a secret keys the session: a peer whose tags verify
    /// knows it. Without one, anybody can compute the tags.
    pub fn authenticated(&self) -> bool {
        self.authenticated
    }

    fn tag(&self, direction: Side, seq: u64, body: &[u8]) -> HmacSha256 {
        let mut m = self.mac.clone();
        m.update(&[direction as u8]);
        m.update(&seq.to_le_bytes());
        m.update(&(body.len() as u32).to_le_bytes());
        m.update(body);
        m
    }

    /// The frame body of `msg`: its encoding and its tag.
    pub fn seal(&mut self, msg: &Msg) -> Vec<u8> {
        let mut body = msg.encode();
        let tag = self
            .tag(self.side, self.sent, &body)
            .finalize()
            .into_bytes();
        self.sent += 1;
        body.extend_from_slice(&tag);
        body
    }

    /// Checks a frame body's tag (in constant time) and decodes it. The
    /// bare [`PLAIN_REFUSAL`] is [`WireError::Refused`]; anything else
    /// without a valid tag is [`WireError::BadMac`].
    pub fn open(&mut self, frame: &[u8]) -> Result<Msg, WireError> {
        if frame == PLAIN_REFUSAL {
            return Err(WireError::Refused);
        }
        let body_len = frame
            .len()
            .checked_sub(MAC_BYTES)
            .filter(|&n| n > 0)
            .ok_or(WireError::BadMac)?;
        let (body, tag) = frame.split_at(body_len);
        self.tag(self.side.other(), self.received, body)
            .verify_slice(tag)
            .map_err(|_| WireError::BadMac)?;
        self.received += 1;
        Msg::decode(body)
    }

    /// Sends `msg`, tagged.
    pub fn send(&mut self, w: &mut impl Write, msg: &Msg) -> Result<(), WireError> {
        let frame = self.seal(msg);
        write_frame(w, &frame)
    }

    /// Receives one tagged message within `limits`.
    pub fn recv(
        &mut self,
        r: &mut impl Read,
        limits: ReadLimits,
        stop: &AtomicBool,
    ) -> Result<Msg, WireError> {
        let frame = read_frame(r, limits, stop)?;
        self.open(&frame)
    }
}

/// How long reading one frame may take.
#[derive(Clone, Copy, Debug)]
pub struct ReadLimits {
    /// When the frame's first byte must have arrived; `None`: no limit
    /// (an authenticated member's connection may stay idle).
    pub first_byte_by: Option<Instant>,
    /// How long the rest of a frame may take once its first byte came.
    pub frame_time: Duration,
}

impl ReadLimits {
    /// A whole frame within `d` from now.
    pub fn within(d: Duration) -> ReadLimits {
        ReadLimits {
            first_byte_by: Some(Instant::now() + d),
            frame_time: d,
        }
    }

    /// An idle wait without limit, then `frame_time` for the frame.
    pub fn idle(frame_time: Duration) -> ReadLimits {
        ReadLimits {
            first_byte_by: None,
            frame_time,
        }
    }
}

/// Sets up an exchange socket: no Nagle delay, reads that wake every
/// [`READ_TICK`] (so that [`ReadLimits`] and the stop flag apply), and
/// writes bounded by `write_timeout` (a peer that does not read cannot
/// block us).
pub fn prepare(stream: &TcpStream, write_timeout: Duration) -> io::Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(READ_TICK))?;
    stream.set_write_timeout(Some(write_timeout))
}

/// Writes one frame (length prefix and body).
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> Result<(), WireError> {
    if body.is_empty() || body.len() > FRAME_BYTES_MAX {
        return Err(WireError::FrameLength(body.len()));
    }
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(body);
    w.write_all(&frame)?;
    w.flush()?;
    Ok(())
}

/// Reads one frame body. The reader must wake up now and then (a socket
/// after [`prepare`]) for the deadlines and `stop` to apply.
pub fn read_frame(
    r: &mut impl Read,
    limits: ReadLimits,
    stop: &AtomicBool,
) -> Result<Vec<u8>, WireError> {
    let mut began = None;
    let mut len = [0u8; 4];
    fill(r, &mut len, &mut began, limits, stop)?;
    let n = u32::from_le_bytes(len) as usize;
    // Checked before allocating: a peer cannot make us buffer more.
    if n == 0 || n > FRAME_BYTES_MAX {
        return Err(WireError::FrameLength(n));
    }
    let mut body = vec![0u8; n];
    fill(r, &mut body, &mut began, limits, stop)?;
    Ok(body)
}

fn fill(
    r: &mut impl Read,
    buf: &mut [u8],
    began: &mut Option<Instant>,
    limits: ReadLimits,
    stop: &AtomicBool,
) -> Result<(), WireError> {
    let mut filled = 0;
    while filled < buf.len() {
        if stop.load(Ordering::Acquire) {
            return Err(WireError::Stopped);
        }
        match r.read(&mut buf[filled..]) {
            Ok(0) => return Err(WireError::Closed),
            Ok(n) => {
                filled += n;
                began.get_or_insert_with(Instant::now);
                continue;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(WireError::Io(e)),
        }
        // The read timed out (a tick): check the deadlines.
        let now = Instant::now();
        match *began {
            None => {
                if limits.first_byte_by.is_some_and(|d| now >= d) {
                    return Err(WireError::TimedOut("message"));
                }
            }
            Some(b) => {
                if now.duration_since(b) >= limits.frame_time {
                    return Err(WireError::TimedOut("complete message"));
                }
            }
        }
    }
    Ok(())
}

fn fresh_nonce() -> Result<[u8; NONCE_BYTES], WireError> {
    let mut n = [0u8; NONCE_BYTES];
    getrandom::fill(&mut n).map_err(WireError::Nonce)?;
    Ok(n)
}

/// Sends the bare refusal, ignoring errors (the connection is closed next).
pub fn refuse_plain(w: &mut impl Write) {
    let _ = write_frame(w, &PLAIN_REFUSAL);
}

/// The dialling side's opening: sends `Open` with a fresh nonce, checks
/// the listener's tagged `Challenge`, and returns the session. A
/// [`WireError::BadMac`] here means the listener does not hold our secret.
pub fn dial<S: Read + Write>(
    s: &mut S,
    secret: Option<&Secret>,
    limits: ReadLimits,
    stop: &AtomicBool,
) -> Result<Session, WireError> {
    let nonce = fresh_nonce()?;
    write_frame(
        s,
        &Msg::Open {
            magic: MAGIC,
            version: VERSION,
            nonce,
        }
        .encode(),
    )?;
    let frame = read_frame(s, limits, stop)?;
    if frame == PLAIN_REFUSAL {
        return Err(WireError::Refused);
    }
    // The challenge carries the listener's nonce in clear; its tag is made
    // with the key both nonces give, so it is read first, then checked.
    let body_len = frame
        .len()
        .checked_sub(MAC_BYTES)
        .ok_or(WireError::BadMac)?;
    let Msg::Challenge {
        nonce: listener_nonce,
    } = Msg::decode(&frame[..body_len])?
    else {
        return Err(WireError::Invalid(
            "the listener did not answer with a challenge",
        ));
    };
    let mut session = Session::new(secret, Side::Dialler, &nonce, &listener_nonce)?;
    session.open(&frame)?;
    Ok(session)
}

/// The listening side's opening: reads `Open` within `limits`, checks its
/// magic and version (refusing with the bare refusal otherwise), answers
/// with a tagged `Challenge`, and returns the session.
pub fn accept<S: Read + Write>(
    s: &mut S,
    secret: Option<&Secret>,
    limits: ReadLimits,
    stop: &AtomicBool,
) -> Result<Session, WireError> {
    let frame = read_frame(s, limits, stop)?;
    let (magic, version, dialler_nonce) = match Msg::decode(&frame) {
        Ok(Msg::Open {
            magic,
            version,
            nonce,
        }) => (magic, version, nonce),
        Ok(_) | Err(_) => {
            refuse_plain(s);
            return Err(WireError::Invalid(
                "the first message is not an exchange opening",
            ));
        }
    };
    if magic != MAGIC {
        refuse_plain(s);
        return Err(WireError::Invalid("not a verbatim exchange connection"));
    }
    if version != VERSION {
        refuse_plain(s);
        return Err(WireError::Version(version));
    }
    let nonce = fresh_nonce()?;
    let mut session = Session::new(secret, Side::Listener, &dialler_nonce, &nonce)?;
    session.send(s, &Msg::Challenge { nonce })?;
    Ok(session)
}

/// What probing a member's exchange address after its connection closed
/// says about its process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Its host's kernel refuses or resets connections to the address:
    /// no process listens there any more, so the member's process exited
    /// (its listener lives exactly as long as its fabric).
    Exited,
    /// Something answered the opening there: the process (or a restarted
    /// one) runs.
    Alive,
    /// No answer in time (host down, partition, a stopped process): the
    /// failure detector decides.
    Unknown,
}

/// Probes `addr` (up to `attempts` times, `gap` apart, each bounded by
/// `timeout`) to tell an exited process from a closed connection.
pub fn probe(
    addr: SocketAddr,
    secret: Option<&Secret>,
    attempts: u32,
    gap: Duration,
    timeout: Duration,
    stop: &AtomicBool,
) -> Probe {
    for attempt in 0..attempts {
        if attempt > 0 {
            std::thread::sleep(gap);
        }
        if stop.load(Ordering::Acquire) {
            return Probe::Unknown;
        }
        let mut stream = match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => s,
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => return Probe::Exited,
            Err(e) if e.kind() == io::ErrorKind::TimedOut => return Probe::Unknown,
            Err(_) => continue,
        };
        if prepare(&stream, timeout).is_err() {
            continue;
        }
        match dial(&mut stream, secret, ReadLimits::within(timeout), stop) {
            // A member's listener answered (whether or not it holds our
            // secret).
            Ok(_) | Err(WireError::BadMac | WireError::Refused) => return Probe::Alive,
            // A listening socket closed with our connection still in its
            // backlog resets it: the process is exiting.
            Err(WireError::Io(e)) if e.kind() == io::ErrorKind::ConnectionReset => {
                return Probe::Exited
            }
            Err(WireError::TimedOut(_) | WireError::Stopped) => return Probe::Unknown,
            Err(_) => continue,
        }
    }
    Probe::Unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn secret() -> Secret {
        Secret::new(*b"0123456789abcdef-wire-test")
    }

    fn qp() -> WireQp {
        WireQp {
            qpn: 0x11,
            psn: 0xABCDE,
            lid: 3,
            gid: [7; 16],
            mtu: 3,
        }
    }

    fn hello() -> Msg {
        Msg::Hello {
            from: 1,
            to: 2,
            members: 3,
            layout_hash: 0xDEAD_BEEF,
            incarnation: 42,
        }
    }

    fn all_messages() -> Vec<Msg> {
        let region = WireRegion {
            addr: 0x7000_0000,
            len: 4096,
            rkey: 0x1234,
            granted: true,
            epoch: 9,
        };
        vec![
            Msg::Open {
                magic: MAGIC,
                version: VERSION,
                nonce: [5; NONCE_BYTES],
            },
            Msg::Challenge {
                nonce: [6; NONCE_BYTES],
            },
            hello(),
            Msg::HelloOk { incarnation: 5 },
            Msg::Refuse {
                code: RefuseCode::Layout,
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
                snapshot: region,
                consensus: WireRegion {
                    addr: u64::MAX - 4096,
                    len: 4096,
                    rkey: u32::MAX,
                    granted: true,
                    epoch: u64::MAX,
                },
                others: (0..OTHER_REGIONS_MAX as u8)
                    .map(|id| (id, region))
                    .collect(),
            },
            Msg::Grant { log: region },
            Msg::Ack,
        ]
    }

    /// A dialler's and a listener's session of one connection, without a
    /// socket.
    fn sessions(secret: Option<&Secret>) -> (Session, Session) {
        let (dn, ln) = (fresh_nonce().unwrap(), fresh_nonce().unwrap());
        (
            Session::new(secret, Side::Dialler, &dn, &ln).unwrap(),
            Session::new(secret, Side::Listener, &dn, &ln).unwrap(),
        )
    }

    fn stop() -> AtomicBool {
        AtomicBool::new(false)
    }

    type Opened = Result<(TcpStream, Session), WireError>;

    /// Opens one exchange connection over loopback TCP: the dialler's
    /// result here, the listener's from its thread.
    fn connect(dialler: Option<Secret>, listener: Option<Secret>) -> (Opened, Opened) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            prepare(&s, Duration::from_secs(2)).unwrap();
            accept(
                &mut s,
                listener.as_ref(),
                ReadLimits::within(Duration::from_secs(2)),
                &stop(),
            )
            .map(|sess| (s, sess))
        });
        let mut s = TcpStream::connect(addr).unwrap();
        prepare(&s, Duration::from_secs(2)).unwrap();
        let d = dial(
            &mut s,
            dialler.as_ref(),
            ReadLimits::within(Duration::from_secs(2)),
            &stop(),
        )
        .map(|sess| (s, sess));
        (d, t.join().unwrap())
    }

    #[test]
    fn a_connected_listing_bad_regions_is_refused() {
        let connected = |others: Vec<(u8, WireRegion)>| Msg::Connected {
            qp: WireQp {
                qpn: 1,
                psn: 2,
                lid: 3,
                gid: [4; 16],
                mtu: 5,
            },
            control: WireRegion::default(),
            log: WireRegion::default(),
            heartbeat: WireRegion::default(),
            snapshot: WireRegion::default(),
            consensus: WireRegion::default(),
            others,
        };
        let r = WireRegion::default();
        for (others, why) in [
            (vec![(8, r), (8, r)], "a region listed twice"),
            (
                vec![(OTHER_REGIONS_MAX as u8, r)],
                "a region id past the last region",
            ),
        ] {
            assert!(
                matches!(Msg::decode(&connected(others).encode()), Err(WireError::Invalid(w)) if w == why),
                "{why}"
            );
        }
        // A count beyond what a member has (hand-made: encode never
        // writes one).
        let mut body = connected(Vec::new()).encode();
        *body.last_mut().unwrap() = OTHER_REGIONS_MAX as u8 + 1;
        assert!(matches!(
            Msg::decode(&body),
            Err(WireError::Invalid("more regions than a member has"))
        ));
    }

    #[test]
    fn every_message_round_trips_sealed_and_fits_a_frame() {
        let (mut d, mut l) = sessions(Some(&secret()));
        for m in all_messages() {
            assert_eq!(Msg::decode(&m.encode()).unwrap(), m);
            let frame = d.seal(&m);
            assert!(
                frame.len() <= FRAME_BYTES_MAX,
                "{m:?}: {} bytes",
                frame.len()
            );
            assert_eq!(l.open(&frame).unwrap(), m);
            let mut buf = Vec::new();
            l.send(&mut buf, &m).unwrap();
            assert_eq!(
                d.recv(&mut buf.as_slice(), ReadLimits::idle(READ_TICK), &stop())
                    .unwrap(),
                m
            );
        }
        // Unknown refusal codes (a newer peer) say no more than "refused".
        assert_eq!(
            Msg::decode(&[T_REFUSE, 200]).unwrap(),
            Msg::Refuse {
                code: RefuseCode::Refused
            }
        );
        assert_eq!(format!("{:?}", secret()), "Secret(<redacted>)");
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
        // Every truncation of every message is an error.
        for m in all_messages() {
            let full = m.encode();
            for n in 0..full.len() {
                assert!(
                    Msg::decode(&full[..n]).is_err(),
                    "{m:?}: prefix of {n} bytes"
                );
            }
        }
    }

    /// The connection opens and tagged messages pass both ways when both
    /// sides hold the same secret.
    #[test]
    fn messages_under_the_shared_secret_are_accepted() {
        let (d, l) = connect(Some(secret()), Some(secret()));
        let ((mut ds, mut d), (mut ls, mut l)) = (d.unwrap(), l.unwrap());
        assert!(d.authenticated() && l.authenticated());
        for _ in 0..3 {
            d.send(&mut ds, &hello()).unwrap();
            let got = l
                .recv(&mut ls, ReadLimits::within(Duration::from_secs(2)), &stop())
                .unwrap();
            assert_eq!(got, hello());
            l.send(&mut ls, &Msg::HelloOk { incarnation: 7 }).unwrap();
            let got = d
                .recv(&mut ds, ReadLimits::within(Duration::from_secs(2)), &stop())
                .unwrap();
            assert_eq!(got, Msg::HelloOk { incarnation: 7 });
        }
    }

    /// Loopback test setups without a secret keep working (tagged with the
    /// empty key, and counted as unauthenticated).
    #[test]
    fn without_a_secret_the_exchange_still_works() {
        let (d, l) = connect(None, None);
        let ((mut ds, mut d), (mut ls, mut l)) = (d.unwrap(), l.unwrap());
        assert!(!d.authenticated() && !l.authenticated());
        d.send(&mut ds, &hello()).unwrap();
        let got = l
            .recv(&mut ls, ReadLimits::within(Duration::from_secs(2)), &stop())
            .unwrap();
        assert_eq!(got, hello());
    }

    /// A listener with another secret (or none) fails the dialler's check
    /// of its challenge: the dialler says nothing more.
    #[test]
    fn another_secret_fails_at_the_challenge() {
        let other = Secret::new(*b"fedcba9876543210-other");
        for (d, l) in [
            (Some(secret()), Some(other)),
            (Some(secret()), None),
            (None, Some(secret())),
        ] {
            let (dialled, _) = connect(d, l);
            assert!(matches!(dialled, Err(WireError::BadMac)), "{dialled:?}");
        }
    }

    #[test]
    fn a_tampered_message_is_refused() {
        let (mut d, l) = sessions(Some(&secret()));
        let frame = d.seal(&hello());
        for i in 0..frame.len() {
            for bit in [0x01, 0x80] {
                let mut bad = frame.clone();
                bad[i] ^= bit;
                // A fresh listener session each time: a refused frame does
                // not advance the sequence, but keep the check independent.
                let mut l2 = Session {
                    mac: l.mac.clone(),
                    side: Side::Listener,
                    sent: 0,
                    received: 0,
                    authenticated: true,
                };
                assert!(
                    matches!(l2.open(&bad), Err(WireError::BadMac)),
                    "byte {i} bit {bit:#x}"
                );
            }
        }
        // A missing or cut tag is refused too, and so is a message tagged
        // under another secret.
        let mut l = l;
        let body = hello().encode();
        assert!(matches!(l.open(&body), Err(WireError::BadMac)));
        assert!(matches!(
            l.open(&frame[..frame.len() - 1]),
            Err(WireError::BadMac)
        ));
        assert!(matches!(
            l.open(&frame[..MAC_BYTES]),
            Err(WireError::BadMac)
        ));
        let (mut stranger, _) = sessions(Some(&Secret::new(*b"not-the-cluster-secret")));
        assert!(matches!(
            l.open(&stranger.seal(&hello())),
            Err(WireError::BadMac)
        ));
        // The untampered frame still passes.
        assert_eq!(l.open(&frame).unwrap(), hello());
    }

    #[test]
    fn a_replayed_message_is_refused() {
        let s = secret();
        let (mut d1, mut l1) = sessions(Some(&s));
        let (_, mut l2) = sessions(Some(&s));
        let frame = d1.seal(&hello());
        // On another connection (other nonces).
        assert!(matches!(l2.open(&frame), Err(WireError::BadMac)));
        // Twice on its own connection (the sequence moved on).
        assert_eq!(l1.open(&frame).unwrap(), hello());
        assert!(matches!(l1.open(&frame), Err(WireError::BadMac)));
        // Sent back to its author (the direction).
        let answer = l1.seal(&Msg::HelloOk { incarnation: 1 });
        let mut l1_again = Session {
            mac: l1.mac.clone(),
            side: Side::Listener,
            sent: 0,
            received: 0,
            authenticated: true,
        };
        assert!(matches!(l1_again.open(&answer), Err(WireError::BadMac)));
        // Out of order on its own connection.
        let first = d1.seal(&Msg::Ack);
        let second = d1.seal(&Msg::Ack);
        assert!(matches!(l1.open(&second), Err(WireError::BadMac)));
        assert_eq!(l1.open(&first).unwrap(), Msg::Ack);
        assert_eq!(l1.open(&second).unwrap(), Msg::Ack);
    }

    /// What an eavesdropper would do: record a dialler's whole transcript
    /// and play it to the listener again. The opening passes (it is not
    /// tagged), the hello does not (the listener's nonce is new).
    #[test]
    fn a_recorded_connection_replayed_is_refused() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let s = secret();
        let listener = {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut results = Vec::new();
                for _ in 0..2 {
                    let (mut c, _) = l.accept().unwrap();
                    prepare(&c, Duration::from_secs(2)).unwrap();
                    let lim = ReadLimits::within(Duration::from_secs(2));
                    let r = accept(&mut c, Some(&s), lim, &stop())
                        .and_then(|mut sess| sess.recv(&mut c, lim, &stop()));
                    results.push(r);
                }
                results
            })
        };
        // The genuine connection, recorded.
        let mut transcript = Vec::new();
        {
            let mut c = TcpStream::connect(addr).unwrap();
            prepare(&c, Duration::from_secs(2)).unwrap();
            struct Tee<'a>(&'a mut TcpStream, &'a mut Vec<u8>);
            impl Read for Tee<'_> {
                fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
                    self.0.read(b)
                }
            }
            impl Write for Tee<'_> {
                fn write(&mut self, b: &[u8]) -> io::Result<usize> {
                    let n = self.0.write(b)?;
                    self.1.extend_from_slice(&b[..n]);
                    Ok(n)
                }
                fn flush(&mut self) -> io::Result<()> {
                    self.0.flush()
                }
            }
            let mut tee = Tee(&mut c, &mut transcript);
            let lim = ReadLimits::within(Duration::from_secs(2));
            let mut sess = dial(&mut tee, Some(&s), lim, &stop()).unwrap();
            sess.send(&mut tee, &hello()).unwrap();
        }
        // The replay.
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(&transcript).unwrap();
        let results = listener.join().unwrap();
        assert_eq!(results[0].as_ref().unwrap(), &hello());
        assert!(
            matches!(results[1], Err(WireError::BadMac)),
            "{:?}",
            results[1]
        );
    }

    #[test]
    fn an_oversized_message_is_refused() {
        for n in [FRAME_BYTES_MAX + 1, 1 << 20, u32::MAX as usize] {
            let mut frame = (n as u32).to_le_bytes().to_vec();
            frame.extend_from_slice(&[T_ACK; 64]);
            let r = read_frame(&mut frame.as_slice(), ReadLimits::idle(READ_TICK), &stop());
            assert!(
                matches!(r, Err(WireError::FrameLength(m)) if m == n),
                "{r:?}"
            );
        }
        let zero = 0u32.to_le_bytes();
        assert!(matches!(
            read_frame(&mut zero.as_slice(), ReadLimits::idle(READ_TICK), &stop()),
            Err(WireError::FrameLength(0))
        ));
        assert!(matches!(
            write_frame(&mut Vec::new(), &[0u8; FRAME_BYTES_MAX + 1]),
            Err(WireError::FrameLength(_))
        ));
        // Over a socket: the listener refuses the announced length at once,
        // without waiting for (or allocating) the body.
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        c.write_all(&(64u32 << 20).to_le_bytes()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        prepare(&s, Duration::from_secs(2)).unwrap();
        let r = accept(
            &mut s,
            Some(&secret()),
            ReadLimits::within(Duration::from_secs(2)),
            &stop(),
        );
        assert!(matches!(r, Err(WireError::FrameLength(_))), "{r:?}");
    }

    /// A peer that connects and sends nothing, or stops halfway through a
    /// message, is dropped when its time is up; the stop flag ends a wait.
    #[test]
    fn a_silent_peer_times_out() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        prepare(&s, Duration::from_secs(2)).unwrap();
        let t = Instant::now();
        let r = accept(
            &mut s,
            Some(&secret()),
            ReadLimits::within(Duration::from_millis(300)),
            &stop(),
        );
        let took = t.elapsed();
        assert!(matches!(r, Err(WireError::TimedOut(_))), "{r:?}");
        assert!(
            took >= Duration::from_millis(300) && took < Duration::from_secs(3),
            "{took:?}"
        );
        // Half a frame, then silence, on a connection allowed to idle.
        c.write_all(&[40, 0, 0, 0, T_HELLO]).unwrap();
        let t = Instant::now();
        let r = read_frame(
            &mut s,
            ReadLimits::idle(Duration::from_millis(300)),
            &stop(),
        );
        assert!(matches!(r, Err(WireError::TimedOut(_))), "{r:?}");
        assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
        // The stop flag ends an unbounded idle wait.
        let flag = AtomicBool::new(true);
        let r = read_frame(&mut s, ReadLimits::idle(Duration::from_secs(60)), &flag);
        assert!(matches!(r, Err(WireError::Stopped)), "{r:?}");
        // A close is told apart from a timeout.
        drop(c);
        let r = read_frame(&mut s, ReadLimits::idle(Duration::from_secs(2)), &stop());
        assert!(r.as_ref().is_err_and(WireError::is_disconnect), "{r:?}");
    }

    /// Another protocol version or a stranger's bytes get the bare
    /// refusal, which says nothing else.
    #[test]
    fn a_foreign_opening_gets_the_bare_refusal() {
        let openings = [
            Msg::Open {
                magic: MAGIC,
                version: 1,
                nonce: [0; NONCE_BYTES],
            }
            .encode(),
            Msg::Open {
                magic: 7,
                version: VERSION,
                nonce: [0; NONCE_BYTES],
            }
            .encode(),
            hello().encode(),
        ];
        for open in openings {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            prepare(&c, Duration::from_secs(2)).unwrap();
            write_frame(&mut c, &open).unwrap();
            let (mut s, _) = l.accept().unwrap();
            prepare(&s, Duration::from_secs(2)).unwrap();
            let r = accept(
                &mut s,
                None,
                ReadLimits::within(Duration::from_secs(2)),
                &stop(),
            );
            assert!(r.is_err());
            let answer = read_frame(&mut c, ReadLimits::within(Duration::from_secs(2)), &stop());
            assert_eq!(answer.unwrap(), PLAIN_REFUSAL);
        }
    }

    /// A closed exchange connection is only a suspicion: the probe tells an
    /// exited process (nothing listens) from a live one.
    #[test]
    fn the_probe_tells_an_exited_process_from_a_live_one() {
        let t = Duration::from_millis(300);
        // Nothing listens: the kernel refuses.
        let gone = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = gone.local_addr().unwrap();
        drop(gone);
        assert_eq!(probe(addr, None, 3, t, t, &stop()), Probe::Exited);
        // A member's listener answers the opening, with or without our
        // secret.
        for theirs in [Some(secret()), None] {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = l.local_addr().unwrap();
            let th = std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                prepare(&s, Duration::from_secs(2)).unwrap();
                let _ = accept(
                    &mut s,
                    theirs.as_ref(),
                    ReadLimits::within(Duration::from_secs(2)),
                    &stop(),
                );
            });
            assert_eq!(probe(addr, Some(&secret()), 3, t, t, &stop()), Probe::Alive);
            th.join().unwrap();
        }
        // A listener that accepts nothing (a stopped process): undecided.
        let stuck = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = stuck.local_addr().unwrap();
        assert_eq!(probe(addr, None, 1, t, t, &stop()), Probe::Unknown);
    }
}
