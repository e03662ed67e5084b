//! `runnel admin`: operating a cluster from the command line. Maintenance mode, leadership
//! transfer, the brokers' state and the log filter go through a broker's admin API
//! (`--admin http://host:port`, docs/admin.md); decommission uses the Kafka protocol
//! (`--bootstrap`), as `runnel decommission` does.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::Engine;
use runnel_admin::http::{parse_answer, ANSWER_MAX};
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
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> Result<Value> {
        let login = match &self.user {
            Some(user) => {
                let password = std::env::var("RUNNEL_ADMIN_PASSWORD")
                    .context("--user: the password is read from RUNNEL_ADMIN_PASSWORD, which is not set")?;
                Some(base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}")))
            }
            None => None,
        };
        call(&self.admin, method, path, body, login.as_deref())
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

pub fn main(args: AdminArgs) -> Result<()> {
    match args.command {
        AdminCommand::Brokers(api) => {
            let brokers = api.call("GET", "/v1/brokers", None)?;
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
            api.call("POST", &path, None)?;
            println!("broker {broker}: drain started");
            let deadline = Instant::now() + Duration::from_secs(timeout_s);
            let mut shown = None;
            loop {
                let v = api.call("GET", &path, None)?;
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
                std::thread::sleep(Duration::from_millis(250));
            }
        }
        AdminCommand::Undrain { api, broker } => {
            api.call("DELETE", &format!("/v1/brokers/{broker}/drain"), None)?;
            println!("broker {broker}: may lead again");
            Ok(())
        }
        AdminCommand::Transfer { api, topic, partition, to } => {
            let body = serde_json::json!({ "broker": to });
            let v = api.call("POST", &format!("/v1/partitions/{topic}/{partition}/leader"), Some(&body))?;
            println!("{topic}-{partition}: led by {} (leader epoch {})", v["leader"], v["leader_epoch"]);
            Ok(())
        }
        AdminCommand::LogLevel { api, filter } => {
            let v = match filter {
                Some(f) => api.call("PUT", "/v1/log-level", Some(&serde_json::json!({ "filter": f })))?,
                None => api.call("GET", "/v1/log-level", None)?,
            };
            println!("{}", v["filter"].as_str().unwrap_or_default());
            Ok(())
        }
        AdminCommand::Decommission(args) => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the runtime")?
            .block_on(decommission::main(args)),
    }
}

const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// One HTTP/1.1 request to the admin API; its JSON answer, or the API's error as the error.
fn call(base: &str, method: &str, path: &str, body: Option<&Value>, login: Option<&str>) -> Result<Value> {
    let Some(address) = base.strip_prefix("http://").map(|a| a.trim_end_matches('/')) else {
        bail!("--admin {base}: expected http://host:port");
    };
    let addr = address
        .to_socket_addrs()
        .with_context(|| format!("resolving {address}"))?
        .next()
        .with_context(|| format!("{address} resolves to no address"))?;
    let mut stream =
        TcpStream::connect_timeout(&addr, CALL_TIMEOUT).with_context(|| format!("connecting to {base}"))?;
    stream.set_read_timeout(Some(CALL_TIMEOUT))?;
    stream.set_write_timeout(Some(CALL_TIMEOUT))?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let authorization = login.map(|l| format!("Authorization: Basic {l}\r\n")).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\n{authorization}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).with_context(|| format!("{method} {base}{path}"))?;
    let mut raw = Vec::new();
    stream.take(ANSWER_MAX + 1).read_to_end(&mut raw).with_context(|| format!("{method} {base}{path}"))?;
    if raw.len() as u64 > ANSWER_MAX {
        bail!("{method} {base}{path}: the answer is larger than {ANSWER_MAX} bytes");
    }
    let (status, payload) = parse_answer(&raw).with_context(|| format!("{method} {base}{path}"))?;
    let value: Value =
        serde_json::from_slice(&payload).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&payload).into()));
    if !(200..300).contains(&status) {
        let why = value["error"].as_str().map(str::to_string).unwrap_or_else(|| value.to_string());
        bail!("{method} {base}{path}: {status}: {why}");
    }
    Ok(value)
}
