//! The command line. Each subcommand is a thin function over [`crate::sandbox`]; errors are
//! `anyhow` here and nowhere below. Machine-readable output goes to stdout, logs and progress to
//! stderr.

mod audit;
mod bench;
mod checkpoints;
mod doctor;
mod run;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use crate::config::SandboxConfig;
use crate::sandbox::image::{self, BuildMethod};
use crate::sandbox::{ReapFilter, ReapScope, Sandbox};

/// Runs model-written Python in single-use, locked-down Docker containers.
///
/// Every setting is read from the environment and from a `.env` file in the working directory
/// (see the settings table in docs/OPERATING.md); the flags below override some of them for one
/// command. With no subcommand, `serve` runs.
#[derive(Debug, Parser)]
#[command(name = "file-agent", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the MCP tools (the default): Streamable HTTP at /mcp, /health, and the local
    /// store's /files; or MCP over stdin/stdout with --stdio.
    Serve(ServeArgs),
    /// Run one Python script in the sandbox and print one JSON object describing the result.
    ///
    /// Each --input is placed at /work/in/<file name>; files the script writes under /work/out
    /// land in --out (existing files there are never overwritten). The script sees `input_files`,
    /// `input_file_path` (with one input), `output_dir` and `file_path` preset.
    /// Exit status: 0 when the script succeeded, 1 for any other outcome, 2 when it could not run.
    Run(RunArgs),
    /// Check the Docker engine, the sandbox image and the limits in force; say how to fix problems.
    Doctor,
    /// Remove sandbox containers left behind (labelled io.file-agent.managed=true).
    ///
    /// By default only what no live server can be using: containers that stopped (or never
    /// started) more than a minute ago, and running ones older than the longest a container
    /// lives (SANDBOX_WARM_MAX_IDLE + SCRIPT_TIMEOUT + margins). Running attempts and warm
    /// containers of live servers are left alone, and counted.
    Reap {
        /// Remove every matching container, running or not: the attempts and warm pools of
        /// live servers too.
        #[arg(long, conflicts_with = "older_than")]
        all: bool,
        /// Instead of the default rule: containers created more than this many seconds ago,
        /// running or not.
        #[arg(long, value_name = "SECONDS")]
        older_than: Option<u64>,
        /// Only containers of this instance (their io.file-agent.instance label).
        #[arg(long, value_name = "NAME")]
        instance: Option<String>,
    },
    /// Build or inspect the sandbox image.
    #[command(subcommand)]
    Image(ImageCommand),
    /// Ask a running server's /health (for container health checks): exit 0 when it answers
    /// 200, 1 otherwise.
    Health {
        /// The server's base URL (default: http://127.0.0.1:<port of FILE_AGENT_LISTEN>).
        #[arg(long, value_name = "URL")]
        url: Option<String>,
    },
    /// Check, read or report on the audit trail (the data folder's audit/, or files).
    #[command(subcommand)]
    Audit(AuditCommand),
    /// The PDF check's child process (run by the server, not by hand): caps its own memory at
    /// MEMORY bytes, reads a PDF on stdin and prints the verdict as JSON.
    #[command(name = "check-pdf", hide = true)]
    CheckPdf {
        /// The address space it may use, in bytes.
        memory: String,
    },
    /// Measure attempts, cold and warm, beside `docker run --rm`, a plain python3 subprocess
    /// and the script's body alone; throughput; and `run_python` over MCP. All in one run.
    ///
    /// Under gVisor (SANDBOX_RUNTIME=runsc) on two cores a run is long: with the default
    /// rounds, `--no-mcp --throughput 0` was still running after 500 s (2026-12-01), and even
    /// `--runs 1 --pairs 0 --throughput 0 --no-mcp --no-traces --no-receipts --no-trail` took
    /// 30 s on a busy machine (2026-12-02); each gVisor attempt and refill takes about twice
    /// runc's (docs/SANDBOX.md, "Speed, measured"). SIGTERM or Ctrl-C
    /// stops it: it removes every container it started (labelled
    /// io.file-agent.instance=bench-<id>*, named in its first line) and exits 130.
    Bench {
        /// Rounds of latency samples of each kind.
        #[arg(long, default_value_t = 10)]
        runs: usize,
        /// Further rounds of a warm attempt and the limit only (for warm / limit).
        #[arg(long, default_value_t = 20)]
        pairs: usize,
        /// Attempts in each throughput run (0 skips throughput).
        #[arg(long, default_value_t = 20)]
        throughput: usize,
        /// Attempts at once in the throughput runs (default: the CPU count, as the server's
        /// slots).
        #[arg(long)]
        concurrency: Option<usize>,
        /// Skip the `run_python` round trips over MCP.
        #[arg(long)]
        no_mcp: bool,
        /// Skip the signed audit trail's figures (appends, signing, proofs at a million lines).
        #[arg(long)]
        no_trail: bool,
        /// Skip timing traces on and off (warm `run_python` calls, exported to a receiver in
        /// this process).
        #[arg(long)]
        no_traces: bool,
        /// Skip timing signed receipts (FILE_AGENT_AUDIT_RECEIPTS=signed against line: warm
        /// `run_python` calls alone and in bursts, and calls per signature).
        #[arg(long)]
        no_receipts: bool,
        /// Skip timing sessions (a warm `run_python` call without and in a session, and one
        /// keeping a 100 MiB DataFrame against one reading it from its workbook: `--runs`
        /// rounds; the workbook's reads take minutes on two cores).
        #[arg(long)]
        no_sessions: bool,
    },
}

#[derive(Debug, Args, Default)]
struct ServeArgs {
    /// Address and port to listen on (default: FILE_AGENT_LISTEN, else 127.0.0.1:8000).
    #[arg(long, value_name = "ADDR:PORT", conflicts_with = "stdio")]
    listen: Option<std::net::SocketAddr>,
    /// Speak MCP on stdin/stdout instead of HTTP (for clients that start servers as a
    /// subprocess); logs go to stderr.
    #[arg(long)]
    stdio: bool,
}

#[derive(Debug, Args)]
struct RunArgs {
    /// The Python script.
    script: PathBuf,
    /// An input file (repeatable).
    #[arg(long = "input", value_name = "PATH")]
    inputs: Vec<PathBuf>,
    /// Where the script's outputs go.
    #[arg(long, default_value = "out", value_name = "DIR")]
    out: PathBuf,
    /// Timeout in seconds (default: SCRIPT_TIMEOUT, else 90).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=3600))]
    timeout: Option<u64>,
    /// Memory limit in MiB (default: SANDBOX_MEMORY_MIB, else 1024).
    #[arg(long, value_name = "MIB", value_parser = clap::value_parser!(u64).range(64..=65536))]
    memory: Option<u64>,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Prove the trail untouched (every line's `prev` is the hash of the line before), or name
    /// the first broken line. Give the data folder (or its audit/ folder) to check every chain,
    /// each server's on its own; or files of one chain, rotated ones first, oldest first.
    /// Exit 1 when broken.
    ///
    /// With --key, also every checkpoint signed of each chain (kept beside it, and the copies
    /// given with --checkpoints): its signature by that key, its witnesses' cosignatures
    /// (--witness-key), and its root against the trail's first lines. A rewritten, cut or
    /// forked trail fails, naming the first checkpoint it contradicts and the lines at fault.
    Verify {
        /// A folder, or the files of one chain in chain order.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The log's verifier key (`<name>+<id>+<base64>`, as `audit keygen` printed it).
        #[arg(long, value_name = "VERIFIER")]
        key: Option<String>,
        /// Checkpoints kept elsewhere: a file of JSON lines (shipped JSON logs, a copy of a
        /// `.checkpoints` file), or a user's receipt file in any form `verify-receipt` reads
        /// (its checkpoints are copies too). May be given more than once.
        #[arg(long, value_name = "FILE", requires = "key")]
        checkpoints: Vec<PathBuf>,
        /// A witness's cosignature key, whose cosignatures are checked. May be repeated.
        #[arg(long, value_name = "VERIFIER", requires = "key")]
        witness_key: Vec<String>,
        /// The chains' origin prefix when it is not the key's name (FILE_AGENT_AUDIT_ORIGIN).
        #[arg(long, value_name = "NAME", requires = "key")]
        origin: Option<String>,
    },
    /// Check a receipt saved from a call's result offline, against the log's key alone: the
    /// checkpoint's signature by that key, its origin, the inclusion proof of the line's leaf
    /// to the signed root, and that the line (in the receipt, or --line) hashes to the leaf.
    /// The file holds JSON: the result's `_meta`, its `io.file-agent/receipts` list, or one
    /// receipt of it (servers with FILE_AGENT_AUDIT_RECEIPTS=signed); or a receipt's
    /// `tlog_proof` text (c2sp.org/tlog-proof@v1), with --line. Exit 1 when a receipt does not
    /// prove its line, saying what failed.
    VerifyReceipt {
        /// The saved receipt (JSON).
        file: PathBuf,
        /// The log's verifier key (`<name>+<id>+<base64>`, as `audit keygen` printed it), or a
        /// file holding it.
        #[arg(long, value_name = "VERIFIER")]
        key: String,
        /// The audit line itself (its exact bytes; one trailing newline is ignored), checked
        /// instead of the receipt's own copy. Only for a file of one receipt.
        #[arg(long, value_name = "FILE")]
        line: Option<PathBuf>,
        /// A witness's cosignature key that must have cosigned the checkpoint. May be repeated.
        #[arg(long, value_name = "VERIFIER")]
        witness_key: Vec<String>,
        /// The chains' origin prefix when it is not the key's name (FILE_AGENT_AUDIT_ORIGIN).
        #[arg(long, value_name = "NAME")]
        origin: Option<String>,
    },
    /// Make the Ed25519 key pair that signs checkpoints (C2SP signed-note formats): writes the
    /// private key to FILE (never over an existing file, mode 0600) for
    /// FILE_AGENT_AUDIT_SIGNING_KEY_FILE, and prints the verifier key to give reviewers and
    /// witnesses.
    Keygen {
        /// The key's name, which names the log: chains are `<name>/<chain>` (e.g.
        /// files.example.com/audit).
        #[arg(long)]
        name: String,
        /// Where to write the private key. Keep it out of the data and audit folders.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
    },
    /// Print, as JSON, a proof against the latest signed checkpoint: with --index N, that the
    /// line whose leaf index is N (a receipt's `leaf_index`) is in the trail; with
    /// --consistency OLD NEW, that the checkpoint of NEW lines extends that of OLD.
    Prove {
        /// The data folder or the audit folder.
        #[arg(default_value = "data")]
        folder: PathBuf,
        /// The chain (its name, or a receipt's origin), when the folder holds several.
        #[arg(long)]
        chain: Option<String>,
        /// The leaf index to prove.
        #[arg(
            long,
            conflicts_with = "consistency",
            required_unless_present = "consistency"
        )]
        index: Option<u64>,
        /// Two checkpoint sizes, old then new.
        #[arg(long, num_args = 2, value_names = ["OLD", "NEW"])]
        consistency: Option<Vec<u64>>,
    },
    /// Print the last records readably (oldest first; across chains, by time).
    Show {
        /// The data folder, the audit folder, or one file.
        file: PathBuf,
        /// How many records, from the end.
        #[arg(long, default_value_t = 20)]
        tail: usize,
        /// Print the JSON lines as they are.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        filter: FilterArgs,
    },
    /// Write a security review of the whole trail: integrity of every chain, a summary with a
    /// chart by ending, what needs attention, per user and per tool, each saved tool's
    /// versions with their code and diffs, and attempts in detail. One self-contained HTML
    /// page (no scripts, nothing fetched), or JSON. Exit 1 when a chain is broken.
    Report {
        /// The data folder (saved tools' versions are read from its tools/versions) or the
        /// audit folder.
        #[arg(default_value = "data")]
        folder: PathBuf,
        /// Write the page here (default: stdout).
        #[arg(long, value_name = "FILE", conflicts_with = "json")]
        out: Option<PathBuf>,
        /// Print the report's content as JSON (for a SIEM) instead of HTML.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        filter: FilterArgs,
    },
}

/// Which lines `audit show` and `audit report` cover.
#[derive(Debug, Args)]
struct FilterArgs {
    /// From this time: a date (2026-03-01), a UTC time (2026-03-01T12:00:00Z) or an age
    /// (90m, 36h, 7d).
    #[arg(long, value_name = "TIME")]
    since: Option<String>,
    /// Before this time (a date includes that day).
    #[arg(long, value_name = "TIME")]
    until: Option<String>,
    /// Only this Open WebUI user id.
    #[arg(long, value_name = "ID")]
    user: Option<String>,
    /// Only this tool (run_python, generate_file, my_<name> or a saved tool's name).
    #[arg(long, value_name = "NAME")]
    tool: Option<String>,
}

impl FilterArgs {
    fn parse(self) -> anyhow::Result<crate::report::Filter> {
        use crate::report::parse_time;
        Ok(crate::report::Filter {
            since: self.since.map(|t| parse_time(&t, false)).transpose()?,
            until: self.until.map(|t| parse_time(&t, true)).transpose()?,
            user: self.user,
            tool: self.tool,
        })
    }
}

#[derive(Debug, Subcommand)]
enum ImageCommand {
    /// Build the image this binary expects, unless it is already there. Prints tag, size and time.
    Build {
        /// rootfs (debootstrap, no registry needed) or dockerfile; by default rootfs where
        /// debootstrap is installed and we are root.
        #[arg(long, value_enum)]
        method: Option<BuildMethod>,
        /// Build even if an image with this tag exists.
        #[arg(long)]
        force: bool,
    },
    /// Print the tag this binary expects (a hash of sandbox-image/).
    Tag,
    /// Remove the sandbox images of earlier versions (file-agent-sandbox:<other hash>) that no
    /// container uses, running or stopped; keeps the image this configuration uses.
    Prune {
        /// Prune this repository instead of file-agent-sandbox (for tests, or images tagged
        /// under another name).
        #[arg(long, default_value = image::IMAGE_REPOSITORY)]
        repository: String,
    },
}

/// Parses the command line, runs the command, and maps the result to an exit code.
pub fn main() -> ExitCode {
    let cli = parse_cli();
    // Before anything else: the PDF check's child caps itself and reads nothing but stdin.
    if let Some(Command::CheckPdf { memory }) = &cli.command {
        return crate::untrusted::pdf::child_main(memory);
    }
    // Before any thread exists: `.env` fills in variables the environment does not set.
    let format = match load_dotenv().and_then(|()| LogFormat::from_env()) {
        Ok(format) => format,
        Err(message) => {
            eprintln!("file-agent: {message}");
            return ExitCode::from(2);
        }
    };
    // The bench's trace receiver, before logging sets up the exporter that sends to it.
    if let Some(Command::Bench {
        no_traces: false, ..
    }) = &cli.command
        && let Err(message) = bench::prepare_traces()
    {
        eprintln!("file-agent: {message}");
        return ExitCode::from(2);
    }
    // Dropped last, after the runtime: the spans still queued go to the collector.
    let _traces = match format.init(default_log_filter(cli.command.as_ref())) {
        Ok(traces) => traces,
        Err(message) => {
            eprintln!("file-agent: {message}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("file-agent: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(error) => {
            format.last_word(&error);
            ExitCode::from(2)
        }
    }
}

/// Loads `.env` from the working directory, if there is one.
fn load_dotenv() -> Result<(), String> {
    match dotenvy::from_path(".env") {
        Ok(()) => Ok(()),
        Err(error) if error.not_found() => Ok(()),
        Err(error) => Err(format!(
            "cannot read .env in the working directory: {error}"
        )),
    }
}

/// What is logged unless `FILE_AGENT_LOG` says otherwise: serving logs one line per tool call
/// (info); the one-shot commands only warnings.
fn default_log_filter(command: Option<&Command>) -> &'static str {
    match command {
        None | Some(Command::Serve(_)) => "warn,file_agent=info",
        // The bench starts servers of its own; their start-up warnings are not news.
        Some(Command::Bench { .. }) => "error",
        _ => "warn",
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let command = cli.command.unwrap_or(Command::Serve(ServeArgs::default()));
    if let Command::Serve(args) = command {
        return serve::serve(args.listen, args.stdio).await;
    }
    if let Command::Health { url } = command {
        return health(url).await;
    }
    if let Command::Doctor = command {
        // The whole configuration, as `serve` reads it: what serve refuses, doctor refuses.
        return doctor::doctor(crate::config::Config::from_env()?).await;
    }
    if let Command::Audit(command) = command {
        return audit_command(command);
    }
    sandbox_command(command, SandboxConfig::from_env()?).await
}

/// `file-agent audit ...`: reads the trail, needs no configuration.
fn audit_command(command: AuditCommand) -> anyhow::Result<ExitCode> {
    match command {
        AuditCommand::Verify {
            files,
            key,
            checkpoints,
            witness_key,
            origin,
        } => match key {
            None => audit::verify(&files),
            Some(key) => checkpoints::verify_signed(
                &files,
                &key,
                &witness_key,
                &checkpoints,
                origin.as_deref(),
            ),
        },
        AuditCommand::VerifyReceipt {
            file,
            key,
            line,
            witness_key,
            origin,
        } => audit::verify_receipt(
            &file,
            &key,
            line.as_deref(),
            &witness_key,
            origin.as_deref(),
        ),
        AuditCommand::Keygen { name, out } => checkpoints::keygen(&name, &out),
        AuditCommand::Prove {
            folder,
            chain,
            index,
            consistency,
        } => checkpoints::prove(&folder, chain.as_deref(), index, consistency.as_deref()),
        AuditCommand::Show {
            file,
            tail,
            json,
            filter,
        } => audit::show(&file, tail, json, &filter.parse()?),
        AuditCommand::Report {
            folder,
            out,
            json,
            filter,
        } => audit::report(&folder, &filter.parse()?, out.as_deref(), json),
    }
}

/// The commands that need the sandbox's settings only: run, reap, image, bench.
async fn sandbox_command(command: Command, config: SandboxConfig) -> anyhow::Result<ExitCode> {
    match command {
        Command::Serve(_)
        | Command::Audit(_)
        | Command::Health { .. }
        | Command::CheckPdf { .. }
        | Command::Doctor => {
            unreachable!("handled above")
        }
        Command::Run(args) => Ok(run::run(config, args).await),
        Command::Reap {
            all,
            older_than,
            instance,
        } => reap(config, all, older_than, instance).await,
        Command::Image(command) => image_command(command, config).await,
        Command::Bench {
            runs,
            pairs,
            throughput,
            concurrency,
            no_mcp,
            no_trail,
            no_traces,
            no_receipts,
            no_sessions,
        } => {
            let args = bench::BenchArgs {
                runs: runs.max(1),
                pairs,
                throughput,
                concurrency: concurrency.unwrap_or_else(bench::cpus).max(1),
                mcp: !no_mcp,
                trail: !no_trail,
                traces: !no_traces,
                receipts: !no_receipts,
                sessions: !no_sessions,
            };
            bench::bench(config, args).await
        }
    }
}

/// `FILE_AGENT_LOG_FORMAT`: how log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LogFormat {
    /// One readable line per event (the default), coloured only at a terminal.
    Text,
    /// One JSON object per line (`timestamp`, `level`, `fields`, `target`, `span`), for the log
    /// collectors admins already run.
    Json,
}

impl LogFormat {
    /// Reads `FILE_AGENT_LOG_FORMAT` (unset: text). It is read here, before the configuration,
    /// because logging starts before anything else can report.
    pub(super) fn from_env() -> Result<Self, String> {
        match std::env::var("FILE_AGENT_LOG_FORMAT") {
            Err(std::env::VarError::NotPresent) => Ok(Self::Text),
            Ok(value) if value.trim().eq_ignore_ascii_case("text") => Ok(Self::Text),
            Ok(value) if value.trim().eq_ignore_ascii_case("json") => Ok(Self::Json),
            Ok(value) => Err(format!(
                "FILE_AGENT_LOG_FORMAT must be text or json, not {value:?}"
            )),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err("FILE_AGENT_LOG_FORMAT must be text or json".to_string())
            }
        }
    }

    /// Installs the global subscriber: `FILE_AGENT_LOG` as the filter, else `default_filter`.
    /// Says why the command stopped, where the log goes: a log collector reads JSON lines
    /// only, so the last word goes there too.
    fn last_word(self, error: &anyhow::Error) {
        match self {
            LogFormat::Json => {
                tracing::error!(error = format!("{error:#}"), "file-agent stopped")
            }
            LogFormat::Text => eprintln!("file-agent: {error:#}"),
        }
    }

    /// With traces configured (`crate::traces`), file-agent's spans also go to the collector;
    /// the guard flushes them when dropped.
    fn init(self, default_filter: &str) -> Result<crate::traces::TracesGuard, String> {
        use tracing_subscriber::Layer as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;

        use tracing_subscriber::filter::FilterExt as _;
        let filter = tracing_subscriber::EnvFilter::try_from_env("FILE_AGENT_LOG")
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
        // A signed checkpoint is logged whatever FILE_AGENT_LOG asks: the shipped log is the
        // copy a reviewer checks the folder against, and its receipts go out only after it.
        let filter = filter.or(tracing_subscriber::filter::filter_fn(|meta| {
            meta.target() == crate::audit::checkpoints::LOG_TARGET
        })
        .with_max_level_hint(tracing::Level::INFO));
        // rmcp logs each request's arguments at debug (a presigned URL's signature, code):
        // never below info, whatever FILE_AGENT_LOG asks. A cap, not a level of its own: rmcp's
        // info lines show only where the filter asks for them. file-agent's own spans are for
        // traces only: a log line stays as it was, and names its call and trace in fields.
        let rmcp_capped = tracing_subscriber::filter::filter_fn(|meta| {
            let rmcp_detail =
                meta.target().starts_with("rmcp") && *meta.level() > tracing::Level::INFO;
            let our_span = meta.is_span() && meta.target().starts_with("file_agent");
            !rmcp_detail && !our_span
        });
        let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
        let (traces, guard) = crate::traces::layer::<tracing_subscriber::Registry>()?;
        let registry = tracing_subscriber::registry().with(traces);
        match self {
            // Colour codes only for a person at a terminal: in a file, a pipe, `docker logs`
            // or journald they are noise. Every field value and message is one escaped line
            // (`text::one_line`): a script's stderr, a model's reply or a request's text
            // cannot start a forged record or send escape sequences to a terminal.
            Self::Text => registry
                .with(
                    layer
                        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
                        .fmt_fields(escaped_fields())
                        .with_filter(filter)
                        .with_filter(rmcp_capped),
                )
                .init(),
            Self::Json => registry
                .with(
                    layer
                        .json()
                        .with_ansi(false)
                        .with_current_span(true)
                        .with_filter(filter)
                        .with_filter(rmcp_capped),
                )
                .init(),
        }
        Ok(guard)
    }
}

/// The text format's fields: `name=value` (the message bare), each value written as it would
/// be and then made one line with its hidden characters visible.
fn escaped_fields() -> impl for<'writer> tracing_subscriber::fmt::FormatFields<'writer> + 'static {
    use tracing_subscriber::field::MakeExt;
    tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
        let text = format!("{value:?}");
        let text = crate::text::one_line(&text);
        if field.name() == "message" {
            write!(writer, "{text}")
        } else {
            write!(writer, "{}={text}", field.name())
        }
    })
    .delimited(" ")
}

/// `file-agent image tag`, `image build` and `image prune`.
async fn image_command(command: ImageCommand, config: SandboxConfig) -> anyhow::Result<ExitCode> {
    match command {
        ImageCommand::Tag => {
            println!("{}", config.image);
            Ok(ExitCode::SUCCESS)
        }
        ImageCommand::Build { method, force } => build_image(config, method, force).await,
        ImageCommand::Prune { repository } => prune_images(config, &repository).await,
    }
}

/// `file-agent image prune`: removes the old tags of `repository`, keeping the configured
/// image and those a container uses.
async fn prune_images(config: SandboxConfig, repository: &str) -> anyhow::Result<ExitCode> {
    let keep = config.image.clone();
    // Like `image build`: the images are on the local engine whatever the backend.
    let config = SandboxConfig {
        backend: crate::config::Backend::Docker,
        ..config
    };
    let pruned = Sandbox::connect(config)
        .await?
        .prune_images(repository, &keep)
        .await?;
    for tag in &pruned.removed {
        println!("removed {tag}");
    }
    for tag in &pruned.in_use {
        println!("kept {tag}: a container uses it");
    }
    println!(
        "removed {} old image tag(s); kept {keep} and {} in use",
        pruned.removed.len(),
        pruned.in_use.len()
    );
    Ok(ExitCode::SUCCESS)
}

async fn reap(
    config: SandboxConfig,
    all: bool,
    older_than: Option<u64>,
    instance: Option<String>,
) -> anyhow::Result<ExitCode> {
    let longest_life = crate::sandbox::longest_life(&config);
    let scope = match (all, older_than) {
        (true, _) => ReapScope::All,
        (false, Some(seconds)) => ReapScope::OlderThan(Duration::from_secs(seconds)),
        (false, None) => ReapScope::safe(&config),
    };
    let sandbox = Sandbox::connect(config).await?;
    // The suggestion keeps the scope asked for: without `--instance`, `--all` would also
    // remove the running containers of every other server on this host.
    let all = match &instance {
        Some(instance) => format!("file-agent reap --all --instance {instance}"),
        None => "file-agent reap --all".to_string(),
    };
    let report = sandbox.reap(&ReapFilter { scope, instance }).await?;
    println!("removed {} container(s)", report.containers);
    say_what_reap_left(&report, longest_life, &all);
    Ok(ExitCode::SUCCESS)
}

/// What reap left alone and why: running containers (`all` removes them too) and those
/// stopped too recently.
fn say_what_reap_left(report: &crate::sandbox::ReapReport, longest_life: Duration, all: &str) {
    let running = report.left_warm + report.left_running;
    if running > 0 {
        println!(
            "left {running} running container(s) alone: {} warm (a pool's, ready or serving an attempt), {} attempt(s) under way; all younger than {} s, the longest a live server's container runs. `{all}` removes them too",
            report.left_warm,
            report.left_running,
            longest_life.as_secs()
        );
    }
    if report.left_recent > 0 {
        println!(
            "left {} stopped container(s) alone: they stopped less than {} s ago and their server may still be reading them; run reap again later",
            report.left_recent,
            crate::sandbox::STOPPED_GRACE.as_secs()
        );
    }
}

async fn health(url: Option<String>) -> anyhow::Result<ExitCode> {
    let url = match url {
        Some(url) => url,
        None => {
            let config = crate::config::Config::from_env()?;
            format!("http://127.0.0.1:{}", config.server.listen.port())
        }
    };
    let answer = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?
        .get(format!("{}/health", url.trim_end_matches('/')))
        .send()
        .await;
    match answer {
        Ok(response) if response.status().is_success() => {
            println!("ok");
            Ok(ExitCode::SUCCESS)
        }
        Ok(response) => {
            let status = response.status();
            println!("{status}: {}", response.text().await.unwrap_or_default());
            Ok(ExitCode::from(1))
        }
        Err(error) => {
            println!("no answer from {url}: {error}");
            Ok(ExitCode::from(1))
        }
    }
}

async fn build_image(
    config: SandboxConfig,
    method: Option<BuildMethod>,
    force: bool,
) -> anyhow::Result<ExitCode> {
    // The image is built on the local Docker engine whatever the backend; under Kubernetes it
    // is then pushed (see docs/DEPLOYING.md).
    let config = SandboxConfig {
        backend: crate::config::Backend::Docker,
        ..config
    };
    let sandbox = Sandbox::connect(config).await?;
    let tag = sandbox.config().image.clone();
    let extra = sandbox.config().extra_packages.clone();
    if !force && sandbox.image_present(&tag).await? {
        println!(
            "{tag} is already built (unchanged sandbox-image/{}); use --force to rebuild",
            if extra.is_some() {
                " and extra list"
            } else {
                ""
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    let method = method.unwrap_or_else(BuildMethod::detect);
    eprintln!("file-agent: building {tag} with {method:?}");
    // Built under a tag of its own, and tagged as asked only once finished and labelled with
    // its manifest: a failed build leaves no image under `tag`.
    let built = image::build(method, &tag, extra.as_deref()).await?;
    let manifest = sandbox.label_manifest(&built.tag, &tag).await?;
    let size = sandbox
        .diagnose()
        .await?
        .image
        .map(|(_, size)| size)
        .context("the build finished but the image is not on the engine")?;
    let extras = manifest.extras();
    println!(
        "built {tag} ({:.0} MB) in {:.0} s{}",
        size as f64 / 1e6,
        built.elapsed.as_secs_f64(),
        match &manifest.extra_list {
            Some(list) => format!("; extra packages from {}: {}", list.name, extras.join(", ")),
            None => String::new(),
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// A token cancelled by the first SIGINT or SIGTERM.
pub(crate) fn shutdown_token() -> CancellationToken {
    let token = CancellationToken::new();
    let cancel = token.clone();
    tokio::spawn(async move {
        let terminate = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut signal) => {
                    signal.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = terminate => {}
        }
        cancel.cancel();
    });
    token
}

/// What an unoptimised build says of itself. The tests' build (the bench profile) leaves its
/// binary at `target/release/file-agent` until the next `cargo build --release`, so `--version`
/// and `serve` say which build it is.
pub const UNOPTIMISED: Option<&str> = if cfg!(debug_assertions) {
    Some(
        "unoptimised build (the tests' or a debug build): `cargo build --release` builds the \
         server",
    )
} else {
    None
};

/// The sandbox image this build makes and runs, for `--version`: its tag, and with
/// `SANDBOX_EXTRA_PACKAGES` set (in the environment: `.env` is read later), the extra packages
/// and the list they come from, or why the list cannot be used.
fn image_words() -> String {
    let Some(path) = std::env::var_os("SANDBOX_EXTRA_PACKAGES").filter(|v| !v.is_empty()) else {
        return crate::sandbox::image::default_tag();
    };
    match crate::config::packages::read_extra(std::path::Path::new(&path)) {
        Ok(list) => format!(
            "{}; extra packages from {}: {}",
            crate::config::image::tag(Some(&list.content)),
            list.path.display(),
            list.specs(", ")
        ),
        Err(error) => format!(
            "{}; SANDBOX_EXTRA_PACKAGES cannot be used: {error}",
            crate::sandbox::image::default_tag()
        ),
    }
}

/// The command line, with `--version` naming the sandbox image this build makes and runs:
/// `file-agent 0.1.0 (sandbox image file-agent-sandbox:<hash>)`, and `; unoptimised build`
/// inside the brackets for a build without optimisation.
fn parse_cli() -> Cli {
    use clap::{CommandFactory, FromArgMatches};
    let version = format!(
        "{} (sandbox image {}{})",
        env!("CARGO_PKG_VERSION"),
        image_words(),
        if UNOPTIMISED.is_some() {
            "; unoptimised build"
        } else {
            ""
        }
    );
    // Once per process: clap keeps the version for the life of the command.
    let version: &'static str = Box::leak(version.into_boxed_str());
    let matches = Cli::command().version(version).get_matches();
    Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit())
}
