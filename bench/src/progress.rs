//! Progress bars (indicatif) on stderr, for runs longer than a few
//! seconds; hidden with `--quiet`, with `--json` to a pipe, and when
//! stderr is not a terminal.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A progress bar, or nothing.
#[derive(Clone)]
pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// No output.
    pub fn hidden() -> Progress {
        Progress { bar: None }
    }

    /// A bar of `len` steps labelled `msg` (hidden when `enabled` is false
    /// or stderr is not a terminal).
    pub fn new(enabled: bool, len: u64, msg: impl Into<String>) -> Progress {
        if !enabled || !std::io::stderr().is_terminal() {
            return Progress::hidden();
        }
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr_with_hz(10));
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg:<44} [{bar:30}] {percent:>3}% {elapsed}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar.set_message(msg.into());
        Progress { bar: Some(bar) }
    }

    /// Relabels the bar and resets it to `len` steps.
    pub fn stage(&self, len: u64, msg: impl Into<String>) {
        if let Some(b) = &self.bar {
            b.set_length(len);
            b.set_position(0);
            b.set_message(msg.into());
        }
    }

    /// Advances by `n` steps.
    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    /// Sets the position as a fraction of the length.
    pub fn set_fraction(&self, f: f64) {
        if let Some(b) = &self.bar {
            let len = b.length().unwrap_or(0);
            b.set_position((f.clamp(0.0, 1.0) * len as f64) as u64);
        }
    }

    /// Prints a line above the bar (or to stderr without one).
    pub fn println(&self, line: impl AsRef<str>) {
        match &self.bar {
            Some(b) => b.println(line.as_ref()),
            None => tracing::info!("{}", line.as_ref()),
        }
    }

    /// Prints a line the user must see: above the bar, or on stderr
    /// without one (unlike [`Progress::println`], not only in the log).
    pub fn notice(&self, line: impl AsRef<str>) {
        match &self.bar {
            Some(b) => b.println(line.as_ref()),
            None => eprintln!("{}", line.as_ref()),
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}
