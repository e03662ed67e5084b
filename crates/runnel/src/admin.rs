//! `runnel admin`: operating a cluster from the command line. Maintenance mode, leadership
//! transfer, the brokers' state and the log filter go through a broker's admin API
//! (`--admin http://host:port`, docs/admin.md); decommission uses the Kafka protocol
//! (`--bootstrap`), as `runnel decommission` does.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine;
use runnel_admin::http;
use serde_json::Value;

use crate::decommission;

#[derive(clap::Args)]
pub struct AdminArgs {
    #[command(subcommand)]
    command: AdminCommand,
}

#[derive(clap::Args)]
struct Api {
    /// A broker's admin listener, http://host:port (its `admin.listeners`).
    #[arg(long, default_value = "http://127.0.0.1:9644")]
    admin: String,
    /// A user whose SCRAM credentials the cluster holds, when the admin API asks for one
    /// (`admin.authentication=basic`); the password is read from RUNNEL_ADMIN_PASSWORD.
    #[arg(long)]
    user: Option<String>,
}

impl Api {
    /// One request to the admin API; its JSON answer, or the API's error as the error.
    async fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        let login = match &self.user {
            Some(user) => {
                let password = std::env::var("RUNNEL_ADMIN_PASSWORD")
                    .context("--user: the password is read from RUNNEL_ADMIN_PASSWORD, which is not set")?;
                Some(format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
                ))
            }
            None => None,
        };
        let body = body.map(Value::to_string);
        let (status, payload) =
            http::request(&self.admin, method, path, body.as_deref(), login.as_deref(), CALL_TIMEOUT).await?;
        let value: Value = serde_json::from_slice(&payload)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&payload).into()));
        if !(200..300).contains(&status) {
            let why = value["error"].as_str().map(str::to_string).unwrap_or_else(|| value.to_string());
            bail!("{method} {}{path}: {status}: {why}", self.admin);
        }
        Ok(value)
    }
}

#[derive(clap::Subcommand)]
enum AdminCommand {
    /// The brokers with their failure domains, fenced and drained ones, and the controller.
    Brokers(Api),
    /// Maintenance mode: move every leadership off a broker (it keeps its replicas) and
    /// wait until it leads nothing another replica could lead.
    Drain {
        #[command(flatten)]
        api: Api,
        #[arg(long)]
        broker: i32,
        /// Give up waiting after this many seconds (the drain stays in force).
        #[arg(long, default_value_t = 120)]
        timeout_s: u64,
    },
    /// End maintenance mode: the broker may lead again, and takes back its preferred
    /// leaderships.
    Undrain {
        #[command(flatten)]
        api: Api,
        #[arg(long)]
        broker: i32,
    },
    /// Move one partition's leadership to another of its replicas.
    Transfer {
        #[command(flatten)]
        api: Api,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        /// The replica to lead.
        #[arg(long)]
        to: i32,
    },
    /// Show the broker's log filter, or set it (`RUNNEL_LOG` syntax: info,runnel_raft=debug).
    LogLevel {
        #[command(flatten)]
        api: Api,
        filter: Option<String>,
    },
    /// Move every partition replica off a broker (Kafka's AlterPartitionReassignments) and
    /// wait until none is left, so that the broker can leave the cluster.
    Decommission(decommission::DecommissionArgs),
}

pub async fn main(args: AdminArgs) -> Result<()> {
    match args.command {
        AdminCommand::Brokers(api) => {
            let brokers = api.call("GET", "/v1/brokers", None).await?;
            println!("{:>4}  {:<22} {:<40} {:<9} {:<12} controller", "id", "address", "location", "fenced", "draining");
            for b in brokers.as_array().map(Vec::as_slice).unwrap_or_default() {
                let location = b["location"]
                    .as_object()
                    .map(|l| l.iter().map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or(""))).collect::<Vec<_>>())
                    .unwrap_or_default()
                    .join(",");
                println!(
                    "{:>4}  {:<22} {:<40} {:<9} {:<12} {}",
                    b["id"],
                    format!("{}:{}", b["host"].as_str().unwrap_or(""), b["port"]),
                    location,
                    b["fenced"],
                    b["draining"].as_str().unwrap_or("-"),
                    b["controller"]
                );
            }
            Ok(())
        }
        AdminCommand::Drain { api, broker, timeout_s } => {
            let path = format!("/v1/brokers/{broker}/drain");
            api.call("POST", &path, None).await?;
            println!("broker {broker}: drain started");
            let deadline = Instant::now() + Duration::from_secs(timeout_s);
            let mut shown = None;
            loop {
                let v = api.call("GET", &path, None).await?;
                let (leaders, movable) = (v["leaders"].as_u64().unwrap_or(0), v["movable"].as_u64().unwrap_or(0));
                if shown != Some((leaders, movable)) {
                    println!("broker {broker}: leads {leaders} partition(s), {movable} of them still to move");
                    shown = Some((leaders, movable));
                }
                if v["done"].as_bool() == Some(true) {
                    println!("broker {broker}: drained");
                    return Ok(());
                }
                if Instant::now() >= deadline {
                    bail!("broker {broker} still leads {movable} partition(s) that could move after {timeout_s} s");
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
        AdminCommand::Undrain { api, broker } => {
            api.call("DELETE", &format!("/v1/brokers/{broker}/drain"), None).await?;
            println!("broker {broker}: may lead again");
            Ok(())
        }
        AdminCommand::Transfer { api, topic, partition, to } => {
            let body = serde_json::json!({ "broker": to });
            let v = api.call("POST", &format!("/v1/partitions/{topic}/{partition}/leader"), Some(&body)).await?;
            println!("{topic}-{partition}: led by {} (leader epoch {})", v["leader"], v["leader_epoch"]);
            Ok(())
        }
        AdminCommand::LogLevel { api, filter } => {
            let v = match filter {
                Some(f) => api.call("PUT", "/v1/log-level", Some(&serde_json::json!({ "filter": f }))).await?,
                None => api.call("GET", "/v1/log-level", None).await?,
            };
            println!("{}", v["filter"].as_str().unwrap_or_default());
            Ok(())
        }
        AdminCommand::Decommission(args) => decommission::main(args).await,
    }
}

const CALL_TIMEOUT: Duration = Duration::from_secs(30);
