//! A minimal RESP2 client over one TCP connection (TCP_NODELAY), the same
//! for Redis and for Verbatim's RESP port, so both are measured through
//! identical client code: encode, one `write`, read until one reply per
//! command has arrived.

use crate::{BenchError, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Largest reply accepted (a 4 KiB value plus framing, with room).
pub const REPLY_BYTES_MAX: usize = 1 << 20;

/// A parsed reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Simple(String),
    /// `-ERR ...`.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$n` (or `$-1`: `None`).
    Bulk(Option<Vec<u8>>),
    /// `*n` (or `*-1`: empty).
    Array(Vec<Reply>),
}

/// Appends the RESP encoding of one command (an array of bulk strings).
pub fn encode_command(args: &[&[u8]], out: &mut Vec<u8>) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn line(buf: &[u8]) -> Option<(&[u8], usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    Some((&buf[..end], end + 2))
}

/// Parses one reply from the front of `buf`: `Ok(None)` when incomplete,
/// else the reply and the bytes it used.
pub fn parse_reply(buf: &[u8]) -> std::result::Result<Option<(Reply, usize)>, String> {
    let Some(&kind) = buf.first() else {
        return Ok(None);
    };
    let Some((head, used)) = line(&buf[1..]) else {
        return Ok(None);
    };
    let used = used + 1;
    let text = std::str::from_utf8(head).map_err(|_| "reply header is not UTF-8".to_string())?;
    let int = || {
        text.parse::<i64>()
            .map_err(|_| format!("bad integer `{text}` in a reply"))
    };
    match kind {
        b'+' => Ok(Some((Reply::Simple(text.to_string()), used))),
        b'-' => Ok(Some((Reply::Error(text.to_string()), used))),
        b':' => Ok(Some((Reply::Int(int()?), used))),
        b'$' => {
            let n = int()?;
            if n < 0 {
                return Ok(Some((Reply::Bulk(None), used)));
            }
            let n = n as usize;
            if n > REPLY_BYTES_MAX {
                return Err(format!("bulk reply of {n} bytes"));
            }
            if buf.len() < used + n + 2 {
                return Ok(None);
            }
            if &buf[used + n..used + n + 2] != b"\r\n" {
                return Err("bulk reply without its CRLF".into());
            }
            Ok(Some((
                Reply::Bulk(Some(buf[used..used + n].to_vec())),
                used + n + 2,
            )))
        }
        b'*' => {
            let n = int()?;
            if n < 0 {
                return Ok(Some((Reply::Array(Vec::new()), used)));
            }
            if n as usize > REPLY_BYTES_MAX {
                return Err(format!("array reply of {n} items"));
            }
            let mut items = Vec::with_capacity(n as usize);
            let mut at = used;
            for _ in 0..n {
                match parse_reply(&buf[at..])? {
                    Some((r, u)) => {
                        items.push(r);
                        at += u;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((Reply::Array(items), at)))
        }
        other => Err(format!("unknown reply type byte {other:#04x}")),
    }
}

/// One RESP connection.
pub struct RespConn {
    stream: TcpStream,
    addr: String,
    inbuf: Vec<u8>,
    outbuf: Vec<u8>,
    spin: bool,
}

impl RespConn {
    /// Connects to `addr`; with `spin`, replies are awaited by polling a
    /// non-blocking socket instead of sleeping in `read`.
    pub fn connect(addr: &str, spin: bool) -> Result<RespConn> {
        let err = |m: String| BenchError::Resp {
            addr: addr.to_string(),
            message: m,
        };
        let sa: std::net::SocketAddr = addr.parse().map_err(|e| err(format!("{e}")))?;
        let stream = TcpStream::connect_timeout(&sa, Duration::from_secs(2))
            .map_err(|e| err(format!("connect: {e}")))?;
        stream
            .set_nodelay(true)
            .map_err(|e| err(format!("TCP_NODELAY: {e}")))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| err(e.to_string()))?;
        stream
            .set_nonblocking(spin)
            .map_err(|e| err(e.to_string()))?;
        Ok(RespConn {
            stream,
            addr: addr.to_string(),
            inbuf: Vec::with_capacity(64 * 1024),
            outbuf: Vec::with_capacity(8 * 1024),
            spin,
        })
    }

    fn err(&self, message: impl Into<String>) -> BenchError {
        BenchError::Resp {
            addr: self.addr.clone(),
            message: message.into(),
        }
    }

    /// Sends one command and returns its reply.
    pub fn command(&mut self, args: &[&[u8]]) -> Result<Reply> {
        let mut r = self.pipeline(&[args])?;
        Ok(r.pop().expect("one reply per command"))
    }

    /// Sends commands in one write and returns their replies, in order.
    pub fn pipeline(&mut self, cmds: &[&[&[u8]]]) -> Result<Vec<Reply>> {
        self.outbuf.clear();
        for c in cmds {
            encode_command(c, &mut self.outbuf);
        }
        let mut written = 0;
        while written < self.outbuf.len() {
            match self.stream.write(&self.outbuf[written..]) {
                Ok(0) => return Err(self.err("connection closed while writing")),
                Ok(n) => written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => std::hint::spin_loop(),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.err(format!("write: {e}"))),
            }
        }
        let mut replies = Vec::with_capacity(cmds.len());
        let mut chunk = [0u8; 16 * 1024];
        while replies.len() < cmds.len() {
            match parse_reply(&self.inbuf) {
                Ok(Some((r, used))) => {
                    self.inbuf.drain(..used);
                    replies.push(r);
                    continue;
                }
                Ok(None) => {}
                Err(e) => return Err(self.err(e)),
            }
            if self.inbuf.len() > REPLY_BYTES_MAX {
                return Err(self.err("reply too large"));
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(self.err("connection closed")),
                Ok(n) => self.inbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock && self.spin => std::hint::spin_loop(),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.err(format!("read: {e}"))),
            }
        }
        Ok(replies)
    }

    /// Sends a command and fails unless the reply is not an error.
    pub fn expect_ok(&mut self, args: &[&[u8]]) -> Result<Reply> {
        match self.command(args)? {
            Reply::Error(e) => {
                Err(self.err(format!("{} answered {e}", String::from_utf8_lossy(args[0]))))
            }
            r => Ok(r),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_encode_as_arrays_of_bulk_strings() {
        let mut out = Vec::new();
        encode_command(&[b"SET", b"k", b""], &mut out);
        assert_eq!(out, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n");
    }

    #[test]
    fn replies_parse_incrementally() {
        let all = b"+OK\r\n:2\r\n$3\r\nabc\r\n$-1\r\n*2\r\n:1\r\n$1\r\nx\r\n-ERR no\r\n";
        let mut at = 0;
        let mut got = Vec::new();
        while at < all.len() {
            // Every proper prefix of the next reply is incomplete.
            let (r, used) = parse_reply(&all[at..]).unwrap().unwrap();
            for cut in 0..used {
                assert_eq!(parse_reply(&all[at..at + cut]).unwrap(), None);
            }
            got.push(r);
            at += used;
        }
        assert_eq!(
            got,
            vec![
                Reply::Simple("OK".into()),
                Reply::Int(2),
                Reply::Bulk(Some(b"abc".to_vec())),
                Reply::Bulk(None),
                Reply::Array(vec![Reply::Int(1), Reply::Bulk(Some(b"x".to_vec()))]),
                Reply::Error("ERR no".into()),
            ]
        );
        assert!(parse_reply(b"?x\r\n").is_err());
        assert!(parse_reply(b":x\r\n").is_err());
        assert!(parse_reply(b"$1\r\nab\r\n").is_err());
    }
}
