//! `stoker`: the composition root. `serve`, `api` and `executor` start the
//! server in one of its roles (`stoker_api::roles`, with what the
//! distributed roles add from `stoker_distributed`); `admin` and `batch`
//! operate a running server over HTTP (`stoker_cli`); `bench` measures one
//! under load (`stoker_bench`); `inspect` describes a GGUF file; `openapi`
//! prints the API document.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use stoker_api::config::{Config, Overrides};
use stoker_api::state::Role;
use stoker_schemas::ids::ExecutorId;

#[derive(Parser, Debug)]
#[command(
    name = "stoker",
    version,
    about = "LLM serving with typed backpressure and provenance"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the OpenAI API with an in-process engine on the embedded default.
    Serve(ServeArgs),
    /// Distributed mode: serve the HTTP API; generations run on executors
    /// reached over Kafka, state lives in Postgres.
    Api(DistributedArgs),
    /// Distributed mode: run one executor (one per accelerator) that takes
    /// jobs from Kafka and batch shards from Postgres.
    Executor(ExecutorArgs),
    /// Print the OpenAPI document (what schemas/openapi.json holds).
    Openapi,
    /// Describe a GGUF file or a Hugging Face directory (architecture, size,
    /// tensor types, tokenizer, chat template) and whether stoker can serve
    /// it; exits 1 when it cannot.
    Inspect(InspectArgs),
    /// Operate a running server: deployments, revisions, rollouts, executors, audit.
    Admin(stoker_cli::AdminArgs),
    /// Submit and follow OpenAI batch jobs on a running server
    Batch(stoker_cli::BatchArgs),
    /// Measure a server under load, find its knee, record a capacity profile.
    Bench(stoker_bench::BenchArgs),
}

#[derive(clap::Args, Debug)]
struct ServeArgs {
    /// TOML config file (lower precedence than STOKER_* variables and flags).
    #[arg(long, env = "STOKER_CONFIG")]
    config: Option<PathBuf>,
    /// GGUF model file, or Hugging Face model directory.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Quantize the model's float weights while loading (q8_0, q4_k, q6_k).
    #[arg(long)]
    quantize: Option<String>,
    /// A Jinja chat template file to serve instead of the model's own (e.g.
    /// a tool-use template); the revision's template hash names it.
    #[arg(long)]
    chat_template: Option<PathBuf>,
    /// Address to listen on (ADDR:PORT); port 0 picks a free one.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Directory for state.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Allow a non-loopback address without API keys.
    #[arg(long)]
    insecure: bool,
    /// Seconds in-flight requests may run after SIGTERM.
    #[arg(long)]
    shutdown_timeout: Option<u64>,
}

#[derive(clap::Args, Debug)]
struct InspectArgs {
    /// The GGUF model file or Hugging Face model directory.
    file: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args, Debug)]
struct DistributedArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// Kafka bootstrap servers (`host:port[,host:port]`).
    #[arg(long, env = "STOKER_BROKERS")]
    brokers: Option<String>,
    /// Postgres URL of the shared event store.
    #[arg(long, env = "STOKER_DATABASE_URL")]
    database_url: Option<String>,
    /// This process's name (in leases, request ids and provenance); defaults
    /// to the role, the host name and the process id.
    #[arg(long)]
    id: Option<ExecutorId>,
}

#[derive(clap::Args, Debug)]
struct ExecutorArgs {
    #[command(flatten)]
    common: DistributedArgs,
    /// The deployment this executor serves (created at first start).
    #[arg(long)]
    deployment: Option<String>,
    /// The revision it serves; it must name the artifact `--model` loads.
    #[arg(long)]
    revision: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Openapi => {
            print!("{}", stoker_api::http::openapi::document());
            ExitCode::SUCCESS
        }
        Command::Inspect(args) => inspect(args),
        Command::Serve(args) => serve(args),
        Command::Api(args) => distributed(args, None, Role::Api),
        Command::Executor(args) => distributed(
            args.common,
            Some((args.deployment, args.revision)),
            Role::Executor,
        ),
        Command::Admin(args) => client(stoker_cli::admin::run(args)),
        Command::Batch(args) => client(stoker_cli::batch::run(args)),
        Command::Bench(args) => bench(args),
    }
}

/// `stoker inspect`: the report on stdout; exit 0 when the file can be served,
/// 1 when it parses but cannot be served, 2 when it cannot be read as GGUF.
fn inspect(args: InspectArgs) -> ExitCode {
    match stoker_executor::inspect::inspect(&args.file) {
        Ok(report) => {
            if args.json {
                match serde_json::to_string_pretty(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("stoker: {e}");
                        return ExitCode::from(2);
                    }
                }
            } else {
                print!("{}", report.to_text());
            }
            if report.servable {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::json!({"path": args.file.display().to_string(), "servable": false, "problems": [e.to_string()]})
                );
            } else {
                eprintln!("stoker: cannot serve {}: {e}", args.file.display());
            }
            ExitCode::from(2)
        }
    }
}

/// Runs a client command (one that talks to a running server) to its end.
fn client(command: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt.block_on(command),
        Err(e) => {
            eprintln!("stoker: starting the runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The load generator gets worker threads of its own: parsing streams on the
/// one thread that also times them would skew what it measures.
fn bench(args: stoker_bench::BenchArgs) -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("stoker-bench")
        .build()
    {
        Ok(rt) => rt.block_on(stoker_bench::run(args)),
        Err(e) => {
            eprintln!("stoker: starting the runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

fn overrides(args: ServeArgs) -> (Option<PathBuf>, Overrides) {
    (
        args.config,
        Overrides {
            model: args.model,
            quantize: args.quantize,
            chat_template: args.chat_template,
            listen: args.listen,
            data_dir: args.data_dir,
            insecure: args.insecure,
            shutdown_timeout_secs: args.shutdown_timeout,
        },
    )
}

/// `stoker api` and `stoker executor`: the config as `serve` reads it, plus
/// the broker, the shared Postgres store and this process's name.
fn distributed(
    args: DistributedArgs,
    executor: Option<(Option<String>, Option<String>)>,
    role: Role,
) -> ExitCode {
    let (file, ov) = overrides(args.serve);
    let mut config = match Config::load(file.as_deref(), &ov) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stoker: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(b) = args.brokers {
        config.kafka.brokers = b;
    }
    if let Some(u) = args.database_url {
        config.control.store_url = u;
    }
    if !config.control.store_url.starts_with("postgres") {
        eprintln!(
            "stoker: the distributed mode keeps its state in Postgres: pass --database-url \
             postgres://… (or control.store_url)"
        );
        return ExitCode::from(2);
    }
    if config.kafka.brokers.trim().is_empty() {
        eprintln!("stoker: --brokers is empty");
        return ExitCode::from(2);
    }
    let name = if executor.is_some() {
        "executor"
    } else {
        "api"
    };
    config.executor_id = args.id.unwrap_or_else(|| default_executor_id(name));
    if let Some((deployment, revision)) = executor {
        if let Some(d) = deployment {
            config.control.deployment = d;
        }
        if let Some(r) = revision {
            config.control.revision = r;
        }
    }
    run_server(config, role)
}

/// `{role}-{host}-{pid}`, with what an id may not hold in the host name
/// replaced by `-`.
fn default_executor_id(role: &str) -> ExecutorId {
    let host = std::fs::read_to_string("/etc/hostname").unwrap_or_default();
    let host: String = host
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    let host = if host.is_empty() { "host" } else { &host };
    format!("{role}-{host}-{}", std::process::id())
        .parse()
        .expect(
            "a role, a host name of at most 64 allowed characters and a pid form an executor id",
        )
}

fn serve(args: ServeArgs) -> ExitCode {
    let (file, ov) = overrides(args);
    let config = match Config::load(file.as_deref(), &ov) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stoker: {e}");
            return ExitCode::from(2);
        }
    };
    run_server(config, Role::Embedded)
}

fn run_server(config: Config, role: Role) -> ExitCode {
    stoker_api::telemetry::init(&config.log_format);
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("stoker-http")
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("stoker: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(run(config, role)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %format!("{e:#}"), "stoker failed");
            eprintln!("stoker: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(config: Config, role: Role) -> anyhow::Result<()> {
    if !config.model.exists() {
        anyhow::bail!(
            "model {} not found; run scripts/fetch-model.sh or pass --model",
            config.model.display()
        );
    }
    let server =
        stoker_api::roles::start_mode(config, role, stoker_distributed::parts(role)).await?;
    println!("stoker listening on http://{}", server.addr);
    tracing::info!(addr = %server.addr, "listening");
    let trigger = server.shutdown_trigger();
    tokio::spawn(async move {
        shutdown_signal().await;
        trigger();
    });
    server.wait().await
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("installing the SIGTERM handler");
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupt received"),
    }
}
