//! The status schema lives in `verbatim-status` (shared with the console
//! and the bench); the replica serves it (`status_server`).

pub use verbatim_status::*;
