//! Commands of the `verbatim` binary that are more than a call into the
//! library.

pub mod demo;
pub mod mcast;
