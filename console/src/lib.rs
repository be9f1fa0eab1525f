//! `verbatim-console`: a live terminal view of a running verbatim group.
//!
//! The console is split the way ratatui's demo apps are, so that everything
//! but the terminal itself can be tested:
//!
//! * [`link`] — the *inputs*. One background thread per replica connects to
//!   its status socket, sends `watch <interval_ms>`, and turns every line
//!   into a [`link::LinkMessage`] on a bounded channel. It reconnects with a
//!   backoff of at most one second and never blocks the UI or the other
//!   replicas. A slow console drops snapshots instead of growing a queue,
//!   and the replica never waits for it either (its status thread only
//!   writes into a socket).
//! * [`state`] — the *model*. [`state::Model`] folds messages into
//!   everything the screen shows: the leader (highest term seen), lag of
//!   each follower, merged failovers and events, a timeline of terms and
//!   one-minute histories. It never reads a clock: each input carries a
//!   [`state::Now`].
//! * [`app`] — the model plus what the operator chose (panel, selected
//!   replica, pause, help) and the key bindings.
//! * [`render`] — a pure renderer, `impl Widget for &App`.
//! * [`tui`] and [`once`] — the two shells that drive them: the interactive
//!   loop, and `--once`, which prints one frame as text.
//!
//! The driving contract of both shells:
//!
//! ```text
//! loop {
//!     app.tick(Now::system());                  // histories, "since Xs"
//!     draw(&app);                               // pure
//!     on key:       app.handle_key(key);
//!     on message:   app.handle_message(msg, Now::system());
//! }
//! ```
//!
//! [`fake`] is a scripted status server used by the tests (and handy for
//! trying the console without a cluster).

#![warn(missing_docs)]

pub mod app;
pub mod error;
pub mod fake;
pub mod format;
pub mod link;
pub mod once;
pub mod render;
pub mod state;
pub mod target;
pub mod tui;

pub use app::{App, Panel};
pub use error::ConsoleError;
pub use state::{Model, Now};
pub use target::{Endpoint, Target};
