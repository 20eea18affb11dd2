//! The checkers, run on a finished simulation:
//!
//! 1. **Acknowledged writes are durable**: every acknowledged write is in its PG's
//!    history (the final primary's log, preceded by the entries the simulator saw
//!    before they were trimmed) at the version its reply carried; replaying the writes
//!    (in version order) through the [model] gives exactly what the
//!    primary's store holds and what the final read-back returned; the log applies only
//!    writes some client sent and that did not fail; a failure it records (an error
//!    entry) is the one the client was answered with, and what the model says the
//!    write does at that point; version order never contradicts real-time order.
//! 2. **Reads are linearizable per object**: each read (and each failed write) must be
//!    explained by some state of the object's logged sequence that is no older than the
//!    last write acknowledged, or state read, before it was invoked, and whose write
//!    was invoked before it completed.
//! 3. **Replicas are byte-identical**: every acting member of every PG holds the same
//!    objects, data, mtimes, xattrs and omap — the PG metadata (info and log) included.
//! 4. (in the simulator) every PG is active+clean within the bound after the faults.
//! 6. **PG stats are true**: the object count and bytes in the primary's PG info
//!    (what `carmine df` and the monitor's PG stats report) are what the PG holds.
//! 5. **Monitors agree**: no two monitors ever publish different maps for one epoch,
//!    each monitor's epochs only grow, and a restarted monitor is no older than what
//!    it published before ([`crate::mon_node::check_monitors`]).

use crate::dump::{self, ObjectDump, PgDump};
use crate::history::{History, OpRecord};
use crate::model::{self, Snapshots, State};
use crate::mon_node::{check_monitors, MonRecord};
use crate::snap_removal::removed_in;
use crate::time::{format_nanos, Nanos};
use carmine_clustermap::OsdMap;
use carmine_osd::SNAP_TRIM_CLIENT;
use carmine_proto::{LogEntry, LogOp};
use carmine_types::{EVersion, Epoch, OsdId, PgId, PoolId, ReqId, SnapId};
use std::collections::{BTreeMap, BTreeSet};

/// Violations reported in full; the rest are counted.
pub const VIOLATIONS_MAX: usize = 40;

/// What the cluster holds at the end of a run.
pub struct FinalState {
    pub map: std::sync::Arc<OsdMap>,
    pub pool: PoolId,
    /// Every PG's acting members with what each holds, the primary first.
    pub pgs: BTreeMap<PgId, Vec<(OsdId, PgDump)>>,
    /// Every PG's whole history of writes, oldest first: the final primary's log,
    /// preceded by what the simulator recorded of the entries trimmed from it
    /// (`crate::log_record`).
    pub logs: BTreeMap<PgId, Vec<LogEntry>>,
    /// `--snap-trim`: each removed snapshot with the first epoch whose map shows it
    /// removed. A primary drops removed snapshots from a write's context and trims
    /// them by its map, and a log entry's version names that map's epoch.
    pub snaps_removed_at: BTreeMap<u64, Epoch>,
}

/// One state in an object's history: the initial absence, then one per logged write.
#[derive(Debug)]
struct Position {
    version: EVersion,
    reqid: Option<ReqId>,
    invoked: Nanos,
    /// The head.
    state: State,
    /// The clones kept for snapshots, and the context seq written under.
    snaps: Snapshots,
}

impl Position {
    /// What a read at `snap` sees in this state.
    fn at(&self, snap: SnapId) -> State {
        self.snaps.resolve(&self.state, snap)
    }
}

type Timelines = BTreeMap<String, Vec<Position>>;

/// Runs checkers 1, 2, 3, 5 and 6.
pub fn check(history: &History, end: &FinalState, mons: &MonRecord) -> Vec<String> {
    let mut violations = Vec::new();
    let timelines = durable_writes(history, end, &mut violations);
    linearizable_reads(history, &timelines, &mut violations);
    replicas_identical(end, &mut violations);
    stats_match_content(end, &mut violations);
    check_monitors(mons, &mut violations);
    if violations.len() > VIOLATIONS_MAX {
        let more = violations.len() - VIOLATIONS_MAX;
        violations.truncate(VIOLATIONS_MAX);
        violations.push(format!("... and {more} more violations"));
    }
    violations
}

// --- 1. durability --------------------------------------------------------------

fn durable_writes(history: &History, end: &FinalState, out: &mut Vec<String>) -> Timelines {
    let mut per_object: BTreeMap<String, Vec<LogEntry>> = BTreeMap::new();
    for entries in end.logs.values() {
        for entry in entries {
            per_object
                .entry(entry.oid.clone())
                .or_default()
                .push(entry.clone());
        }
    }
    for op in history.ops() {
        per_object.entry(op.oid.clone()).or_default();
    }
    let mut timelines = Timelines::new();
    for (oid, entries) in per_object {
        let timeline = replay(&oid, &entries, history, &end.snaps_removed_at, out);
        check_acked_in_log(&oid, &timeline, history, out);
        check_real_time_order(&oid, &timeline, history, out);
        check_final_content(&oid, &timeline, history, end, out);
        timelines.insert(oid, timeline);
    }
    timelines
}

fn replay(
    oid: &str,
    entries: &[LogEntry],
    history: &History,
    snaps_removed_at: &BTreeMap<u64, Epoch>,
    out: &mut Vec<String>,
) -> Vec<Position> {
    let mut timeline = vec![Position {
        version: EVersion::ZERO,
        reqid: None,
        invoked: 0,
        state: None,
        snaps: Snapshots::default(),
    }];
    for entry in entries {
        let removed = removed_in(snaps_removed_at, entry.version.epoch);
        if entry.reqid.client == SNAP_TRIM_CLIENT {
            let position = replay_trim(oid, entry, &timeline, &removed, out);
            timeline.push(position);
            continue;
        }
        let Some(op) = history.get(entry.reqid) else {
            out.push(format!(
                "{oid}: the log holds {} at {}, which no client sent",
                entry.reqid, entry.version
            ));
            continue;
        };
        if let LogOp::Error(logged) = &entry.op {
            let before = &timeline
                .last()
                .expect("starts with the initial state")
                .state;
            check_error_entry(oid, entry, logged, op, before, out);
            continue;
        }
        if let Some(Err(error)) = op.reply().map(|r| &r.result) {
            out.push(format!(
                "{oid}: write {} failed with '{error}' yet the log applied it at {}",
                entry.reqid, entry.version
            ));
        }
        let last = timeline.last().expect("starts with the initial state");
        let (before, mut snaps) = (&last.state, last.snaps.clone());
        let state = match model::execute(before, &op.ops, entry.version.version, op.mtime_ns) {
            Ok(outcome) => {
                // A write that fails changes nothing, its clone included. The
                // primary drops the snapshots its map shows removed from the
                // writer's context (the writer may not know yet).
                let mut snapc = op.snapc.clone();
                snapc.snaps.retain(|snap| !removed.contains(snap));
                snaps.before_write(before, &snapc);
                snaps.after_write(&outcome.after);
                outcome.after
            }
            Err(error) => {
                out.push(format!(
                    "{oid}: logged write {} at {} fails in the model: {error}",
                    entry.reqid, entry.version
                ));
                before.clone()
            }
        };
        if (entry.op == LogOp::Delete) != state.is_none() {
            out.push(format!(
                "{oid}: log entry {} says {:?}, the model disagrees",
                entry.version, entry.op
            ));
        }
        timeline.push(Position {
            version: entry.version,
            reqid: Some(entry.reqid),
            invoked: op.invoked,
            state,
            snaps,
        });
    }
    timeline
}

/// A snapshot trim the primary logged: it drops the snapshots its map showed removed
/// from the object's clones, and must have had some to drop. It changes no head, so
/// it explains whatever the state before it explains.
fn replay_trim(
    oid: &str,
    entry: &LogEntry,
    timeline: &[Position],
    removed: &BTreeSet<u64>,
    out: &mut Vec<String>,
) -> Position {
    let last = timeline.last().expect("starts with the initial state");
    let mut snaps = last.snaps.clone();
    if !snaps.trim(removed) {
        out.push(format!(
            "{oid}: the log holds a snapshot trim at {} that trims nothing (removed at e{}: {removed:?})",
            entry.version, entry.version.epoch.0
        ));
    }
    snaps.after_write(&last.state);
    if (entry.op == LogOp::Delete) != last.state.is_none() {
        out.push(format!(
            "{oid}: trim entry {} says {:?}, the model disagrees",
            entry.version, entry.op
        ));
    }
    Position {
        version: entry.version,
        reqid: Some(entry.reqid),
        invoked: last.invoked,
        state: last.state.clone(),
        snaps,
    }
}

/// An error entry changes nothing; the client must have been answered with its error
/// (or not at all), and the model must fail the write the same way on the state it
/// was ordered after. Errors the model cannot produce (storage errors, space and
/// size limits, invalid requests) are taken as they come.
fn check_error_entry(
    oid: &str,
    entry: &LogEntry,
    logged: &carmine_proto::OpError,
    op: &OpRecord,
    before: &State,
    out: &mut Vec<String>,
) {
    use carmine_proto::OpError;
    match op.reply().map(|r| &r.result) {
        Some(Ok(())) => out.push(format!(
            "{oid}: write {} succeeded yet the log recorded its failure '{logged}' at {}",
            entry.reqid, entry.version
        )),
        Some(Err(answered)) if answered != logged => out.push(format!(
            "{oid}: write {} was answered '{answered}' but the log recorded '{logged}' at {}",
            entry.reqid, entry.version
        )),
        _ => {}
    }
    let modelled = !matches!(
        logged,
        OpError::Io(_) | OpError::NoSpace | OpError::TooLarge { .. } | OpError::Invalid(_)
    );
    if !modelled {
        return;
    }
    match model::execute(before, &op.ops, entry.version.version, op.mtime_ns) {
        Err(expected) if expected == *logged => {}
        result => out.push(format!(
            "{oid}: the log recorded '{logged}' for {} at {}, the model says {:?}",
            entry.reqid,
            entry.version,
            result.map(|_| ())
        )),
    }
}

fn check_acked_in_log(oid: &str, timeline: &[Position], history: &History, out: &mut Vec<String>) {
    for op in history.ops().iter().filter(|op| op.oid == oid) {
        let Some(reply) = op.acked_write() else {
            continue;
        };
        let logged = timeline.iter().find(|p| p.reqid == Some(op.reqid));
        match logged {
            None => out.push(format!(
                "{oid}: acknowledged write {} (version {}, acked at {}) is lost",
                op.reqid,
                reply.version,
                format_nanos(op.completed.unwrap_or_default())
            )),
            Some(position) if position.version != reply.version => out.push(format!(
                "{oid}: write {} was acknowledged at version {} but logged at {}",
                op.reqid, reply.version, position.version
            )),
            Some(_) => {}
        }
    }
}

/// A write acknowledged before another was invoked must have the lower version.
fn check_real_time_order(
    oid: &str,
    timeline: &[Position],
    history: &History,
    out: &mut Vec<String>,
) {
    let mut latest_invoked: Option<(Nanos, ReqId)> = None;
    for position in &timeline[1..] {
        let reqid = position.reqid.expect("logged positions have a request");
        let completed = history
            .get(reqid)
            .and_then(|op| op.acked_write().and(op.completed));
        if let (Some(completed), Some((invoked, earlier))) = (completed, latest_invoked) {
            if completed < invoked {
                out.push(format!(
                    "{oid}: {reqid} (version {}) was acked at {} before {earlier} was invoked at {}, yet orders after it",
                    position.version,
                    format_nanos(completed),
                    format_nanos(invoked)
                ));
            }
        }
        if latest_invoked.is_none_or(|(invoked, _)| position.invoked > invoked) {
            latest_invoked = Some((position.invoked, reqid));
        }
    }
}

fn check_final_content(
    oid: &str,
    timeline: &[Position],
    history: &History,
    end: &FinalState,
    out: &mut Vec<String>,
) {
    let last = timeline.last().expect("starts with the initial state");
    let Some(pgid) = end.map.object_to_pg(end.pool, oid) else {
        return;
    };
    let Some((primary, Some(objects))) = end.pgs.get(&pgid).and_then(|m| m.first()) else {
        out.push(format!("{oid}: the primary of {pgid} holds no collection"));
        return;
    };
    // A whiteout head holds only its clones' snapshot set: the object does not exist.
    // One with no clones left should have gone with the last of them.
    let whiteout = objects.get(oid).is_some_and(|object| object.is_whiteout());
    if whiteout && last.snaps.clones.is_empty() {
        out.push(format!(
            "{oid}: {primary} holds a whiteout head after healing, with no clones to keep"
        ));
    }
    let head = objects.get(oid).filter(|object| !object.is_whiteout());
    if let Some(difference) = model_vs_store(&last.state, head) {
        out.push(format!(
            "{oid}: {primary} holds the wrong content after healing: {difference}"
        ));
    }
    let prefix = dump::clone_prefix(oid);
    let stored_clones: BTreeMap<&str, &ObjectDump> = objects
        .range(prefix.clone()..)
        .take_while(|(key, _)| key.starts_with(&prefix))
        .map(|(key, object)| (key.as_str(), object))
        .collect();
    let modelled: Vec<String> = last
        .snaps
        .clones
        .iter()
        .map(|clone| dump::clone_key(oid, clone.id))
        .collect();
    for key in stored_clones
        .keys()
        .filter(|key| !modelled.iter().any(|m| m == *key))
    {
        out.push(format!(
            "{oid}: {primary} holds clone {key} after healing, which no write made"
        ));
    }
    for (clone, key) in last.snaps.clones.iter().zip(&modelled) {
        let model = Some(clone.object.clone());
        if let Some(difference) = model_vs_store(&model, stored_clones.get(key.as_str()).copied()) {
            out.push(format!(
                "{oid}: {primary}'s clone {} (snaps {:?}) is wrong after healing: {difference}",
                clone.id, clone.snaps
            ));
        }
    }
    for op in history
        .ops()
        .iter()
        .filter(|op| op.oid == oid && op.final_read)
    {
        let Some(reply) = op.reply() else {
            out.push(format!(
                "{oid}: the final read-back {} got no reply: {:?}",
                op.reqid, op.result
            ));
            continue;
        };
        if !explains(op, reply, &last.state) {
            out.push(format!(
                "{oid}: the final read-back returned {:?} v{}, expected the state after {}",
                reply.result, reply.user_version, last.version
            ));
        }
    }
}

fn model_vs_store(model: &State, stored: Option<&ObjectDump>) -> Option<String> {
    match (model, stored) {
        (None, None) => None,
        (Some(_), None) => Some("the object is missing".into()),
        (None, Some(_)) => Some("the object exists but should not".into()),
        (Some(model), Some(stored)) => {
            if model.data[..] != stored.data[..] {
                Some(format!(
                    "data {:?} instead of {:?}",
                    stored.data, model.data
                ))
            } else if model.xattrs != stored.user_xattrs() {
                Some(format!(
                    "xattrs {:?} instead of {:?}",
                    stored.user_xattrs(),
                    model.xattrs
                ))
            } else if model
                .omap
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<Vec<_>>()
                != stored.omap
            {
                Some(format!(
                    "omap {:?} instead of {:?}",
                    stored.omap, model.omap
                ))
            } else if model.mtime_ns != stored.mtime_ns {
                Some(format!(
                    "mtime {} instead of {}",
                    stored.mtime_ns, model.mtime_ns
                ))
            } else {
                None
            }
        }
    }
}

// --- 2. linearizable reads -------------------------------------------------------

/// Whether `reply` is what `op` gets from an object in `state`.
fn explains(op: &OpRecord, reply: &carmine_proto::OsdOpReply, state: &State) -> bool {
    match (&reply.result, model::execute(state, &op.ops, 0, 0)) {
        (Ok(()), Ok(outcome)) => {
            let version = state.as_ref().map_or(0, |object| object.user_version);
            outcome.outputs == reply.outputs && version == reply.user_version
        }
        (Err(error), Err(expected)) => *error == expected,
        _ => false,
    }
}

fn linearizable_reads(history: &History, timelines: &Timelines, out: &mut Vec<String>) {
    for (oid, timeline) in timelines {
        let ops: Vec<&OpRecord> = history.ops().iter().filter(|op| &op.oid == oid).collect();
        // (completed, position) of what was observed: acked writes, then reads.
        let mut seen: Vec<(Nanos, usize)> = ops
            .iter()
            .filter_map(|op| {
                op.acked_write()?;
                let index = timeline.iter().position(|p| p.reqid == Some(op.reqid))?;
                Some((op.completed?, index))
            })
            .collect();
        // An EIO ("no readable copy on any acting OSD": the good copy is on an OSD that
        // is down) says nothing about the object's state: it is unavailability, which
        // the read-back after healing checks, not a value to explain. So does a
        // NoSpace (a member of the PG is full: the space faults), which a primary
        // answers before it runs the op.
        let unavailable = |op: &OpRecord| {
            op.reply().is_some_and(|r| {
                use carmine_proto::OpError;
                matches!(r.result, Err(OpError::Io(_) | OpError::NoSpace))
            })
        };
        let mut checked: Vec<&OpRecord> = ops
            .into_iter()
            .filter(|op| op.reply().is_some() && op.acked_write().is_none() && !unavailable(op))
            .collect();
        checked.sort_by_key(|op| (op.completed, op.reqid));
        for op in checked {
            check_one_read(oid, op, timeline, &mut seen, out);
        }
    }
}

fn check_one_read(
    oid: &str,
    op: &OpRecord,
    timeline: &[Position],
    seen: &mut Vec<(Nanos, usize)>,
    out: &mut Vec<String>,
) {
    let reply = op.reply().expect("filtered");
    let completed = op.completed.expect("has a reply");
    let floor = seen
        .iter()
        .filter(|(at, _)| *at < op.invoked)
        .map(|(_, index)| *index)
        .max()
        .unwrap_or(0);
    let found = (floor..timeline.len())
        .filter(|&index| timeline[index].invoked <= completed)
        .find(|&index| explains(op, reply, &timeline[index].at(op.snapid)));
    match found {
        Some(index) if !op.is_write() => seen.push((completed, index)),
        Some(_) => {}
        None => out.push(format!(
            "{oid}: {} {:?} invoked at {} and completed at {} returned {:?} v{}, which no state since {} explains",
            op.reqid,
            op.ops.iter().map(short_op).collect::<Vec<_>>(),
            format_nanos(op.invoked),
            format_nanos(completed),
            reply.result,
            reply.user_version,
            timeline[floor].version
        )),
    }
}

fn short_op(op: &carmine_proto::OpCode) -> String {
    let text = format!("{op:?}");
    text.split([' ', '{', '('])
        .next()
        .unwrap_or_default()
        .to_string()
}

// --- 3. identical replicas -------------------------------------------------------

fn replicas_identical(end: &FinalState, out: &mut Vec<String>) {
    for (pgid, members) in &end.pgs {
        let (first_osd, first) = &members[0];
        for (osd, other) in &members[1..] {
            if let Some(difference) = compare_dumps(first, other) {
                out.push(format!(
                    "{pgid}: replicas differ, {first_osd} vs {osd}: {difference}"
                ));
            }
        }
    }
}

// --- 6. PG stats ----------------------------------------------------------------

/// The primary's info counts the PG's objects (the metadata object aside) and their
/// bytes, and is sure of them; the replicas agree with it by checker 3 (unless they
/// hold theirs in doubt). As the OSD counts them today, that
/// is the heads that exist: clones and whiteout heads are not counted (Ceph counts
/// clones in `num_objects` and `num_object_clones`).
fn stats_match_content(end: &FinalState, out: &mut Vec<String>) {
    for (pgid, members) in &end.pgs {
        let (osd, dump) = &members[0];
        let Some(objects) = dump else { continue };
        let info = match dump::pg_info(dump) {
            Ok(Some(info)) => info,
            Ok(None) => continue,
            Err(error) => {
                out.push(format!("{pgid} on {osd}: {error}"));
                continue;
            }
        };
        // Heads that exist and snapshot clones, as Ceph counts them; a whiteout head
        // is not an object.
        let held = objects.iter().filter(|(name, object)| {
            name.as_str() != dump::PGMETA_NAME
                && (dump::is_clone_key(name) || !object.is_whiteout())
        });
        let count = held.clone().count() as u64;
        let bytes: u64 = held.map(|(_, object)| object.size_bytes).sum();
        // A clean PG's primary holds every object, so it has counted any counts a
        // rollback left in doubt.
        if info.stats_invalid {
            out.push(format!(
                "{pgid} on {osd}: PG info holds its counts in doubt ({} objects of {} bytes \
                 said, {count} of {bytes} held)",
                info.object_count, info.data_bytes
            ));
        } else if (info.object_count, info.data_bytes) != (count, bytes) {
            out.push(format!(
                "{pgid} on {osd}: PG info says {} objects of {} bytes, the PG holds {count} \
                 objects of {bytes} bytes",
                info.object_count, info.data_bytes
            ));
        }
    }
}

fn compare_dumps(a_dump: &PgDump, b_dump: &PgDump) -> Option<String> {
    let (a, b) = match (a_dump, b_dump) {
        (Some(a), Some(b)) => (a, b),
        (None, None) => return None,
        (None, Some(_)) => return Some("the first has no collection".into()),
        (Some(_), None) => return Some("the second has no collection".into()),
    };
    if let Some(difference) = compare_infos(a_dump, b_dump) {
        return Some(difference);
    }
    for (name, object) in a {
        match b.get(name) {
            None => return Some(format!("object {name:?} only on the first")),
            Some(other) if name == dump::PGMETA_NAME => {
                if let Some(difference) = compare_pgmeta(object, other) {
                    return Some(difference);
                }
            }
            Some(other) if other != object => {
                return Some(format!(
                    "object {name:?} differs: {}",
                    object_difference(object, other)
                ))
            }
            Some(_) => {}
        }
    }
    b.keys()
        .find(|name| !a.contains_key(*name))
        .map(|name| format!("object {name:?} only on the second"))
}

fn compare_infos(a: &PgDump, b: &PgDump) -> Option<String> {
    match (dump::pg_info(a), dump::pg_info(b)) {
        (Ok(Some(a)), Ok(Some(b))) => {
            let counts = (dump::sure_counts(&a), dump::sure_counts(&b));
            let (a, b) = (dump::shared_info(&a), dump::shared_info(&b));
            if a != b {
                return Some(format!("PG info (last_update, log_tail) {a:?} vs {b:?}"));
            }
            match counts {
                (Some(a), Some(b)) if a != b => {
                    Some(format!("PG info (objects, bytes) {a:?} vs {b:?}"))
                }
                _ => None,
            }
        }
        (Ok(None), Ok(None)) => None,
        (Err(error), _) | (_, Err(error)) => Some(error),
        _ => Some("only one has a PG info".into()),
    }
}

/// The metadata objects, without the info (compared by [`compare_infos`]) and without
/// the remembered requests of trimmed entries ("dups"), which depend on each copy's
/// own history (a backfilled copy starts with none).
fn compare_pgmeta(a: &ObjectDump, b: &ObjectDump) -> Option<String> {
    let without_info = |object: &ObjectDump| {
        let mut object = object.clone();
        object
            .omap
            .retain(|(key, _)| &key[..] != dump::INFO_KEY && !key.starts_with(b"dup."));
        object
    };
    let (a, b) = (without_info(a), without_info(b));
    (a != b).then(|| format!("PG metadata differs: {}", object_difference(&a, &b)))
}

fn object_difference(a: &ObjectDump, b: &ObjectDump) -> String {
    if a.data != b.data {
        format!("data {:?} vs {:?}", a.data, b.data)
    } else if a.xattrs != b.xattrs {
        "xattrs".into()
    } else if a.omap != b.omap {
        let keys = |dump: &ObjectDump| dump.omap.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        format!("omap keys {:?} vs {:?}", keys(a), keys(b))
    } else {
        format!("mtime {} vs {}", a.mtime_ns, b.mtime_ns)
    }
}
