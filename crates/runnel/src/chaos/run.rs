//! The run of `runnel chaos`: the workload started, the schedule's faults applied and
//! healed in time order (overlapping ones each at its own end), brokers that die on their
//! own restarted, and the history checked and reported.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use runnel_verify::router::Router;
use runnel_verify::{workload, ClientRegion, FaultWindow};

use super::{Applied, Chaos, ChaosArgs, Planned, Rng, Step};
use crate::local::{region_name, Brokers};

/// The schedule as steps in time order: each fault applied at its start (index `i` in the
/// schedule) and healed at its end, whatever else is in force then.
fn steps(schedule: &[Planned]) -> Vec<(Duration, Step, usize)> {
    let mut steps: Vec<(Duration, Step, usize)> = schedule
        .iter()
        .enumerate()
        .flat_map(|(i, p)| [(p.start, Step::Apply, i), (p.start + p.hold, Step::Heal, i)])
        .collect();
    steps.sort();
    steps
}

/// One more (`add`) or one fewer fault in force holding broker `b`; returns how many held
/// it before.
pub(super) fn count(holds: &mut HashMap<u16, usize>, b: u16, add: bool) -> usize {
    let before = holds.get(&b).copied().unwrap_or(0);
    match if add { before + 1 } else { before.saturating_sub(1) } {
        0 => holds.remove(&b),
        after => holds.insert(b, after),
    };
    before
}

/// A fault in force: what it is, how to heal it, and since when.
pub(super) struct InForce {
    pub(super) what: String,
    pub(super) applied: Applied,
    pub(super) since: Instant,
    /// A drill's region cut: the probe of whether metadata stays writable meanwhile.
    pub(super) metadata: Option<tokio::task::JoinHandle<Option<u64>>>,
}

pub(super) async fn run<C: Brokers>(cluster: C, a: &ChaosArgs, schedule: Vec<Planned>, rng: Rng) -> Result<()> {
    let brokers = cluster.ids();
    // Another broker program (a JVM) may take longer to start.
    let within = if a.broker_command.is_some() { 180 } else { 30 };
    for i in &brokers {
        cluster.wait_listening(*i, Duration::from_secs(within)).await?;
    }
    let bootstrap = cluster.bootstrap();
    let mut cfg = a.workload.config(&bootstrap);
    if cfg.regions.is_empty() && a.net.regions >= 2 {
        // The clients run in the regions too: each sends its region as client.rack, and
        // connects from its region's client namespace when there are namespaces.
        let ns = cluster.namespaces();
        cfg.regions = (0..a.net.regions)
            .map(|r| ClientRegion {
                name: region_name(r),
                netns: ns.map(|n| runnel_client::Netns::named(&n.client_namespace(r))),
            })
            .collect();
        cfg.broker_regions = brokers.iter().map(|b| (i32::from(*b), region_name(b % a.net.regions))).collect();
    }
    let mut router = Router::new(&bootstrap, &cfg.topic, "runnel-chaos", Duration::from_secs(3));
    wait_registered(&mut router, brokers.len() as u16, Duration::from_secs(2 * within)).await?;
    // The first SIGINT or SIGTERM heals the faults in force and stops the run; a second one
    // ends the process at once (removing the network namespaces first).
    let interrupt = Arc::new(AtomicBool::new(false));
    let on_signal = interrupt.clone();
    tokio::spawn(async move {
        crate::stop_signal().await;
        eprintln!("runnel chaos: interrupted; healing the faults in force (again to quit at once)");
        on_signal.store(true, Ordering::Relaxed);
        crate::stop_signal().await;
        crate::netns::remove_all();
        std::process::exit(130);
    });
    let coordinator_keys = if cfg.transactional {
        let copier = format!("{}-copier", cfg.topic);
        let producers = (0..cfg.producers).map(|i| (1, format!("{}-txn-{i}", cfg.topic)));
        [(1, copier.clone()), (0, copier)].into_iter().chain(producers).collect()
    } else {
        vec![(0, cfg.group.clone())]
    };
    let (partitions, duration) = (cfg.partitions, cfg.duration);
    let t0 = Instant::now();
    let workload = tokio::spawn(workload::run(cfg, t0));
    let mut chaos = Chaos {
        cluster,
        router,
        rng,
        regions: a.net.regions,
        disk_delay_ms: a.disk_delay_ms,
        clock_jump_ms: a.clock_jump_ms,
        latency_ms: a.latency_ms,
        latency_faults: 0,
        links_down: HashMap::new(),
        clients_down: HashMap::new(),
        paused: HashMap::new(),
        may_exit: Vec::new(),
        unexpected_exits: Vec::new(),
        failed_stops: Vec::new(),
        stop_within: Duration::from_millis(a.stop_within_ms),
        interrupt,
        coordinator_keys,
        coordinator_faults: 0,
        recoveries: Vec::new(),
        until: t0 + duration + Duration::from_secs(5),
    };
    let secs = |at: Instant| at.saturating_duration_since(t0).as_secs_f64();
    // The schedule's clock starts once the workload runs: a fault at 0 s has a topic to hit.
    let ready = chaos.wait_running(partitions, &workload).await?;
    if let Some(r) = ready {
        println!("{:>7.1}s the workload runs (topic created, every partition led): the schedule starts", secs(r));
    }
    let ready = ready.unwrap_or_else(Instant::now);
    // Where each partition is led as the schedule starts: the drill's latency of writes to
    // a leader in the producer's own region.
    let first_leaders: Vec<i32> = match chaos.router.replicas().await {
        Ok(parts) => parts.into_iter().map(|(leader, _)| leader).collect(),
        Err(_) => Vec::new(),
    };
    let mut in_force: Vec<(usize, InForce)> = Vec::new();
    let mut attempted = vec![false; schedule.len()];
    let mut windows = Vec::new();
    let mut skipped = Vec::new();
    let mut heal_error = None;
    for (at, step, i) in steps(&schedule) {
        chaos.hold((ready + at).saturating_duration_since(Instant::now())).await;
        if workload.is_finished() || chaos.interrupted() {
            break;
        }
        let p = &schedule[i];
        match step {
            Step::Apply => {
                attempted[i] = true;
                let started = Instant::now();
                match chaos.apply_retrying(p.fault, &workload).await {
                    Ok((what, applied)) => {
                        println!("{:>7.1}s {what} for {:.1}s", secs(started), p.hold.as_secs_f64());
                        let metadata = match &applied {
                            Applied::IsolatedRegion(_, cut) if a.drill.is_some() => {
                                let outside: Vec<String> = (chaos.cluster.ids().into_iter())
                                    .filter(|b| !cut.contains(b))
                                    .map(|b| chaos.cluster.address(b))
                                    .collect();
                                let probe = super::recovery::metadata_write(outside, started, started + p.hold);
                                Some(tokio::spawn(probe))
                            }
                            _ => None,
                        };
                        in_force.push((i, InForce { what, applied, since: started, metadata }));
                    }
                    Err(e) => {
                        println!("{:>7.1}s {} skipped: {e:#}", secs(started), p.fault.name());
                        skipped.push(p.fault.name());
                    }
                }
            }
            Step::Heal => {
                let Some(k) = in_force.iter().position(|(j, _)| *j == i) else { continue };
                let (_, f) = in_force.remove(k);
                if let Err(e) = chaos.heal_one(f, t0, &mut windows).await {
                    heal_error = Some(e);
                    break;
                }
            }
        }
    }
    // Faults still in force (the workload ended, the run was interrupted, or a heal
    // failed) are healed now, in the order they were applied.
    for (_, f) in in_force {
        if let Err(e) = chaos.heal_one(f, t0, &mut windows).await {
            heal_error.get_or_insert(e);
        }
    }
    let first = match (&heal_error, chaos.interrupted()) {
        (Some(_), _) => "a heal failed",
        (None, true) => "the run was interrupted",
        (None, false) => "the workload ended",
    };
    for (p, _) in schedule.iter().zip(&attempted).filter(|(_, tried)| !**tried) {
        let (now, due) = (secs(Instant::now()), secs(ready + p.start));
        println!("{now:>7.1}s {} (due at {due:.1}s) skipped: {first} before its start", p.fault.name());
        skipped.push(p.fault.name());
    }
    if let Some(e) = heal_error {
        workload.abort();
        chaos.cluster.stop().await;
        return Err(e);
    }
    // Keep restarting brokers that die on their own until the workload (and its final
    // read) is over.
    while !workload.is_finished() && !chaos.interrupted() {
        chaos.hold(Duration::from_millis(200)).await;
    }
    if chaos.interrupted() {
        workload.abort();
        chaos.cluster.stop().await;
        bail!("interrupted after {} faults, each healed; the history was not checked", windows.len());
    }
    let mut history = workload.await.context("workload task")??;
    for (i, watch) in chaos.recoveries.drain(..) {
        if let (Some(w), Ok(r)) = (windows.get_mut(i), watch.await) {
            w.recovery = Some(r);
        }
    }
    windows.sort_by_key(|w: &FaultWindow| w.start_ms);
    history.faults = windows;
    chaos.cluster.stop().await;
    let title = format!("runnel chaos: {} brokers, {} faults", brokers.len(), history.faults.len());
    println!("faults injected: {} ({} skipped)", history.faults.len(), skipped.len());
    let checked = crate::verify::print_report(&history, &a.workload, &title).and_then(|report| {
        if a.drill.is_some() {
            let leader_regions: Vec<Option<String>> = first_leaders
                .iter()
                .map(|l| u16::try_from(*l).ok().filter(|_| a.net.regions >= 2).map(|l| region_name(l % a.net.regions)))
                .collect();
            let summary = super::drill::summarize(&history, &report, &leader_regions);
            match &summary {
                Some(s) => super::drill::print(s),
                None => println!("region-loss drill: no region was cut off (see the faults above)"),
            }
            if let (Some(s), Some(p)) = (&summary, &a.drill_json) {
                std::fs::write(p, serde_json::to_string_pretty(s)?)
                    .with_context(|| format!("writing {}", p.display()))?;
            }
        }
        crate::verify::judge(&report)
    });
    for e in &chaos.unexpected_exits {
        println!("unexpected exit: {e}");
    }
    for e in &chaos.failed_stops {
        println!("failed stop: {e}");
    }
    if !chaos.unexpected_exits.is_empty() || !chaos.failed_stops.is_empty() {
        checked?;
        bail!(
            "{} broker(s) exited on their own, {} stop(s) were not clean",
            chaos.unexpected_exits.len(),
            chaos.failed_stops.len()
        );
    }
    checked
}

/// Waits until Metadata lists every broker.
pub(super) async fn wait_registered(router: &mut Router, brokers: u16, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        if router.refresh().await.is_ok() && router.broker_count() == brokers as usize {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the cluster did not register {brokers} brokers within {} s", within.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chaos::parse_schedule;

    #[test]
    fn faults_of_a_schedule_overlap_each_healed_at_its_own_end() {
        // The schedule users reported: the isolation starts while the latency is in force.
        let schedule = parse_schedule("3:region-latency:70,20:isolate-region:15,73:kill-leader:2").expect("parses");
        let s = |secs: u64| Duration::from_secs(secs);
        assert_eq!(
            steps(&schedule),
            vec![
                (s(3), Step::Apply, 0),
                (s(20), Step::Apply, 1),
                (s(35), Step::Heal, 1),
                // A fault that ends when the next starts is healed first.
                (s(73), Step::Heal, 0),
                (s(73), Step::Apply, 2),
                (s(75), Step::Heal, 2),
            ]
        );
        assert!(parse_schedule("3:region-latency").is_err() && parse_schedule("x:kill-leader:3").is_err());
    }

    #[test]
    fn holds_nest() {
        let mut holds = HashMap::new();
        assert_eq!(count(&mut holds, 4, true), 0);
        assert_eq!(count(&mut holds, 4, true), 1);
        assert_eq!(count(&mut holds, 4, false), 2);
        assert_eq!(count(&mut holds, 4, false), 1);
        assert!(holds.is_empty());
    }
}
