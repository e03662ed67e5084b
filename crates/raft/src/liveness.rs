//! Which peer brokers are alive, for quiet groups (`replica/quiet.rs`): a quiet group sends
//! no heartbeat, so its replicas cannot tell a dead peer from an idle one. The driver
//! pings every peer it has heard from once a tick, carrying an incarnation that is new at
//! each start of the driver. A peer is gone when it has been silent for
//! [`SILENT_TICKS`] (no ping nor any Raft message), or when its incarnation changes (it
//! restarted, and its replicas forgot who leads). Silence is counted in the driver's own
//! ticks, so a driver that was itself held up (a slow disk, a paused process) does not
//! take its peers for dead.
//!
//! Owned by the driver's task alone.

use std::collections::BTreeMap;

use raft::eraftpb::Message;

/// Pseudo group id of the pings between drivers (never a Raft group).
pub const LIVENESS_GROUP: u64 = u64::MAX - 1;

/// A peer silent for this many of our ticks is gone (one election timeout).
pub const SILENT_TICKS: u64 = 10;
/// Peers tracked at most (the Raft port is open to the network: a sender of forged ids
/// must not grow the table). A peer past it is never live, so the groups it is a member
/// of do not go quiet.
pub const PEERS_MAX: usize = 1024;

struct Peer {
    /// Our tick when it was last heard from.
    heard: u64,
    incarnation: Option<u64>,
    live: bool,
}

/// What a message tells of its sender ([`Liveness::heard`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// Live before, and the same incarnation.
    Same,
    /// Silent before (or never heard from), and not known to have restarted.
    Back,
    /// A new incarnation: it restarted, and its replicas forgot who leads.
    Restarted,
}

pub struct Liveness {
    id: u64,
    incarnation: u64,
    ticks: u64,
    peers: BTreeMap<u64, Peer>,
}

impl Liveness {
    pub fn new(id: u64, incarnation: u64) -> Liveness {
        Liveness { id, incarnation, ticks: 0, peers: BTreeMap::new() }
    }

    /// A message came from `peer` (a ping carries its incarnation): whether the peer
    /// restarted since we last heard from it, or is back after it went silent (or is heard
    /// from for the first time).
    pub fn heard(&mut self, peer: u64, incarnation: Option<u64>) -> Heard {
        if peer == self.id || peer == 0 {
            return Heard::Same;
        }
        let ticks = self.ticks;
        if self.peers.len() >= PEERS_MAX && !self.peers.contains_key(&peer) {
            return Heard::Same;
        }
        let mut back = false;
        let p = self.peers.entry(peer).or_insert_with(|| {
            back = true;
            Peer { heard: ticks, incarnation: None, live: true }
        });
        p.heard = ticks;
        back |= !p.live;
        p.live = true;
        match (incarnation, p.incarnation) {
            (Some(new), Some(old)) if new != old => {
                p.incarnation = Some(new);
                return Heard::Restarted;
            }
            (Some(new), _) => p.incarnation = Some(new),
            (None, _) => {}
        }
        if back {
            Heard::Back
        } else {
            Heard::Same
        }
    }

    /// One tick of our clock. Returns the peers that have just gone silent.
    pub fn tick(&mut self) -> Vec<u64> {
        self.ticks += 1;
        let now = self.ticks;
        let mut gone = Vec::new();
        for (id, p) in self.peers.iter_mut() {
            if p.live && now.saturating_sub(p.heard) > SILENT_TICKS {
                p.live = false;
                gone.push(*id);
            }
        }
        gone
    }

    /// `peer` was heard from within [`SILENT_TICKS`] (we are always live to ourselves).
    pub fn is_live(&self, peer: u64) -> bool {
        peer == self.id || self.peers.get(&peer).is_some_and(|p| p.live)
    }

    /// The pings to send this tick: one to every peer heard from, live or not (a peer
    /// back from the dead hears from us at once).
    pub fn pings(&self) -> Vec<Message> {
        let ping = |to: u64| Message { to, from: self.id, index: self.incarnation, ..Default::default() };
        self.peers.keys().map(|to| ping(*to)).collect()
    }
}

/// A ping's incarnation, or None for a message that is not one.
pub fn ping_incarnation(group: u64, m: &Message) -> Option<u64> {
    (group == LIVENESS_GROUP).then_some(m.index)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silent_peer_is_gone_once_after_silent_ticks_and_live_again_when_heard() {
        let mut l = Liveness::new(1, 7);
        assert!(!l.is_live(2));
        assert_eq!(l.heard(2, None), Heard::Back, "heard from the first time");
        assert_eq!(l.heard(2, None), Heard::Same);
        assert!(l.is_live(2) && l.is_live(1));
        for _ in 0..SILENT_TICKS {
            assert!(l.tick().is_empty());
        }
        assert_eq!(l.tick(), vec![2]);
        assert!(!l.is_live(2));
        assert!(l.tick().is_empty(), "gone is reported once");
        assert_eq!(l.pings().iter().map(|m| (m.to, m.from, m.index)).collect::<Vec<_>>(), vec![(2, 1, 7)]);
        assert_eq!(l.heard(2, Some(5)), Heard::Back, "back after it went silent");
        assert!(l.is_live(2));
        assert_eq!(l.heard(2, Some(5)), Heard::Same);
    }

    #[test]
    fn a_new_incarnation_is_a_restart() {
        let mut l = Liveness::new(1, 7);
        assert_eq!(l.heard(3, Some(10)), Heard::Back);
        assert_eq!(l.heard(3, None), Heard::Same);
        assert_eq!(l.heard(3, Some(10)), Heard::Same);
        assert_eq!(l.heard(3, Some(11)), Heard::Restarted);
        assert_eq!(l.heard(1, Some(99)), Heard::Same, "ourselves");
    }
}
