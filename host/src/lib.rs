//! The verbatim replica process and its clients.
pub mod client;
pub mod config;
pub mod demo;
pub mod error;
pub mod failover;
pub mod hostfabric;
pub mod kvstore;
pub mod local;
pub mod replica;
pub mod resp;
pub mod service;
pub mod shm;
pub mod slots;
pub mod status;
pub mod status_server;
pub mod tcp;
pub mod topology;
