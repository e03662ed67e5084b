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
    /// A log whose checkpoint already says so (nothing appended since it was read or
    /// written, all of it synced) returns no file, and its close writes nothing.
    pub fn close_stage(&mut self) -> io::Result<Vec<Arc<File>>> {
        self.active_mut().trim()?;
        let end = self.log_end_offset();
        let values = (end, self.log_start_offset, self.cleaner_point);
        if self.recovery_point == end && self.checkpoint_on_disk == Some(values) {
            self.closing = Some(Closing { values: None, checkpoints: self.checkpoints });
            return Ok(Vec::new());
        }
        let mut f = File::create(self.dir.join(STAGED_CHECKPOINT_FILE))?;
        f.write_all(checkpoint_text(values).as_bytes())?;
        self.closing = Some(Closing { values: Some(values), checkpoints: self.checkpoints });
        Ok(vec![self.sync_handle(), Arc::new(f)])
    }

    /// Second step of [`Log::close_stage`], after the sync; true when it renamed the staged
    /// checkpoint into place (sync the directory then). A log that wrote a checkpoint or
    /// was truncated since closes the one-step way instead.
    pub fn close_commit(&mut self) -> io::Result<bool> {
        match self.closing.take() {
            Some(Closing { values, checkpoints }) if checkpoints == self.checkpoints => {
                let Some(values) = values else { return Ok(false) };
                fs::rename(self.dir.join(STAGED_CHECKPOINT_FILE), self.dir.join(CHECKPOINT_FILE))?;
                self.recovery_point = values.0;
                self.checkpoint_on_disk = Some(values);
                self.checkpoints += 1;
                Ok(true)
            }
            _ => self.close().map(|()| false),
        }
    }

    pub(super) fn write_checkpoint(&mut self) -> io::Result<()> {
        let tmp = self.dir.join(format!("{CHECKPOINT_FILE}.tmp"));
        let mut f = File::create(&tmp)?;
        let values = (self.recovery_point, self.log_start_offset, self.cleaner_point);
        f.write_all(checkpoint_text(values).as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, self.dir.join(CHECKPOINT_FILE))?;
        self.checkpoints += 1;
        File::open(&self.dir)?.sync_all()?;
        self.checkpoint_on_disk = Some(values);
        Ok(())
    }
}

/// The checkpoint file's text, written in one piece (`writeln!` on a file writes each
/// formatted piece with a call of its own).
fn checkpoint_text((recovery_point, log_start, cleaner_point): (i64, i64, i64)) -> String {
    format!("{CHECKPOINT_VERSION} {recovery_point} {log_start} {cleaner_point}\n")
}

/// A staged close ([`Log::close_stage`]): the checkpoint it staged (None: the one in place
/// already says it), and the count of checkpoints written by then.
pub(super) struct Closing {
    values: Option<(i64, i64, i64)>,
    checkpoints: u64,
}

/// (recovery point, log start offset, cleaner point), or None for a missing or unreadable
/// checkpoint, which means "check everything", "start at the first segment" and "all of it
/// is dirty".
pub(super) fn read_checkpoint(dir: &Path) -> io::Result<Option<(i64, i64, i64)>> {
    let text = match fs::read_to_string(dir.join(CHECKPOINT_FILE)) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
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
        return Ok(None);
    };
    match (rp.parse::<i64>(), ls.parse::<i64>(), cp.parse::<i64>()) {
        (Ok(rp), Ok(ls), Ok(cp)) if rp >= 0 && ls >= 0 && cp >= 0 => Ok(Some((rp, ls, cp))),
        _ => {
            warn!(dir = %dir.display(), "unreadable checkpoint; recovering the whole log");
            Ok(None)
        }
    }
}
