//! The `file-agent` binary: parses the command line and hands over to [`file_agent::cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    file_agent::cli::main()
}
