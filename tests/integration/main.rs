//! The one integration-test binary. Tests that need Docker use the real engine and the real
//! sandbox image (built by `.ci/run` or `file-agent image build`) and end by asserting that no
//! container or volume of theirs is left.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod access;
mod analysis;
mod audit;
mod audit_crash;
mod audit_proofs;
mod audit_report;
mod cli;
mod common;
mod cost;
mod deploy;
mod docs;
mod fakes;
mod faults;
mod front_door;
mod hostile;
mod identity;
mod kube_canary;
mod kube_cluster_life;
mod kube_double;
mod kube_manifests;
mod kubernetes;
mod lifecycle;
mod load;
mod local;
mod long_calls;
mod mcp_files;
mod mcp_server;
mod office;
mod openwebui_sessions;
mod operator;
mod packages;
mod pool;
mod production;
mod protocol_surface;
mod reap;
mod research;
mod retention;
mod runner;
mod sandbox;
mod saved_tools;
mod sessions;
mod signed_receipts;
mod signed_trail;
mod slots;
mod status;
mod structured;
mod tasks;
mod tenants;
mod traces;
mod trail_gaps;
mod untrusted_folder;
mod url_policy;
