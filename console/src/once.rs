//! `--once`: attach, wait for one snapshot of each replica (or the
//! timeout), render one frame as text.

use crate::app::{App, Panel};
use crate::error::ConsoleError;
use crate::link::{spawn_all, WatchConfig, CHANNEL_CAPACITY};
use crate::render::render_text;
use crate::state::{LinkState, Now};
use crate::target::Target;
use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::time::{Duration, Instant};

/// What `--once` draws and how long it waits.
#[derive(Clone, Debug)]
pub struct OnceOptions {
    /// Longest wait for the first snapshot of every replica.
    pub timeout_ms: u64,
    /// Frame width (columns).
    pub width: u16,
    /// Frame height (rows).
    pub height: u16,
    /// Panel to draw.
    pub panel: Panel,
    /// Replica id to select (for the replica panel).
    pub select_id: Option<u8>,
    /// How the watchers talk to the replicas.
    pub watch: WatchConfig,
}

impl Default for OnceOptions {
    fn default() -> Self {
        OnceOptions {
            timeout_ms: 2_000,
            width: 100,
            height: 30,
            panel: Panel::Overview,
            select_id: None,
            watch: WatchConfig::default(),
        }
    }
}

/// Attaches to `target`, waits until every replica has sent a snapshot or
/// `timeout_ms` passed, and returns the rendered frame's lines. Replicas
/// that never answered are drawn as unreachable; if none answered, the
/// error says why each failed.
pub fn run_once(target: &Target, options: &OnceOptions) -> Result<Vec<String>, ConsoleError> {
    let (tx, rx) = sync_channel(CHANNEL_CAPACITY);
    let watchers = spawn_all(target, &options.watch, &tx)?;
    drop(tx);
    let mut app = App::new(target, Now::system());
    app.panel = options.panel;
    let deadline = Instant::now() + Duration::from_millis(options.timeout_ms);
    while !app.live.all_reported() {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(message) => app.handle_message(message, Now::system()),
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
        }
    }
    // Whatever is already queued, without waiting (bounded by the channel).
    for message in rx.try_iter().take(CHANNEL_CAPACITY) {
        app.handle_message(message, Now::system());
    }
    // The receiver goes first so no watcher can be waiting on it.
    drop(rx);
    drop(watchers);

    if app.live.replicas.iter().all(|r| r.snapshot.is_none()) {
        let reasons: Vec<String> = app
            .live
            .replicas
            .iter()
            .map(|r| match &r.link {
                LinkState::Down { reason, .. } => format!("{}: {reason}", r.label()),
                _ => format!("{}: no answer", r.label()),
            })
            .collect();
        return Err(ConsoleError::NoAnswer {
            timeout_ms: options.timeout_ms,
            reasons: reasons.join("; "),
        });
    }
    let now = Now::system();
    app.live.mark_silent(
        &format!("no snapshot within {} ms", options.timeout_ms),
        now,
    );
    app.tick(now);
    if let Some(id) = options.select_id {
        app.select_id(id);
    }
    Ok(render_text(&app, options.width, options.height))
}
