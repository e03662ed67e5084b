//! `runnel`: the single binary. `runnel dev` runs one broker on localhost with data in a
//! local folder; `runnel serve --config server.properties` runs a configured broker;
//! `runnel bench` measures any Kafka-compatible cluster.
//!
//! The produce path (docs/ARCHITECTURE.md), in seven hops: connection → dispatch →
//! handlers/produce.rs → `Partition::append` → Raft driver (append, replicate, batched
//! fsync) → commit → response. This binary wires it up: `runnel_broker::server::run`.

mod admin;
mod attach;
mod bench;
mod broker_settings;
mod chaos;
mod cli;
mod decommission;
mod dev_tls;
mod local;
mod netns;
mod verify;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use runnel_broker::{server, BrokerConfig, Settings};

#[derive(Parser)]
#[command(name = "runnel", version, about = "A Kafka-compatible streaming platform in one binary")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one broker for development: 127.0.0.1:9092, data in ./data. With --brokers N, a
    /// local cluster of N broker processes on ports PORT..PORT+N-1 (Raft between them on
    /// PORT+1000..), data under DATA_DIR/broker-I; with --regions R and
    /// --inter-region-latency, in network namespaces with latency between regions (root).
    Dev {
        /// Port to listen on (127.0.0.1, or each broker's namespace address); with --brokers,
        /// the first broker's.
        #[arg(long, default_value_t = 9092)]
        port: u16,
        /// Number of brokers (separate processes, one replica each per partition).
        #[arg(long, default_value_t = 1)]
        brokers: u16,
        /// Where the logs and metadata live.
        #[arg(long, default_value = "./data")]
        data_dir: PathBuf,
        /// Override a broker setting, in Kafka's names: --set log.segment.bytes=1048576
        #[arg(long = "set", value_name = "KEY=VALUE")]
        settings: Vec<String>,
        /// Listen with TLS only: makes a throwaway CA, broker and client certificates under
        /// DATA_DIR/tls and prints the client settings (client certificates are requested,
        /// so TLS and mutual TLS clients both get in).
        #[arg(long)]
        tls: bool,
        /// Regions, network namespaces and latency between regions (a local cluster).
        #[command(flatten)]
        net: netns::RegionArgs,
    },
    /// Run a broker from a Kafka-style .properties file.
    Serve {
        /// node.id, listeners, advertised.listeners, log.dirs, limits, retention defaults.
        #[arg(long)]
        config: PathBuf,
        /// Override a setting from the file.
        #[arg(long = "set", value_name = "KEY=VALUE")]
        settings: Vec<String>,
    },
    /// Load generator and benchmark for any Kafka-compatible cluster (also: compare, size).
    Bench(Box<bench::BenchArgs>),
    /// Record a queue workload's history against a cluster (while faults are injected) and
    /// check it for lost, duplicated, inconsistent or reordered records.
    Verify(Box<verify::VerifyArgs>),
    /// Start a local cluster, run the verify workload on it while injecting faults (kill -9,
    /// pause, slow or failing disk, network isolation of a broker or a region, latency
    /// between regions), heal everything, check the history and draw the availability chart.
    Chaos(Box<chaos::ChaosArgs>),
    /// Operate a cluster: drain and undrain brokers (maintenance mode), move a partition's
    /// leadership, list brokers, change the log filter, decommission a broker.
    Admin(admin::AdminArgs),
    /// Create, list, describe, delete topics and alter their configs (Kafka protocol).
    #[command(subcommand)]
    Topic(cli::TopicCommand),
    /// List and describe consumer groups with their lag, move an idle group's offsets,
    /// delete a group (Kafka protocol).
    #[command(subcommand)]
    Group(cli::GroupCommand),
    /// The cluster's brokers by rack and the health of its partitions (Kafka protocol).
    #[command(subcommand)]
    Cluster(cli::ClusterCommand),
    /// The same as `runnel admin decommission`.
    #[command(hide = true)]
    Decommission(decommission::DecommissionArgs),
}

fn apply_overrides(settings: &mut Settings, overrides: &[String]) -> Result<()> {
    for o in overrides {
        let (k, v) = o.split_once('=').with_context(|| format!("--set {o}: expected KEY=VALUE"))?;
        settings.set(k.trim(), v.trim())?;
    }
    Ok(())
}

fn config(command: Command) -> Result<BrokerConfig> {
    let settings = match command {
        Command::Dev { port, data_dir, settings: overrides, tls, .. } => {
            let mut s = Settings::default();
            s.set("listeners", &format!("PLAINTEXT://127.0.0.1:{port}"))?;
            s.set("log.dirs", &data_dir.to_string_lossy())?;
            if tls {
                let (certs, settings) = dev_tls::prepare(&data_dir)?;
                s.set("listeners", &format!("SSL://127.0.0.1:{port}"))?;
                apply_overrides(&mut s, &settings)?;
                println!("{}", dev_tls::client_settings(&certs, &format!("127.0.0.1:{port}")));
            }
            apply_overrides(&mut s, &overrides)?;
            s
        }
        Command::Bench(_)
        | Command::Verify(_)
        | Command::Chaos(_)
        | Command::Decommission(_)
        | Command::Admin(_)
        | Command::Topic(_)
        | Command::Group(_)
        | Command::Cluster(_) => {
            unreachable!("only dev and serve configure a broker")
        }
        Command::Serve { config, settings: overrides } => {
            let text = std::fs::read_to_string(&config).with_context(|| format!("reading {}", config.display()))?;
            let mut s = Settings::from_properties(&text).with_context(|| format!("in {}", config.display()))?;
            apply_overrides(&mut s, &overrides)?;
            s
        }
    };
    BrokerConfig::from_settings(settings)
}

pub(crate) async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        // Without signal handlers the broker still runs; it just cannot stop cleanly.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}

/// `runnel dev --brokers N`: N `runnel dev` processes forming one cluster. Prints each
/// broker's pid, so tools and tests can kill or pause one; a broker that dies is started
/// again a second later (with its new pid printed). SIGINT or SIGTERM stops them all.
///
/// With --regions, --netns or --inter-region-*, the brokers run in network namespaces
/// (per region, one more for clients), with latency between regions: that needs root;
/// without it the cluster runs on loopback, and says so.
async fn dev_cluster(
    port: u16,
    brokers: u16,
    data_dir: PathBuf,
    overrides: Vec<String>,
    tls: bool,
    net: netns::RegionArgs,
) -> Result<()> {
    use local::Brokers;
    if net.shaped() && net.regions < 2 {
        anyhow::bail!(
            "--inter-region-latency, --inter-region-jitter and --inter-region-bandwidth need --regions 2 or more"
        );
    }
    let network = dev_network(brokers, &net)?;
    let mut settings = Vec::new();
    let certs = if tls {
        let (certs, tls_settings) = dev_tls::prepare(&data_dir)?;
        settings = tls_settings;
        Some(certs)
    } else {
        None
    };
    settings.extend(overrides);
    let locations = local::locations(brokers, net.regions, "dev");
    let mut cluster = local::LocalCluster::new(port, brokers, &data_dir, settings, locations, network)?;
    cluster.set_controller_voters(net.controller_voters)?;
    if tls {
        cluster.use_tls();
    }
    cluster.start_all().await?;
    if let Some(summary) = cluster.regions_summary() {
        println!("{summary}");
    }
    if let Some(certs) = certs {
        println!("{}", dev_tls::client_settings(&certs, &cluster.bootstrap()));
    }
    let stop = stop_signal();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tokio::time::sleep(std::time::Duration::from_secs(1)) => {
                for (i, status) in cluster.exited() {
                    tracing::warn!(broker = i, %status, "broker exited; starting it again");
                    cluster.start(i).await?;
                }
            }
        }
    }
    cluster.stop().await;
    // Dropping the cluster removes its namespaces.
    Ok(())
}

/// Network namespaces when the options ask for them and this machine can make them; else
/// loopback, said in one line.
fn dev_network(brokers: u16, net: &netns::RegionArgs) -> Result<local::Network> {
    if !(net.netns || net.shaped()) {
        return Ok(local::Network::Loopback);
    }
    netns::check_plan(brokers, net.plan_regions())?;
    let made = match netns::unavailable() {
        Some(why) => Err(why),
        None => {
            let latency = net.shaped().then(|| net.latency());
            netns::Namespaces::create(brokers, net.regions, latency).map_err(|e| format!("{e:#}"))
        }
    };
    match made {
        Ok(n) => Ok(local::Network::Namespaces(n)),
        Err(why) if net.shaped() => {
            println!(
                "runnel dev: latency between regions needs root, network namespaces and iptables-legacy with NFQUEUE ({why}); the cluster runs on loopback, without latency"
            );
            Ok(local::Network::Loopback)
        }
        Err(why) => {
            println!("runnel dev: --netns needs root and network namespaces ({why}); the cluster runs on loopback");
            Ok(local::Network::Loopback)
        }
    }
}

/// A broker holds one descriptor per segment and per connection: take the whole hard
/// limit on open files, as Kafka's operators are told to configure by hand.
fn raise_open_files_limit() {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed in.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let before = lim.rlim_cur;
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                tracing::info!(from = before, to = lim.rlim_max, "raised the open files limit");
            }
        }
    }
}

/// Logs to stderr through the filter `RUNNEL_LOG` sets (`info` without it); returns what
/// reads or replaces that filter while the process runs (the admin API's `/v1/log-level`).
fn init_logging() -> runnel_admin::LogFilter {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::{fmt, reload, EnvFilter};
    let initial = EnvFilter::try_from_env("RUNNEL_LOG").unwrap_or_else(|_| "info".into());
    let (filter, handle) = reload::Layer::new(initial);
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt::layer().with_writer(std::io::stderr).with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())))
        .init();
    std::sync::Arc::new(move |new: Option<&str>| {
        if let Some(new) = new {
            let parsed = EnvFilter::try_new(new).map_err(|e| format!("log filter {new:?}: {e}"))?;
            handle.reload(parsed).map_err(|e| e.to_string())?;
            tracing::info!(filter = new, "log filter changed");
        }
        handle.with_current(|f| f.to_string()).map_err(|e| e.to_string())
    })
}

fn main() {
    let log_filter = init_logging();
    let cli = Cli::parse();
    let runtime = || tokio::runtime::Builder::new_multi_thread().enable_all().build().context("starting the runtime");
    let result = match cli.command {
        Command::Dev { port, brokers, data_dir, settings, tls, net }
            if brokers > 1 || net.regions > 0 || net.netns || net.shaped() || net.controller_voters.is_some() =>
        {
            runtime().and_then(|rt| rt.block_on(dev_cluster(port, brokers, data_dir, settings, tls, net)))
        }
        Command::Bench(args) => runtime().and_then(|rt| rt.block_on(bench::main(*args))),
        Command::Verify(args) => runtime().and_then(|rt| rt.block_on(verify::main(*args))),
        Command::Chaos(args) => runtime().and_then(|rt| rt.block_on(chaos::main(*args))),
        Command::Decommission(args) => runtime().and_then(|rt| rt.block_on(decommission::main(args))),
        Command::Admin(args) => runtime().and_then(|rt| rt.block_on(admin::main(args))),
        Command::Topic(cmd) => runtime().and_then(|rt| rt.block_on(cli::topic(cmd))),
        Command::Group(cmd) => runtime().and_then(|rt| rt.block_on(cli::group(cmd))),
        Command::Cluster(cmd) => runtime().and_then(|rt| rt.block_on(cli::cluster(cmd))),
        command => config(command).and_then(|config| {
            raise_open_files_limit();
            runnel_sync::install_panic_hook();
            runtime()?.block_on(async {
                // Bound before the broker starts, so a port in use stops it at once.
                runnel_admin::check_authentication(config.settings.get("admin.authentication"))?;
                let admin = runnel_admin::bind(config.settings.get("admin.listeners")).await?;
                server::run_with(config, stop_signal(), |broker| runnel_admin::serve(admin, broker, Some(log_filter)))
                    .await
            })
        }),
    };
    if let Err(e) = result {
        // An environment we cannot run in (port taken, data dir unwritable): say why, exit 1.
        eprintln!("runnel: {e:#}");
        std::process::exit(1);
    }
}
