//! file-agent: an MCP tool server that turns plain-language requests into Excel and Word files
//! and data analyses. A language model writes Python; file-agent runs every attempt in a fresh,
//! network-less, locked-down Docker container and hands back what it produced.
//!
//! The crate is one library with a thin `main.rs`. Modules, by domain:
//! - [`sandbox`]: one hardened, single-use container per attempt; the only module that talks to
//!   Docker;
//! - [`config`]: settings from the environment, parsed and validated without I/O;
//! - [`cli`]: the command line (`run`, `doctor`, `reap`, `image build`, `bench`).
//!
//! See `ARCHITECTURE.md` for the map and the invariants.

pub mod cli;
pub mod config;
pub mod sandbox;
