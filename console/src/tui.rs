//! The interactive shell: terminal setup and restore, and the event loop
//! that feeds keys, link messages and ticks to the [`App`].

use crate::app::App;
use crate::error::ConsoleError;
use crate::link::{spawn_all, LinkMessage, WatchConfig, CHANNEL_CAPACITY};
use crate::state::Now;
use crate::target::Target;
use ratatui::crossterm::event::{self, Event};
use ratatui::DefaultTerminal;
use std::sync::mpsc::{sync_channel, Receiver};
use std::time::{Duration, Instant};

/// Timing of the interactive loop.
#[derive(Clone, Debug)]
pub struct TuiOptions {
    /// How the watchers talk to the replicas.
    pub watch: WatchConfig,
    /// Redraw at least this often even when nothing arrives ("since Xs"
    /// ages, history ticks).
    pub frame_ms: u64,
    /// Longest wait for a key before looking at the channel again; bounds
    /// how late a snapshot reaches the screen.
    pub input_poll_ms: u64,
}

impl Default for TuiOptions {
    fn default() -> Self {
        TuiOptions {
            watch: WatchConfig::default(),
            frame_ms: 250,
            input_poll_ms: 50,
        }
    }
}

/// Runs the console until the operator quits. The terminal is restored on
/// return, on error and on panic (ratatui's init installs a panic hook
/// that restores it before the panic message is printed).
pub fn run_tui(target: &Target, options: &TuiOptions) -> Result<(), ConsoleError> {
    let (tx, rx) = sync_channel(CHANNEL_CAPACITY);
    let watchers = spawn_all(target, &options.watch, &tx)?;
    drop(tx);
    let mut app = App::new(target, Now::system());
    let mut terminal = ratatui::try_init()?;
    let result = event_loop(&mut terminal, &mut app, &rx, options);
    let restored = ratatui::try_restore();
    // The receiver goes first so no watcher can be waiting on it.
    drop(rx);
    drop(watchers);
    result?;
    restored?;
    Ok(())
}

fn event_loop(
    terminal: &mut DefaultTerminal,
    app: &mut App,
    rx: &Receiver<LinkMessage>,
    options: &TuiOptions,
) -> Result<(), ConsoleError> {
    let frame = Duration::from_millis(options.frame_ms);
    let input_poll = Duration::from_millis(options.input_poll_ms);
    let mut dirty = true;
    let mut last_draw = Instant::now();
    loop {
        if dirty || last_draw.elapsed() >= frame {
            app.tick(Now::system());
            // Draw resizes the buffers to the terminal first, so a resize
            // only needs a redraw.
            terminal.draw(|f| f.render_widget(&*app, f.area()))?;
            last_draw = Instant::now();
            dirty = false;
        }
        if event::poll(input_poll)? {
            match event::read()? {
                Event::Key(key) => {
                    app.handle_key(key);
                    dirty = true;
                }
                Event::Resize(..) => dirty = true,
                _ => {}
            }
        }
        // Bounded: at most one channel's worth per turn, so a flood of
        // snapshots cannot starve the keys.
        for message in rx.try_iter().take(CHANNEL_CAPACITY) {
            app.handle_message(message, Now::system());
            dirty = true;
        }
        if app.should_quit {
            return Ok(());
        }
    }
}
