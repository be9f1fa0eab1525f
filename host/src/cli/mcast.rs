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
        limits: RespLimits::for_kv(&manifest.kv_limits())
            .with_publications(manifest.multicast.publish_bytes_max()),
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
/// end of stdin once its lines are delivered (with `stay`, only on a
/// signal).
pub fn join(options: &crate::group::GroupOptions, stay: bool) -> Result<()> {
    use crate::group::{Group, GroupError};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc::{sync_channel, TryRecvError};
    use std::sync::Arc;

    // Joined first: a signal during the wait for the others ends the
    // process at once, as usual.
    let mut g = Group::join(options)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(sig, stop.clone()).context("installing signal handlers")?;
    }
    // Lines come from a thread so the member's loop never blocks on
    // stdin; the channel is bounded (a reader far ahead waits).
    let (lines_tx, lines) = sync_channel::<Vec<u8>>(1024);
    let line_max = options.payload_bytes_max as usize;
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            while let Some(line) = read_line_capped(&mut stdin, line_max) {
                match line {
                    Ok(line) => {
                        if lines_tx.send(line).is_err() {
                            break;
                        }
                    }
                    Err(len) => eprintln!(
                        "verbatim mcast join: a line of {len} bytes or more not sent: \
                         longer than --payload-bytes-max {line_max}"
                    ),
                }
            }
        })
        .context("starting the stdin thread")?;
    let stdout = std::io::stdout();
    let mut held: Option<Vec<u8>> = None;
    let mut eof = false;
    let mut shown_view: Option<u64> = None;
    let mut idle_polls = 0u32;
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
        if eof && !stay && held.is_none() && g.pending() == 0 {
            break;
        }
        // Not a pinned replica: an idle member gives the core back.
        if worked {
            idle_polls = 0;
        } else {
            idle_polls = idle_polls.saturating_add(1);
            if idle_polls > 1024 {
                std::thread::sleep(Duration::from_micros(200));
            } else {
                std::thread::yield_now();
            }
        }
    }
    Ok(())
}

/// The next line of `r` without its `\n` (and `\r`), or `Err(len)` for a
/// line longer than `max` bytes (skipped, never held whole: `len` is
/// what was read of it, at most `max + 1`); `None` at the end.
fn read_line_capped(r: &mut impl std::io::BufRead, max: usize) -> Option<Result<Vec<u8>, usize>> {
    let mut line = Vec::new();
    let mut too_long = false;
    let mut any = false;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => &[],
        };
        if buf.is_empty() {
            break;
        }
        any = true;
        let (part, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], Some(i + 1)),
            None => (buf, None),
        };
        if !too_long {
            let room = (max + 2).saturating_sub(line.len());
            line.extend_from_slice(&part[..part.len().min(room)]);
            // One byte more than the limit, plus a possible '\r'.
            too_long = line.len() > max + 1;
        }
        let used = done.unwrap_or(buf.len());
        r.consume(used);
        if done.is_some() {
            break;
        }
    }
    if !any {
        return None;
    }
    if line.last() == Some(&b'\r') && !too_long {
        line.pop();
    }
    if too_long || line.len() > max {
        return Some(Err(line.len().min(max + 1)));
    }
    Some(Ok(line))
}

/// `verbatim mcast log <path>`: one line per record of a replica's
/// multicast log: `start <incarnation>`, `view <epoch> members <ids>`,
/// `message <epoch> <sender> <index> <channel> <message>` (or `null
/// ...`), `delivered <epoch> <seq> <sender> <index>`; then what is torn at
/// its end, if anything (a corrupt log is an error).
pub fn print_log(path: &std::path::Path) -> Result<()> {
    use crate::replica::mcast_log::{read, Record};
    let contents = read(
        path,
        verbatim_core::multicast::MCAST_PAYLOAD_BYTES_CAP as usize,
    )
    .with_context(|| format!("reading {}", path.display()))?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    for r in &contents.records {
        match r {
            Record::View { epoch, members } => {
                let ids: Vec<String> = (0..64)
                    .filter(|m| members & (1u64 << m) != 0)
                    .map(|m| m.to_string())
                    .collect();
                writeln!(out, "view {epoch} members {}", ids.join(" "))?;
            }
            Record::Message {
                epoch,
                sender,
                index,
                payload,
                null,
            } => {
                if *null {
                    writeln!(out, "null {epoch} {sender} {index}")?;
                } else {
                    let text = match verbatim_client::pubsub::decode(payload) {
                        Some((channel, message)) => format!(
                            "{} {}",
                            String::from_utf8_lossy(channel),
                            String::from_utf8_lossy(message)
                        ),
                        None => format!("(not a publication: {} bytes)", payload.len()),
                    };
                    writeln!(out, "message {epoch} {sender} {index} {text}")?;
                }
            }
            Record::Delivered {
                epoch,
                seq,
                sender,
                index,
            } => writeln!(out, "delivered {epoch} {seq} {sender} {index}")?,
            Record::Start { incarnation } => writeln!(out, "start {incarnation}")?,
        }
    }
    match contents.readable_after_tear {
        Some(at) => bail!(
            "{}: the records stop being readable before byte {} though whole records follow at byte {at}: the log is corrupt",
            path.display(),
            std::fs::metadata(path).map_or(0, |m| m.len()) - contents.torn_bytes as u64
        ),
        None if contents.torn_bytes > 0 => writeln!(
            out,
            "# {} bytes at the end are not a whole record (a write cut short by a crash)",
            contents.torn_bytes
        )?,
        None => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::read_line_capped;

    #[test]
    fn lines_are_read_whole_up_to_the_limit_and_longer_ones_skipped() {
        let input = b"short\r\nexactly8\nmuch too long a line\n\nlast".to_vec();
        let mut r = std::io::BufReader::with_capacity(4, &input[..]);
        let mut got = Vec::new();
        while let Some(l) = read_line_capped(&mut r, 8) {
            got.push(l);
        }
        assert_eq!(
            got,
            vec![
                Ok(b"short".to_vec()),
                Ok(b"exactly8".to_vec()),
                Err(9),
                Ok(Vec::new()),
                Ok(b"last".to_vec()),
            ]
        );
    }
}
