//! The simulator's own record of PG log entries, so that the checkers do not depend on
//! logs that were never trimmed.
//!
//! After every call into an OSD shard the simulator looks at each of the shard's PGs;
//! where a log's newest entry changed it records, walking back from the newest, every
//! entry it has not seen with the entry before it in that log. A new entry is always
//! appended by a primary after the entry it follows, so the record learns each
//! entry's predecessor when the entry first appears, even if every log trims it later.
//!
//! At the end, a PG's whole authoritative history is the final primary's log preceded
//! by the chain of predecessors of its oldest entry. Entries that a copy rolled back
//! (divergent, never acknowledged) are in the record but on no chain.
//!
//! Two invariants are checked on the way: one version never names two different
//! entries, and an entry never follows two different predecessors (if two logs hold
//! the same entry they agree on what came before it).

use carmine_proto::LogEntry;
use carmine_types::{EVersion, OsdId, PgId};
use std::collections::BTreeMap;

/// Conflicts reported in full; further ones are counted.
const CONFLICTS_MAX: usize = 20;

#[derive(Debug)]
struct Seen {
    entry: LogEntry,
    /// The version of the entry before it (ZERO for a PG's first write); `None` while
    /// it has only been seen as the oldest entry of a log.
    prev: Option<EVersion>,
}

#[derive(Debug, Default)]
pub struct LogRecord {
    pgs: BTreeMap<PgId, BTreeMap<EVersion, Seen>>,
    /// The newest entry of each copy's log at the last look.
    heads: BTreeMap<(OsdId, PgId), EVersion>,
    conflicts: Vec<String>,
    conflicts_total: usize,
}

impl LogRecord {
    /// Records what is new in `osd`'s log of `pgid` (`entries` oldest first).
    pub fn observe<'a>(
        &mut self,
        osd: OsdId,
        pgid: PgId,
        entries: impl DoubleEndedIterator<Item = &'a LogEntry>,
    ) {
        let mut newest_first = entries.rev().peekable();
        let head = newest_first
            .peek()
            .map_or(EVersion::ZERO, |entry| entry.version);
        if self.heads.insert((osd, pgid), head) == Some(head) {
            return;
        }
        while let Some(entry) = newest_first.next() {
            let prev = match newest_first.peek() {
                Some(before) => Some(before.version),
                // A PG's versions count up from 1 along its history.
                None if entry.version.version == 1 => Some(EVersion::ZERO),
                None => None,
            };
            if self.record(pgid, entry, prev) {
                break;
            }
        }
    }

    /// Records one entry; true when it was known with its predecessor already (so
    /// everything before it in this log is known too).
    fn record(&mut self, pgid: PgId, entry: &LogEntry, prev: Option<EVersion>) -> bool {
        let seen = self.pgs.entry(pgid).or_default();
        let Some(known) = seen.get_mut(&entry.version) else {
            seen.insert(
                entry.version,
                Seen {
                    entry: entry.clone(),
                    prev,
                },
            );
            return false;
        };
        let mut conflict = None;
        if known.entry != *entry {
            conflict = Some(format!(
                "{pgid}: two different log entries at {}: {} on {} and {} on {}",
                entry.version, known.entry.reqid, known.entry.oid, entry.reqid, entry.oid
            ));
        }
        let was_complete = known.prev.is_some();
        match (known.prev, prev) {
            (None, Some(_)) => known.prev = prev,
            (Some(a), Some(b)) if a != b => {
                conflict = Some(format!(
                    "{pgid}: log entry {} follows {a} in one log and {b} in another",
                    entry.version
                ))
            }
            _ => {}
        }
        if let Some(conflict) = conflict {
            self.conflicts_total += 1;
            if self.conflicts.len() < CONFLICTS_MAX {
                self.conflicts.push(conflict);
            }
        }
        was_complete
    }

    /// The log invariants broken during the run.
    pub fn conflicts(&self) -> Vec<String> {
        let mut conflicts = self.conflicts.clone();
        if self.conflicts_total > self.conflicts.len() {
            conflicts.push(format!(
                "... and {} more log conflicts",
                self.conflicts_total - self.conflicts.len()
            ));
        }
        conflicts
    }

    /// `pgid`'s whole history: the entries before `final_log` (the final primary's
    /// log, oldest first), followed by it. `last_update` is the primary's newest
    /// version, used when its log is empty.
    pub fn history(
        &self,
        pgid: PgId,
        final_log: Vec<LogEntry>,
        last_update: EVersion,
    ) -> Result<Vec<LogEntry>, String> {
        let empty = BTreeMap::new();
        let seen = self.pgs.get(&pgid).unwrap_or(&empty);
        let lost = |version: EVersion| {
            format!("{pgid}: the simulator lost track of the history before {version}")
        };
        // An entry first seen as the oldest of a log (several appended in one call
        // and trimmed at once) has no recorded predecessor; versions count up by one
        // along a history, so a single recorded entry one version earlier (and no
        // newer epoch) must be it. Two candidates (a divergent one) stay unknown.
        let prev_of = |version: EVersion, known: Option<EVersion>| {
            known.or_else(|| {
                if version.version == 1 {
                    return Some(EVersion::ZERO);
                }
                let mut candidates = seen
                    .keys()
                    .filter(|v| v.version + 1 == version.version && v.epoch <= version.epoch);
                match (candidates.next(), candidates.next()) {
                    (Some(&only), None) => Some(only),
                    _ => None,
                }
            })
        };
        let mut earlier = Vec::new();
        let mut next = match final_log.first() {
            Some(oldest) => {
                let known = seen.get(&oldest.version).and_then(|s| s.prev);
                prev_of(oldest.version, known).ok_or_else(|| lost(oldest.version))?
            }
            None => last_update,
        };
        while next != EVersion::ZERO {
            let known = seen.get(&next).ok_or_else(|| lost(next))?;
            earlier.push(known.entry.clone());
            next = prev_of(next, known.prev).ok_or_else(|| lost(next))?;
            if earlier.len() > seen.len() {
                return Err(format!("{pgid}: the recorded history has a cycle"));
            }
        }
        earlier.reverse();
        earlier.extend(final_log);
        Ok(earlier)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use carmine_proto::LogOp;
    use carmine_types::{Epoch, ReqId};

    fn entry(epoch: u32, version: u64, oid: &str) -> LogEntry {
        LogEntry {
            version: EVersion {
                epoch: Epoch(epoch),
                version,
            },
            prior_version: EVersion::ZERO,
            reqid: ReqId {
                client: 1,
                tid: version,
            },
            oid: oid.into(),
            op: LogOp::Modify,
            user_version: version,
        }
    }

    fn pgid() -> PgId {
        PgId {
            pool: carmine_types::PoolId(1),
            seed: 0,
        }
    }

    #[test]
    fn the_history_survives_trimming_and_skips_divergent_entries() {
        let mut record = LogRecord::default();
        let osd = OsdId(0);
        let (e1, e2, e3) = (entry(2, 1, "a"), entry(2, 2, "b"), entry(2, 3, "c"));
        record.observe(osd, pgid(), [e1.clone()].iter());
        record.observe(osd, pgid(), [e1.clone(), e2.clone()].iter());
        // A divergent entry on another copy, later rolled back.
        let divergent = entry(2, 3, "x");
        let divergent = LogEntry {
            version: EVersion {
                epoch: Epoch(2),
                version: 4,
            },
            ..divergent
        };
        record.observe(OsdId(1), pgid(), [e2.clone(), divergent].iter());
        // The log trims e1 and e2 away.
        let e4 = entry(5, 4, "d");
        record.observe(osd, pgid(), [e2.clone(), e3.clone()].iter());
        record.observe(osd, pgid(), [e3.clone(), e4.clone()].iter());
        let history = record
            .history(pgid(), vec![e4.clone()], e4.version)
            .unwrap();
        assert_eq!(history, vec![e1, e2, e3, e4]);
        assert!(record.conflicts().is_empty());
    }

    #[test]
    fn a_gap_is_reported_not_papered_over() {
        let mut record = LogRecord::default();
        let (e5, e6) = (entry(2, 5, "a"), entry(2, 6, "b"));
        record.observe(OsdId(0), pgid(), [e5, e6.clone()].iter());
        let error = record
            .history(pgid(), vec![e6], EVersion::ZERO)
            .unwrap_err();
        assert!(error.contains("lost track"), "{error}");
    }

    #[test]
    fn a_lone_entry_one_version_earlier_is_the_predecessor() {
        let mut record = LogRecord::default();
        let (e1, e2, e3) = (entry(2, 1, "a"), entry(2, 2, "b"), entry(3, 3, "c"));
        record.observe(OsdId(0), pgid(), [e1.clone()].iter());
        // e2 and e3 each seen alone (appended and trimmed within one call).
        record.observe(OsdId(0), pgid(), [e2.clone()].iter());
        record.observe(OsdId(0), pgid(), [e3.clone()].iter());
        let history = record
            .history(pgid(), vec![e3.clone()], e3.version)
            .unwrap();
        assert_eq!(history, vec![e1, e2, e3.clone()]);
        // A divergent twin of e2 makes it ambiguous: reported, not guessed.
        record.observe(OsdId(1), pgid(), [entry(3, 2, "x")].iter());
        assert!(record.history(pgid(), vec![e3], EVersion::ZERO).is_err());
    }

    #[test]
    fn two_entries_at_one_version_are_a_conflict() {
        let mut record = LogRecord::default();
        record.observe(OsdId(0), pgid(), [entry(2, 1, "a")].iter());
        record.observe(OsdId(1), pgid(), [entry(2, 1, "b")].iter());
        assert_eq!(record.conflicts().len(), 1);
    }
}
