//! `verbatim mcast send|tail`: the group's atomic multicast from the
//! command line, over a replica's RESP listener (`PUBLISH`, `SUBSCRIBE`).

use anyhow::{anyhow, bail, Context, Result};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use verbatim_client::manifest::Manifest;
use verbatim_client::resp::{self, Frame, RespLimits};

/// Connects to member `member`'s RESP listener (with `AUTH` when the
/// manifest sets a password).
fn connect(manifest: &Manifest, member: u8) -> Result<Conn> {
    let m = manifest
        .members
        .get(usize::from(member))
        .ok_or_else(|| anyhow!("no member {member} in the manifest"))?;
    let addr = m
        .resp_addr
        .as_deref()
        .ok_or_else(|| anyhow!("member {member} has no resp_addr: pick another with --member"))?;
    let stream = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    let mut c = Conn {
        stream,
        buf: Vec::new(),
        limits: RespLimits::for_kv(&manifest.kv_limits()),
    };
    if let Some(password) = &manifest.cluster.resp_password {
        c.send(&[b"AUTH", password.as_bytes()])?;
        let reply = c.next_frame(Duration::from_secs(10))?;
        if reply.first() != Some(&b'+') {
            bail!("AUTH refused: {}", String::from_utf8_lossy(&reply));
        }
    }
    Ok(c)
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    limits: RespLimits,
}

impl Conn {
    fn send(&mut self, words: &[&[u8]]) -> Result<()> {
        let mut out = Vec::new();
        resp::encode_array_header(words.len(), &mut out);
        for w in words {
            resp::encode_bulk(w, &mut out);
        }
        self.stream.write_all(&out).context("sending")?;
        Ok(())
    }

    /// The raw bytes of the next whole frame.
    fn next_frame(&mut self, timeout: Duration) -> Result<Vec<u8>> {
        self.stream.set_read_timeout(Some(timeout))?;
        loop {
            if let Some((_, used)) = resp::parse_frame(&self.buf, &self.limits)
                .map_err(|e| anyhow!("malformed reply: {e:?}"))?
            {
                let frame = self.buf[..used].to_vec();
                self.buf.drain(..used);
                return Ok(frame);
            }
            let mut chunk = [0u8; 16 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => bail!("the replica closed the connection"),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => return Err(e).context("waiting for the replica"),
            }
        }
    }
}

/// `verbatim mcast send <channel> <message>`: prints how many subscribers
/// of that replica it reached, once the replica delivered it.
pub fn send(manifest: &Manifest, member: u8, channel: &str, message: &str) -> Result<()> {
    let mut c = connect(manifest, member)?;
    c.send(&[b"PUBLISH", channel.as_bytes(), message.as_bytes()])?;
    let reply = c.next_frame(Duration::from_secs(30))?;
    match resp::parse_frame(&reply, &c.limits) {
        Ok(Some((Frame::Integer(n), _))) => {
            println!("{n}");
            Ok(())
        }
        Ok(Some((Frame::Error(e), _))) => bail!("{}", String::from_utf8_lossy(e)),
        _ => bail!("unexpected reply {:?}", String::from_utf8_lossy(&reply)),
    }
}

/// `verbatim mcast tail <channel>...`: prints `channel message` per
/// delivered message, in the group's order, until `count` (or for ever).
pub fn tail(
    manifest: &Manifest,
    member: u8,
    channels: &[String],
    count: Option<u64>,
) -> Result<()> {
    let mut c = connect(manifest, member)?;
    let mut words: Vec<&[u8]> = vec![b"SUBSCRIBE"];
    words.extend(channels.iter().map(|s| s.as_bytes()));
    c.send(&words)?;
    let mut printed = 0u64;
    let stdout = std::io::stdout();
    while count.is_none_or(|n| printed < n) {
        let raw = c.next_frame(Duration::from_secs(3600))?;
        let Ok(Some((frame, _))) = resp::parse_frame(&raw, &c.limits) else {
            bail!("unexpected reply {:?}", String::from_utf8_lossy(&raw));
        };
        match frame {
            Frame::Array(a) => {
                let parts: Vec<&[u8]> = a.iter().filter_map(|f| f.as_bytes()).collect();
                match parts.as_slice() {
                    [kind, channel, message] if *kind == b"message" => {
                        let mut out = stdout.lock();
                        writeln!(
                            out,
                            "{} {}",
                            String::from_utf8_lossy(channel),
                            String::from_utf8_lossy(message)
                        )?;
                        out.flush()?;
                        printed += 1;
                    }
                    // Subscription confirmations.
                    _ => {}
                }
            }
            Frame::Error(e) => bail!("{}", String::from_utf8_lossy(e)),
            _ => {}
        }
    }
    Ok(())
}

/// `verbatim mcast join <group> --members N --me I`: this process becomes
/// member `I` of an embedded group (no replica: [`crate::group::Group`]
/// over shared memory). Every line read from stdin is multicast; every
/// delivered message is printed as `<view> <seq> <sender> <message>`, in
/// the group's total order (the same at every member), and every view
/// as `# view <epoch>: members <ids>`. Ends on SIGINT/SIGTERM, or at the
/// end of stdin once its lines are delivered.
pub fn join(options: &crate::group::GroupOptions) -> Result<()> {
    use crate::group::{Group, GroupError};
    use std::io::BufRead;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc::{sync_channel, TryRecvError};
    use std::sync::Arc;

    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    let mut g = Group::join(options)?;
    // Lines come from a thread so the member's loop never blocks on
    // stdin; the channel is bounded (a reader far ahead waits).
    let (lines_tx, lines) = sync_channel::<Vec<u8>>(1024);
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            for line in std::io::stdin().lock().split(b'\n') {
                let Ok(mut line) = line else { break };
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if lines_tx.send(line).is_err() {
                    break;
                }
            }
        })
        .context("starting the stdin thread")?;
    let stdout = std::io::stdout();
    let mut held: Option<Vec<u8>> = None;
    let mut eof = false;
    let mut shown_view: Option<u64> = None;
    while !stop.load(Ordering::Acquire) {
        loop {
            if held.is_none() && !eof {
                match lines.try_recv() {
                    Ok(l) => held = Some(l),
                    Err(TryRecvError::Empty) => {}
                    Err(TryRecvError::Disconnected) => eof = true,
                }
            }
            let Some(line) = held.as_deref() else { break };
            match g.send(line) {
                Ok(()) => held = None,
                Err(GroupError::Backlog(_)) => break,
                Err(e @ GroupError::TooLarge { .. }) => {
                    eprintln!("verbatim mcast join: line not sent: {e}");
                    held = None;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let worked = g.poll();
        let mut out = stdout.lock();
        while let Some(d) = g.next_delivery() {
            writeln!(
                out,
                "{} {} {} {}",
                d.epoch,
                d.seq,
                d.sender.0,
                String::from_utf8_lossy(d.payload)
            )?;
        }
        if g.formed() && shown_view != Some(g.epoch()) {
            let v = g.view();
            shown_view = Some(v.epoch);
            let ids: Vec<String> = v.members.iter().map(|m| m.0.to_string()).collect();
            writeln!(out, "# view {}: members {}", v.epoch, ids.join(" "))?;
        }
        out.flush()?;
        drop(out);
        if let Some(cause) = g.status().halted {
            bail!("this member left the group for good ({cause:?})");
        }
        if eof && held.is_none() && g.pending() == 0 {
            break;
        }
        if !worked {
            std::thread::yield_now();
        }
    }
    Ok(())
}
