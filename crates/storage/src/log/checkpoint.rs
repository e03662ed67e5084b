//! The log's checkpoint: its recovery point (everything below was synced and checked),
//! log start and cleaner point, rewritten atomically (a new file renamed over the old),
//! and the clean shutdown that records the whole log as synced, in one step or in two
//! around a sync shared by many logs.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::Path;
use std::sync::Arc;

use tracing::warn;

use super::Log;

const CHECKPOINT_FILE: &str = "checkpoint";
/// A clean shutdown's checkpoint, written before the sync that makes it true ([`Log::close_stage`]).
const STAGED_CHECKPOINT_FILE: &str = "checkpoint.staged";
const CHECKPOINT_VERSION: &str = "v2";
/// Checkpoints written before the cleaner point existed.
const CHECKPOINT_VERSION_1: &str = "v1";

impl Log {
    /// Clean shutdown: fsync and record that everything up to the log end is good.
    pub fn close(&mut self) -> io::Result<()> {
        self.active_mut().seal()?;
        self.recovery_point = self.log_end_offset();
        self.write_checkpoint()
    }

    /// [`Log::close`] in steps, so that many logs closing together share their syncs: this
    /// writes the checkpoint of a clean shutdown beside the current one, unsynced, and
    /// returns the files to sync (the active segment and that checkpoint). Once they are
    /// synced, [`Log::close_commit`] puts the checkpoint in place; then sync the directory.
    pub fn close_stage(&mut self) -> io::Result<[Arc<File>; 2]> {
        self.active_mut().trim()?;
        let end = self.log_end_offset();
        let mut f = File::create(self.dir.join(STAGED_CHECKPOINT_FILE))?;
        writeln!(f, "{CHECKPOINT_VERSION} {end} {} {}", self.log_start_offset, self.cleaner_point)?;
        self.closing = Some((end, self.checkpoints));
        Ok([self.sync_handle(), Arc::new(f)])
    }

    /// Second step of [`Log::close_stage`], after the sync. A log that wrote a checkpoint or
    /// was truncated since closes the one-step way instead.
    pub fn close_commit(&mut self) -> io::Result<()> {
        match self.closing.take() {
            Some((end, checkpoints)) if checkpoints == self.checkpoints => {
                fs::rename(self.dir.join(STAGED_CHECKPOINT_FILE), self.dir.join(CHECKPOINT_FILE))?;
                self.recovery_point = end;
                self.checkpoints += 1;
                Ok(())
            }
            _ => self.close(),
        }
    }

    pub(super) fn write_checkpoint(&mut self) -> io::Result<()> {
        let tmp = self.dir.join(format!("{CHECKPOINT_FILE}.tmp"));
        let mut f = File::create(&tmp)?;
        writeln!(f, "{CHECKPOINT_VERSION} {} {} {}", self.recovery_point, self.log_start_offset, self.cleaner_point)?;
        f.sync_all()?;
        fs::rename(&tmp, self.dir.join(CHECKPOINT_FILE))?;
        self.checkpoints += 1;
        File::open(&self.dir)?.sync_all()
    }
}

/// (recovery point, log start offset, cleaner point); a missing or unreadable checkpoint
/// means "check everything", "start at the first segment" and "all of it is dirty".
pub(super) fn read_checkpoint(dir: &Path) -> io::Result<(i64, i64, i64)> {
    let text = match fs::read_to_string(dir.join(CHECKPOINT_FILE)) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((0, 0, 0)),
        Err(e) => return Err(e),
    };
    let parts: Vec<&str> = text.split_whitespace().collect();
    let fields = match parts.as_slice() {
        [CHECKPOINT_VERSION, rp, ls, cp] => Some((rp, ls, *cp)),
        [CHECKPOINT_VERSION_1, rp, ls] => Some((rp, ls, "0")),
        _ => None,
    };
    let Some((rp, ls, cp)) = fields else {
        warn!(dir = %dir.display(), "unknown checkpoint format; recovering the whole log");
        return Ok((0, 0, 0));
    };
    match (rp.parse::<i64>(), ls.parse::<i64>(), cp.parse::<i64>()) {
        (Ok(rp), Ok(ls), Ok(cp)) if rp >= 0 && ls >= 0 && cp >= 0 => Ok((rp, ls, cp)),
        _ => {
            warn!(dir = %dir.display(), "unreadable checkpoint; recovering the whole log");
            Ok((0, 0, 0))
        }
    }
}
