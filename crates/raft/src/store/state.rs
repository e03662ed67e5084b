//! `raft.state`: what a replica keeps beside its log (term, vote, commit, the voter
//! configurations, the snapshot point), rewritten whole and atomically (a new file renamed
//! over the old). A driver round stages new terms and votes and a shutdown stages the
//! commit index, so that many groups share their syncs.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use raft::eraftpb::{ConfState, HardState};

use super::RaftLog;

pub(super) const STATE_FILE: &str = "raft.state";
/// A new term or vote written by a driver round, renamed over [`STATE_FILE`] once the
/// round's sync covered it (see [`RaftLog::set_hard_state`]).
const STAGED_STATE_FILE: &str = "raft.state.staged";
/// The state of a clean shutdown, staged the same way ([`RaftLog::close_stage`]).
const CLOSING_STATE_FILE: &str = "raft.state.closing";
const STATE_VERSION: &str = "v1";

impl RaftLog {
    /// Records a new hard state. When the term or vote changed, which Raft requires on disk
    /// before it sends anything that depends on them, the state is written beside the state
    /// file, unsynced: the caller syncs it with the round's other files
    /// ([`RaftLog::staged_state`]), then has it take the state file's place
    /// ([`RaftLog::commit_staged_state`]) and syncs the directory. Many groups electing at
    /// once (a broker's start, a peer's loss) then share two syncs instead of two each.
    pub fn set_hard_state(&mut self, hs: HardState) -> io::Result<()> {
        let durable = hs.term != self.hard.term || hs.vote != self.hard.vote;
        self.hard = hs;
        if durable {
            self.stage_state()?;
        }
        Ok(())
    }

    /// Writes the whole state beside the state file, unsynced, to be synced and put in
    /// place as [`RaftLog::set_hard_state`]'s is.
    pub(super) fn stage_state(&mut self) -> io::Result<()> {
        let text = self.state_text();
        let mut f = File::create(self.dir.join(STAGED_STATE_FILE))?;
        f.write_all(text.as_bytes())?;
        self.staged = Some((Arc::new(f), text_hash(&text)));
        Ok(())
    }

    /// The staged state file, to be synced before [`RaftLog::commit_staged_state`].
    pub fn staged_state(&self) -> Option<Arc<File>> {
        self.staged.as_ref().map(|(f, _)| f.clone())
    }

    /// Syncs a staged state that is still waiting, puts it in place and syncs the
    /// directory: for a caller that did not ([`RaftLog::commit_staged_state`]). Call it once
    /// the directory of a state the caller did put in place is synced.
    pub fn commit_staged_state_now(&mut self) -> io::Result<()> {
        if let Some(f) = self.staged_state() {
            f.sync_data()?;
            self.commit_staged_state()?;
            File::open(&self.dir)?.sync_all()?;
        }
        if let Some(hash) = self.state_put.take() {
            self.state_on_disk = Some(hash);
        }
        Ok(())
    }

    /// Renames the staged state (synced by the caller) over the state file; returns the
    /// directory, whose sync makes the rename durable. None when nothing was staged, or a
    /// full write of the state (which syncs itself) has since replaced it.
    pub fn commit_staged_state(&mut self) -> io::Result<Option<PathBuf>> {
        let Some((_, hash)) = self.staged.take() else { return Ok(None) };
        fs::rename(self.dir.join(STAGED_STATE_FILE), self.dir.join(STATE_FILE))?;
        self.state_put = Some(hash);
        Ok(Some(self.dir.clone()))
    }

    /// Persists the commit index too (clean shutdown) and closes the log.
    pub fn close(&mut self) -> io::Result<()> {
        self.log.close()?;
        self.write_state()
    }

    /// [`RaftLog::close`] in steps, for many replicas at once: the log's checkpoint and the
    /// state with the commit index are staged; the caller syncs the returned files, calls
    /// [`RaftLog::close_commit`], and syncs the directory it returns. What the files in
    /// place already say, durably (an idle replica's), is not written again.
    pub fn close_stage(&mut self) -> io::Result<Vec<Arc<File>>> {
        let mut files = self.log.close_stage()?;
        let text = self.state_text();
        let hash = text_hash(&text);
        if self.state_durable(hash) {
            self.closing = None;
            return Ok(files);
        }
        let mut f = File::create(self.dir.join(CLOSING_STATE_FILE))?;
        f.write_all(text.as_bytes())?;
        self.closing = Some(hash);
        files.push(Arc::new(f));
        Ok(files)
    }

    /// Second step of [`RaftLog::close_stage`], after the sync; returns the directory to
    /// sync, if a file was put in place there. The staged close's state goes in place if it
    /// is still the replica's state (a driver round may have put a new term in place
    /// meanwhile); a state that moved on since is written whole, synced, unless the state
    /// file already holds it.
    pub fn close_commit(&mut self) -> io::Result<Option<PathBuf>> {
        let mut renamed = self.log.close_commit()?;
        let now = text_hash(&self.state_text());
        match self.closing.take() {
            Some(hash) if hash == now && self.staged.is_none() => {
                fs::rename(self.dir.join(CLOSING_STATE_FILE), self.dir.join(STATE_FILE))?;
                // Durable once the caller syncs the directory, as a put state is.
                self.state_on_disk = Some(hash);
                self.state_put = None;
                renamed = true;
            }
            _ if self.state_durable(now) => {}
            _ => self.write_state()?,
        }
        Ok(renamed.then(|| self.dir.clone()))
    }

    /// Whether the state file durably holds the state whose text hashes to `hash`.
    fn state_durable(&self, hash: u64) -> bool {
        self.staged.is_none() && self.state_put.is_none() && self.state_on_disk == Some(hash)
    }

    /// Writes the whole state to the state file and syncs it (and its directory); a state
    /// staged earlier is superseded.
    pub(super) fn write_state(&mut self) -> io::Result<()> {
        let text = self.state_text();
        let tmp = self.dir.join(format!("{STATE_FILE}.tmp"));
        let mut f = File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, self.dir.join(STATE_FILE))?;
        File::open(&self.dir)?.sync_all()?;
        self.state_on_disk = Some(text_hash(&text));
        self.state_put = None;
        if self.staged.take().is_some() {
            let _ = fs::remove_file(self.dir.join(STAGED_STATE_FILE));
        }
        Ok(())
    }

    fn state_text(&self) -> String {
        // The log start goes last, and only once set: files from before it existed still read.
        let log_start = self.log_start.map(|s| format!(" {s}")).unwrap_or_default();
        let mut text = format!(
            "{STATE_VERSION} {} {} {} {} {} {}{log_start}\n",
            self.hard.term, self.hard.vote, self.hard.commit, self.snap_index, self.snap_term, self.first_offset,
        );
        text += &conf_lines("", &self.conf);
        text += &conf_lines("snap.", &self.snap_conf);
        for (index, conf) in &self.conf_history {
            text += &conf_lines(&format!("at.{index}."), conf);
        }
        text
    }
}

/// What [`RaftLog`] keeps of a state file's text to tell whether a close would change it.
pub(super) fn text_hash(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// A configuration as `raft.state` lines, each key prefixed.
fn conf_lines(prefix: &str, c: &ConfState) -> String {
    let ids = |v: &[u64]| v.iter().map(|x| format!(" {x}")).collect::<String>();
    format!(
        "{prefix}voters{}\n{prefix}learners{}\n{prefix}voters_outgoing{}\n{prefix}learners_next{}\n{prefix}auto_leave {}\n",
        ids(&c.voters),
        ids(&c.learners),
        ids(&c.voters_outgoing),
        ids(&c.learners_next),
        u8::from(c.auto_leave)
    )
}

pub(super) struct Saved {
    pub(super) hard: HardState,
    pub(super) conf: ConfState,
    pub(super) snap_conf: ConfState,
    pub(super) conf_history: Vec<(u64, ConfState)>,
    pub(super) snap_index: u64,
    pub(super) snap_term: u64,
    pub(super) first_offset: i64,
    pub(super) log_start: Option<i64>,
    /// [`text_hash`] of the file's text.
    pub(super) text_hash: u64,
}

pub(super) fn read_state(dir: &Path) -> io::Result<Option<Saved>> {
    let text = match fs::read_to_string(dir.join(STATE_FILE)) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("{}: unreadable {STATE_FILE}", dir.display()));
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().ok_or_else(bad)?.split_whitespace().collect();
    let (head, log_start) = match head.as_slice() {
        [rest @ .., start] if rest.len() == 7 => (rest, Some(start.parse::<i64>().map_err(|_| bad())?)),
        all => (all, None),
    };
    let [STATE_VERSION, term, vote, commit, snap_index, snap_term, first_offset] = head else {
        return Err(bad());
    };
    let num = |s: &str| s.parse::<u64>().map_err(|_| bad());
    let hard = HardState { term: num(term)?, vote: num(vote)?, commit: num(commit)?, ..Default::default() };
    let mut conf = ConfState::default();
    let mut snap_conf: Option<ConfState> = None;
    let mut history: BTreeMap<u64, ConfState> = BTreeMap::new();
    for line in lines {
        let mut parts = line.split_whitespace();
        let key = parts.next().unwrap_or_default();
        let ids = parts.map(num).collect::<io::Result<Vec<u64>>>()?;
        // "field", "snap.field" or "at.<index>.field".
        let (target, field) = match key.split('.').collect::<Vec<_>>().as_slice() {
            [field] => (&mut conf, *field),
            ["snap", field] => (snap_conf.get_or_insert_with(ConfState::default), *field),
            ["at", index, field] => (history.entry(num(index)?).or_default(), *field),
            _ => continue,
        };
        match field {
            "voters" => target.voters = ids,
            "learners" => target.learners = ids,
            "voters_outgoing" => target.voters_outgoing = ids,
            "learners_next" => target.learners_next = ids,
            "auto_leave" => target.auto_leave = ids.first() == Some(&1),
            _ => {}
        }
    }
    let saved = Saved {
        hard,
        // Files from before the snapshot configuration was kept had no change since.
        snap_conf: snap_conf.unwrap_or_else(|| conf.clone()),
        conf_history: history.into_iter().collect(),
        conf,
        snap_index: num(snap_index)?,
        snap_term: num(snap_term)?,
        first_offset: first_offset.parse::<i64>().map_err(|_| bad())?,
        log_start,
        text_hash: text_hash(&text),
    };
    // Every entry takes at least one offset: a Raft index past the largest offset is not one
    // this store wrote (and would overflow the index arithmetic).
    if saved.snap_index > i64::MAX as u64 {
        return Err(bad());
    }
    let history = saved.conf_history.iter().map(|(_, c)| c);
    if ![&saved.conf, &saved.snap_conf].into_iter().chain(history).all(restorable) {
        return Err(bad());
    }
    Ok(Some(saved))
}

/// Whether raft-rs can start from this configuration: it replays a configuration as
/// changes (raft's `confchange::restore`) when a replica starts or installs a snapshot,
/// and panics when the result is not what it was given (`Raft::new`, `Raft::restore`).
fn restorable(cs: &ConfState) -> bool {
    use raft::eraftpb::{ConfChangeSingle, ConfChangeType};
    use raft::{Changer, ProgressTracker};
    let change = |node_id: &u64, t| {
        let mut c = ConfChangeSingle { node_id: *node_id, ..Default::default() };
        c.set_change_type(t);
        c
    };
    let step = |tracker: &mut ProgressTracker, joint: bool, ccs: &[ConfChangeSingle]| {
        let changed = if joint {
            Changer::new(tracker).enter_joint(cs.auto_leave, ccs)
        } else {
            Changer::new(tracker).simple(ccs)
        };
        changed.map(|(conf, changes)| tracker.apply_conf(conf, changes, 1)).is_ok()
    };
    let mut incoming: Vec<_> = cs.voters_outgoing.iter().map(|id| change(id, ConfChangeType::RemoveNode)).collect();
    incoming.extend(cs.voters.iter().map(|id| change(id, ConfChangeType::AddNode)));
    incoming.extend(cs.learners.iter().chain(&cs.learners_next).map(|id| change(id, ConfChangeType::AddLearnerNode)));
    let mut tracker = ProgressTracker::new(1);
    let replayed = if cs.voters_outgoing.is_empty() {
        incoming.iter().all(|c| step(&mut tracker, false, std::slice::from_ref(c)))
    } else {
        cs.voters_outgoing.iter().all(|id| step(&mut tracker, false, &[change(id, ConfChangeType::AddNode)]))
            && step(&mut tracker, true, &incoming)
    };
    let got = tracker.conf().to_conf_state();
    let same = |a: &[u64], b: &[u64]| a.iter().all(|x| b.contains(x)) && b.iter().all(|x| a.contains(x));
    replayed
        && same(&got.voters, &cs.voters)
        && same(&got.learners, &cs.learners)
        && same(&got.voters_outgoing, &cs.voters_outgoing)
        && same(&got.learners_next, &cs.learners_next)
        && got.auto_leave == cs.auto_leave
}
