//! The listener: accepts connections (at most `max.connections`, and
//! `max.connections.per.ip` from one address), runs retention in the background, and on shutdown stops reading new requests, answers those in flight, and
//! closes every log cleanly.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use runnel_sync::LockExt;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tracing::{info, warn};

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::connection;
use crate::coordinators::Kind;
use runnel_security::{SaslServer, ServerTls};

/// How long start-up waits for the groups of the offsets partitions this broker leads.
const GROUPS_LOAD_WAIT_MAX: Duration = Duration::from_secs(10);
/// How long shutdown waits for connections to finish their in-flight requests.
pub const SHUTDOWN_DRAIN_MS_MAX: u64 = 10_000;

/// Runs a broker until `stop` resolves. Returns once every log is closed.
pub async fn run(config: BrokerConfig, stop: impl std::future::Future<Output = ()>) -> Result<()> {
    run_with(config, stop, |_| {}).await
}

/// [`run`], calling `on_started` with the broker once it has started (before it serves
/// clients): the admin listener is served from there.
pub async fn run_with(
    config: BrokerConfig,
    stop: impl std::future::Future<Output = ()>,
    on_started: impl FnOnce(&Arc<Broker>),
) -> Result<()> {
    let started = std::time::Instant::now();
    let mut listeners = Vec::new();
    // SCRAM logins look credentials up in the metadata image, once the broker runs.
    let running: Arc<std::sync::OnceLock<std::sync::Weak<Broker>>> = Arc::default();
    let scram: runnel_security::sasl::ScramLookup = {
        let running = running.clone();
        Arc::new(move |user, mechanism| running.get()?.upgrade()?.controller().scram_credential(user, mechanism))
    };
    // TLS stores as the dynamic settings last left them (listener.name.<l>.ssl.*).
    let mut tls_settings = config.settings.clone();
    let mut dynamic = crate::catalog::Catalog::persisted_broker_configs(&config.data_dir)?;
    dynamic.retain(|k, _| crate::config::dynamic_listener_ssl(k).is_some());
    tls_settings.set_dynamic(dynamic);
    let mut listener_tls = Vec::new();
    for l in &config.listeners {
        let (tls, principal_rules) = if l.protocol.tls() {
            let (settings, name) = (tls_settings.clone(), l.name.clone());
            let tls = ServerTls::server(Box::new(move |k: &str| settings.for_listener(&name, k).to_string()))
                .with_context(|| format!("listener {}", l.name))?;
            let rules = config.settings.for_listener(&l.name, "ssl.principal.mapping.rules");
            let rules = runnel_security::principal::PrincipalRules::parse(rules)
                .map_err(|e| anyhow::anyhow!("listener {}: ssl.principal.mapping.rules: {e}", l.name))?;
            let tls = Arc::new(tls);
            listener_tls.push((l.name.clone(), tls.clone()));
            (Some(tls), Some(Arc::new(rules)))
        } else {
            (None, None)
        };
        let sasl = if l.protocol.sasl() {
            let s = &config.settings;
            let jaas = |mechanism: &str| {
                let own = s.scoped(&l.name, &format!("{}.sasl.jaas.config", mechanism.to_ascii_lowercase()));
                own.unwrap_or_else(|| s.for_listener(&l.name, "sasl.jaas.config")).to_string()
            };
            let settings = |k: &str| s.for_listener(&l.name, k).to_string();
            let mechanisms = s.for_listener(&l.name, "sasl.enabled.mechanisms");
            let server = SaslServer::new(mechanisms, &jaas, scram.clone(), &settings)
                .with_context(|| format!("listener {}", l.name))?;
            Some(Arc::new(server))
        } else {
            None
        };
        // Bound once the listener is ready (its JWKS fetched): a client that can connect
        // can log in.
        let socket =
            config.socket_buffers().listen(l.listen).with_context(|| format!("binding {} ({})", l.listen, l.name))?;
        let entry = connection::Entry { name: l.name.as_str().into(), tls, principal_rules, sasl };
        listeners.push((socket, Arc::new(entry)));
    }
    let broker = Broker::start(config).await?;
    let _ = broker.listener_tls.set(listener_tls);
    crate::txn::attach(&broker);
    let weak = Arc::downgrade(&broker);
    let _ = running.set(weak.clone());
    tokio::spawn(crate::preferred_leader::elect_preferred_leaders(weak.clone()));
    tokio::spawn(crate::reassign::carry_out(weak.clone()));
    // Each partition of the coordinators' logs is read back by the broker that leads it,
    // when it starts leading it.
    tokio::spawn(crate::coordinators::follow_leaders(weak.clone(), Kind::Groups));
    tokio::spawn(crate::coordinators::follow_leaders(weak.clone(), Kind::Transactions));
    tokio::spawn(crate::coordinators::follow_leaders(weak.clone(), Kind::ShareState));
    tokio::spawn(crate::share::sweep_sessions(weak));
    crate::watchdog::start(&broker);
    crate::memory::start(&broker);
    crate::metrics::install(&broker);
    on_started(&broker);
    let connections_max = broker.config.settings.usize("max.connections").max(1);
    let permits = Arc::new(Semaphore::new(connections_max));
    let per_ip = Arc::new(PerIp::from_settings(&broker.config.settings)?);
    let pool = connection::request_bytes_pool(&broker);
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    tokio::spawn(retention_loop(broker.clone(), shutdown_rx.clone()));
    let reload_ms = broker.config.settings.i64("ssl.reload.check.interval.ms");
    for (_, entry) in &listeners {
        if let (Some(tls), true) = (&entry.tls, reload_ms > 0) {
            let interval = Duration::from_millis(reload_ms as u64);
            tokio::spawn(runnel_security::reload_loop(entry.name.clone(), tls.clone(), interval));
        }
        if let Some(sasl) = entry.sasl.as_ref().filter(|s| s.oauth().is_some()) {
            let s = &broker.config.settings;
            let ms = |k: &str| s.for_listener(&entry.name, k).parse::<u64>().unwrap_or(0);
            let timing = JwksTiming {
                refresh: Duration::from_millis(ms("sasl.oauthbearer.jwks.endpoint.refresh.ms").max(1000)),
                backoff: Duration::from_millis(ms("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms").max(10)),
                backoff_max: Duration::from_millis(ms("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms").max(10)),
            };
            tokio::spawn(jwks_refresh_loop(entry.name.clone(), sasl.clone(), timing));
        }
    }
    tokio::spawn(group_tick_loop(broker.clone(), shutdown_rx.clone()));
    tokio::spawn(txn_expiry_loop(broker.clone(), shutdown_rx.clone()));
    if broker.config.settings.bool("log.cleaner.enable") {
        tokio::spawn(cleaner_loop(broker.clone(), shutdown_rx.clone()));
    }
    tokio::pin!(stop);
    // A broker serves clients once it has replayed the metadata log up to its own
    // registration (as KRaft brokers wait for their initial catch-up): answering from an
    // older copy would show a restarted broker clients with missing brokers and topics.
    let mut stopped = false;
    tokio::select! {
        _ = broker.controller().until_registered() => {}
        _ = &mut stop => stopped = true,
    }
    // Groups and transactions of the partitions led here are read back before clients are
    // served.
    if !stopped {
        for kind in [Kind::Groups, Kind::Transactions] {
            crate::coordinators::until_led_partitions_loaded(&broker, kind, GROUPS_LOAD_WAIT_MAX).await;
        }
    }
    let described: Vec<String> = broker
        .config
        .listeners
        .iter()
        .map(|l| format!("{}://{} (advertised {}:{})", l.name, l.listen, l.advertised_host, l.advertised_port))
        .collect();
    info!(
        listeners = %described.join(", "),
        data_dir = %broker.config.data_dir.display(),
        node_id = broker.node_id(),
        ready_ms = started.elapsed().as_millis() as u64,
        "runnel broker ready"
    );
    broker.serving.store(!stopped, Ordering::Release);
    while !stopped {
        tokio::select! {
            _ = &mut stop => stopped = true,
            (accepted, entry) = accept_any(&listeners) => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => { warn!(error = %e, listener = %entry.name, "accept failed"); continue; }
                };
                let Ok(permit) = permits.clone().try_acquire_owned() else {
                    warn!(%peer, connections_max, "refusing connection: max.connections reached");
                    continue;
                };
                let Some(ip_permit) = per_ip.admit(peer.ip()) else {
                    warn!(%peer, max = per_ip.max(peer.ip()), "refusing connection: max.connections.per.ip reached");
                    continue;
                };
                let (b, rx, pool) = (broker.clone(), shutdown_rx.clone(), pool.clone());
                tokio::spawn(runnel_sync::restartable("client connection", async move {
                    connection::serve(b, stream, peer, entry, rx, pool).await;
                    drop(ip_permit);
                    drop(permit);
                }));
            }
        }
    }
    // Leaders move away while clients are still served, so they follow them.
    crate::drain::controlled_shutdown(&broker).await;
    info!("shutting down: draining connections");
    broker.shutting_down.store(true, Ordering::Release);
    broker.serving.store(false, Ordering::Release);
    // Long-polling fetches answer now instead of waiting out their max_wait_ms.
    broker.arrivals.wake_all();
    drop(listeners);
    let _ = shutdown_tx.send(true);
    let drained = tokio::time::timeout(
        Duration::from_millis(SHUTDOWN_DRAIN_MS_MAX),
        permits.acquire_many(connections_max as u32),
    )
    .await;
    if drained.is_err() {
        warn!("some connections did not finish within the drain limit");
    }
    let b = broker.clone();
    tokio::task::spawn_blocking(move || b.close()).await.context("closing logs")?;
    info!("shutdown complete");
    Ok(())
}

/// The next connection on any of the listeners, with the listener it came through.
async fn accept_any(
    listeners: &[(TcpListener, Arc<connection::Entry>)],
) -> (std::io::Result<(tokio::net::TcpStream, std::net::SocketAddr)>, Arc<connection::Entry>) {
    std::future::poll_fn(|cx| {
        for (socket, entry) in listeners {
            if let std::task::Poll::Ready(r) = socket.poll_accept(cx) {
                return std::task::Poll::Ready((r, entry.clone()));
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Connections open per client address, against `max.connections.per.ip` and its
/// per-address `max.connections.per.ip.overrides` (as Kafka counts them).
struct PerIp {
    max: usize,
    overrides: HashMap<IpAddr, usize>,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One admitted connection; dropping it frees its place.
struct IpPermit {
    per_ip: Arc<PerIp>,
    ip: IpAddr,
}

impl PerIp {
    fn from_settings(s: &crate::config::Settings) -> Result<PerIp> {
        let mut overrides = HashMap::new();
        for entry in s.get("max.connections.per.ip.overrides").split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (host, n) = entry
                .rsplit_once(':')
                .with_context(|| format!("max.connections.per.ip.overrides: '{entry}' is not host:count"))?;
            let n: usize = n.trim().parse().with_context(|| format!("max.connections.per.ip.overrides: '{entry}'"))?;
            let host = host.trim().trim_start_matches('[').trim_end_matches(']');
            let ips: Vec<IpAddr> = match host.parse::<IpAddr>() {
                Ok(ip) => vec![ip],
                Err(_) => std::net::ToSocketAddrs::to_socket_addrs(&(host, 0))
                    .with_context(|| format!("max.connections.per.ip.overrides: resolving '{host}'"))?
                    .map(|a| a.ip())
                    .collect(),
            };
            for ip in ips {
                overrides.insert(ip, n);
            }
        }
        Ok(PerIp { max: s.i64("max.connections.per.ip").max(0) as usize, overrides, open: Mutex::new(HashMap::new()) })
    }

    fn max(&self, ip: IpAddr) -> usize {
        self.overrides.get(&ip).copied().unwrap_or(self.max)
    }

    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<IpPermit> {
        let max = self.max(ip);
        let mut open = self.open.lock_or_stop();
        let n = open.entry(ip).or_default();
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(IpPermit { per_ip: self.clone(), ip })
    }
}

impl Drop for IpPermit {
    fn drop(&mut self) {
        let mut open = self.per_ip.open.lock_or_stop();
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// How often group sessions and rebalance deadlines are checked.
const GROUP_TICK_MS: u64 = 100;

async fn group_tick_loop(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let expiry_interval =
        Duration::from_millis(broker.config.settings.i64("offsets.retention.check.interval.ms").max(1) as u64);
    let mut next_expiry = tokio::time::Instant::now() + expiry_interval;
    loop {
        if tokio::time::Instant::now() >= next_expiry {
            broker.group_coordinator.expire_offsets().await;
            next_expiry = tokio::time::Instant::now() + expiry_interval;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(GROUP_TICK_MS)) => broker.group_coordinator.tick().await,
            _ = shutdown.changed() => return,
        }
    }
}

/// Aborts transactions past their timeout and forgets expired transactional ids.
async fn txn_expiry_loop(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    let ms = |k: &str| Duration::from_millis(broker.config.settings.i64(k).max(10) as u64);
    let abort_interval = ms("transaction.abort.timed.out.transaction.cleanup.interval.ms");
    let remove_interval = ms("transaction.remove.expired.transaction.cleanup.interval.ms");
    let mut next_removal = tokio::time::Instant::now() + remove_interval;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(abort_interval) => {}
            _ = shutdown.changed() => return,
        }
        let remove = tokio::time::Instant::now() >= next_removal;
        if remove {
            next_removal = tokio::time::Instant::now() + remove_interval;
        }
        broker.txn_coordinator.expire(remove).await;
    }
}

/// Compacts the logs of `cleanup.policy=compact` topics, one partition at a time, each
/// pass planned and swapped under the partition lock and carried out without it.
async fn cleaner_loop(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let backoff = broker.config.settings.i64("log.cleaner.backoff.ms").max(10) as u64;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(backoff)) => {}
            _ = shutdown.changed() => return,
        }
        let b = broker.clone();
        let _ = tokio::task::spawn_blocking(move || {
            for t in b.catalog.topics_snapshot() {
                for p in &t.partitions {
                    if b.shutting_down.load(Ordering::Acquire) {
                        return;
                    }
                    let started = std::time::Instant::now();
                    // Only committed, applied entries are cleaned, and the cleaned part
                    // becomes the Raft snapshot.
                    match p.compact(crate::now_ms()) {
                        Ok(Some(s)) => info!(
                            topic = %t.name, partition = p.index, node_id = b.node_id(),
                            segments_before = s.segments_before,
                            segments_after = s.segments_after, bytes_before = s.bytes_before,
                            bytes_after = s.bytes_after, records_removed = s.records_removed, markers_removed = s.markers_removed,
                            ms = started.elapsed().as_millis() as u64, "compacted"
                        ),
                        Ok(None) => {}
                        Err(e) => warn!(topic = %t.name, partition = p.index, error = %e, "compaction failed"),
                    }
                }
            }
        })
        .await;
    }
}

struct JwksTiming {
    refresh: Duration,
    backoff: Duration,
    backoff_max: Duration,
}

/// The shortest time between two refreshes asked for by tokens naming a key the JWKS lacks.
const JWKS_MISSING_KEY_REFRESH_MIN: Duration = Duration::from_secs(10);

/// Fetches an OAUTHBEARER listener's JWKS again every `refresh.ms`, early when a token named
/// a key it lacks, and after a failure with a backoff that doubles up to its maximum (the
/// keys already held stay in use meanwhile), as Kafka's refreshing JWKS does.
async fn jwks_refresh_loop(listener: Arc<str>, sasl: Arc<SaslServer>, t: JwksTiming) {
    let mut last = tokio::time::Instant::now();
    let mut retry: Option<(tokio::time::Instant, Duration)> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let Some(oauth) = sasl.oauth() else { return };
        let now = tokio::time::Instant::now();
        let due = match retry {
            Some((at, _)) => now >= at,
            None => now - last >= t.refresh || (oauth.missing_key() && now - last >= JWKS_MISSING_KEY_REFRESH_MIN),
        };
        if !due {
            continue;
        }
        let s = sasl.clone();
        let done = tokio::task::spawn_blocking(move || s.oauth().map(|o| o.refresh())).await;
        last = tokio::time::Instant::now();
        match done {
            Ok(Some(Ok(keys))) => {
                retry = None;
                info!(listener = %listener, keys, "JWKS refreshed");
            }
            Ok(Some(Err(e))) => {
                let wait = retry.map_or(t.backoff, |(_, w)| (w * 2).min(t.backoff_max));
                retry = Some((last + wait, wait));
                warn!(listener = %listener, error = %format!("{e:#}"), retry_ms = wait.as_millis() as u64,
                    "JWKS refresh failed; the keys held stay in use");
            }
            Ok(None) => return,
            Err(e) => warn!(listener = %listener, error = %e, "JWKS refresh task failed"),
        }
    }
}

async fn retention_loop(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    loop {
        let interval = broker.catalog.settings().i64("log.retention.check.interval.ms").max(10) as u64;
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(interval)) => {}
            _ = shutdown.changed() => return,
        }
        let b = broker.clone();
        let _ = tokio::task::spawn_blocking(move || {
            let now = crate::now_ms();
            for t in b.catalog.topics_snapshot() {
                for p in &t.partitions {
                    match p.enforce_retention(now) {
                        Ok(Some(start)) => {
                            info!(topic = %t.name, partition = p.index, log_start_offset = start, "retention deleted segments")
                        }
                        Ok(None) => {}
                        Err(e) => warn!(topic = %t.name, partition = p.index, error = %e, "retention failed"),
                    }
                }
            }
        })
        .await;
    }
}
