//! A seeded random workload checked against a reference model: every op type on a few
//! objects, many requests in flight, messages delivered in a random interleaving that
//! keeps each link's order. Every reply must match the model, successful writes must
//! be answered in version order per PG, and at the end every replica holds exactly
//! what the model says.
//!
//! Each reply is predicted when its request is sent: the primary applies writes in
//! arrival order, and a read waits for the writes in flight to its object, so the
//! model is exact as long as no write to an object is sent while a read of it is
//! outstanding, which the generator ensures.

mod harness;

use bytes::Bytes;
use carmine_proto::{OpCode, OpError, OpOutput, OsdOp, OsdOpReply};
use carmine_types::limits::LIST_ENTRIES_MAX;
use carmine_types::{PgId, ReqId};
use harness::{bytes, Cluster, Config};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, HashMap};

const OBJECT_COUNT: usize = 10;
const OPS_PER_RUN: usize = 200;
const SEEDS: std::ops::Range<u64> = 0..12;

#[derive(Debug, Clone, Default, PartialEq)]
struct Object {
    data: Vec<u8>,
    xattrs: BTreeMap<String, Bytes>,
    omap: BTreeMap<Bytes, Bytes>,
    mtime_ns: u64,
    user_version: u64,
}

/// The expected reply to one request.
#[derive(Debug, Clone, PartialEq)]
struct Expected {
    result: Result<(), OpError>,
    outputs: Vec<OpOutput>,
    user_version: u64,
}

#[derive(Debug, Default)]
struct Model {
    objects: BTreeMap<String, Object>,
    pg_versions: BTreeMap<PgId, u64>,
}

fn read_op(state: &Option<Object>, op: &OpCode) -> Result<OpOutput, OpError> {
    let object = state.as_ref().ok_or(OpError::NotFound)?;
    Ok(match op {
        OpCode::Read { offset, length } => {
            let size = object.data.len() as u64;
            let length = if *length == 0 {
                size.saturating_sub(*offset)
            } else {
                *length
            };
            let start = (*offset).min(size) as usize;
            let end = offset.saturating_add(length).min(size) as usize;
            OpOutput::Data(bytes(&object.data[start..end.max(start)]))
        }
        OpCode::Stat => OpOutput::Stat {
            size_bytes: object.data.len() as u64,
            mtime_ns: object.mtime_ns,
            version: object.user_version,
        },
        OpCode::GetXattr { name } => OpOutput::Xattr(
            object
                .xattrs
                .get(name)
                .cloned()
                .ok_or(OpError::NoSuchXattr)?,
        ),
        OpCode::GetXattrs => OpOutput::Xattrs(object.xattrs.clone()),
        OpCode::OmapGetVals { after, max_entries } => {
            let max = (*max_entries as usize).clamp(1, LIST_ENTRIES_MAX);
            let mut entries: Vec<(Bytes, Bytes)> = object
                .omap
                .iter()
                .filter(|(key, _)| after.as_ref().is_none_or(|after| *key > after))
                .map(|(k, v)| (k.clone(), v.clone()))
                .take(max + 1)
                .collect();
            let more = entries.len() > max;
            entries.truncate(max);
            OpOutput::Omap { entries, more }
        }
        OpCode::CmpXattrEq { name, value } => {
            if object.xattrs.get(name) != Some(value) {
                return Err(OpError::Canceled);
            }
            OpOutput::None
        }
        OpCode::AssertVersion { version } => {
            if object.user_version != *version {
                return Err(OpError::VersionMismatch {
                    expected: *version,
                    actual: object.user_version,
                });
            }
            OpOutput::None
        }
        OpCode::AssertExists => OpOutput::None,
        other => unreachable!("not generated: {other:?}"),
    })
}

fn write_op(state: &mut Option<Object>, op: &OpCode) -> Result<(), OpError> {
    let need = |state: &Option<Object>| state.is_some().then_some(()).ok_or(OpError::NotFound);
    match op {
        OpCode::Create { exclusive } => {
            if state.is_some() && *exclusive {
                return Err(OpError::Exists);
            }
            state.get_or_insert_with(Object::default);
        }
        OpCode::WriteFull { data } => {
            state.get_or_insert_with(Object::default).data = data.to_vec()
        }
        OpCode::Write { offset, data } => {
            let object = state.get_or_insert_with(Object::default);
            let end = *offset as usize + data.len();
            if object.data.len() < end {
                object.data.resize(end, 0);
            }
            object.data[*offset as usize..end].copy_from_slice(data);
        }
        OpCode::Append { data } => state
            .get_or_insert_with(Object::default)
            .data
            .extend_from_slice(data),
        OpCode::Truncate { size_bytes } => state
            .get_or_insert_with(Object::default)
            .data
            .resize(*size_bytes as usize, 0),
        OpCode::Zero { offset, length } => {
            let object = state.as_mut().expect("generated only for existing objects");
            let size = object.data.len();
            let start = (*offset as usize).min(size);
            let end = (*offset as usize + *length as usize).min(size);
            object.data[start..end].fill(0);
        }
        OpCode::Remove => {
            need(state)?;
            *state = None;
        }
        OpCode::SetXattr { name, value } => {
            state
                .get_or_insert_with(Object::default)
                .xattrs
                .insert(name.clone(), value.clone());
        }
        OpCode::RmXattr { name } => {
            need(state)?;
            let object = state.as_mut().expect("checked");
            object.xattrs.remove(name).ok_or(OpError::NoSuchXattr)?;
        }
        OpCode::OmapSet { entries } => {
            let object = state.get_or_insert_with(Object::default);
            object.omap.extend(entries.iter().cloned());
        }
        OpCode::OmapRm { keys } => {
            need(state)?;
            let object = state.as_mut().expect("checked");
            for key in keys {
                object.omap.remove(key);
            }
        }
        OpCode::OmapClear => {
            need(state)?;
            state.as_mut().expect("checked").omap.clear();
        }
        other => unreachable!("not generated: {other:?}"),
    }
    Ok(())
}

impl Model {
    /// Applies `op` as the primary will, and returns the reply it will give.
    fn apply(&mut self, op: &OsdOp) -> Expected {
        let before = self.objects.get(&op.oid).cloned();
        let mut after = before.clone();
        let mut outputs = Vec::new();
        let mut wrote = false;
        for sub in &op.ops {
            let result = if sub.is_write() {
                wrote = true;
                write_op(&mut after, sub).map(|()| OpOutput::None)
            } else {
                read_op(&before, sub)
            };
            match result {
                Ok(output) => outputs.push(output),
                Err(error) => {
                    // A failed write is logged (an error entry): it takes a PG
                    // version and leaves the object as it was.
                    if op.is_write() {
                        *self.pg_versions.entry(op.pgid).or_default() += 1;
                    }
                    return Expected {
                        result: Err(error),
                        outputs: Vec::new(),
                        user_version: 0,
                    };
                }
            }
        }
        if !wrote {
            let user_version = before.map_or(0, |o| o.user_version);
            return Expected {
                result: Ok(()),
                outputs,
                user_version,
            };
        }
        let version = self.pg_versions.entry(op.pgid).or_default();
        *version += 1;
        match after {
            Some(mut object) => {
                object.mtime_ns = op.mtime_ns;
                object.user_version = *version;
                self.objects.insert(op.oid.clone(), object);
            }
            None => {
                self.objects.remove(&op.oid);
            }
        }
        Expected {
            result: Ok(()),
            outputs,
            user_version: *version,
        }
    }
}

fn small_data(rng: &mut StdRng) -> Bytes {
    let length = rng.gen_range(1..48);
    let fill = rng.gen::<u8>();
    Bytes::from(
        (0..length)
            .map(|i| fill.wrapping_add(i as u8))
            .collect::<Vec<u8>>(),
    )
}

fn key(rng: &mut StdRng) -> Bytes {
    bytes(format!("k{}", rng.gen_range(0..8)).as_bytes())
}

fn xattr_name(rng: &mut StdRng) -> String {
    ["a", "b", "c"][rng.gen_range(0..3)].to_string()
}

fn gen_write(rng: &mut StdRng, current: Option<&Object>) -> Vec<OpCode> {
    let exists = current.is_some();
    let write = match rng.gen_range(0..13) {
        0 => OpCode::WriteFull {
            data: small_data(rng),
        },
        1 => OpCode::Write {
            offset: rng.gen_range(0..96),
            data: small_data(rng),
        },
        2 => OpCode::Append {
            data: small_data(rng),
        },
        3 => OpCode::Truncate {
            size_bytes: rng.gen_range(0..128),
        },
        4 if exists => OpCode::Zero {
            offset: rng.gen_range(0..96),
            length: rng.gen_range(1..64),
        },
        5 => OpCode::Remove,
        6 => OpCode::Create {
            exclusive: rng.gen_bool(0.7),
        },
        7 => OpCode::SetXattr {
            name: xattr_name(rng),
            value: small_data(rng),
        },
        8 => OpCode::RmXattr {
            name: xattr_name(rng),
        },
        9 => OpCode::OmapSet {
            entries: (0..rng.gen_range(1..4))
                .map(|_| (key(rng), small_data(rng)))
                .collect(),
        },
        10 => OpCode::OmapRm {
            keys: (0..rng.gen_range(1..3)).map(|_| key(rng)).collect(),
        },
        11 => OpCode::OmapClear,
        _ => OpCode::Append {
            data: small_data(rng),
        },
    };
    // Sometimes guarded, sometimes with a second write that may fail.
    match rng.gen_range(0..10) {
        0 => {
            let value = current
                .and_then(|o| o.xattrs.get("a").cloned())
                .filter(|_| rng.gen_bool(0.6))
                .unwrap_or_else(|| bytes(b"nope"));
            vec![
                OpCode::CmpXattrEq {
                    name: "a".into(),
                    value,
                },
                write,
            ]
        }
        1 => {
            let version = current
                .map(|o| o.user_version)
                .filter(|_| rng.gen_bool(0.6))
                .unwrap_or(12345);
            vec![OpCode::AssertVersion { version }, write]
        }
        2 => vec![
            write,
            OpCode::SetXattr {
                name: "b".into(),
                value: small_data(rng),
            },
            OpCode::OmapSet {
                entries: vec![(key(rng), small_data(rng))],
            },
        ],
        3 => vec![OpCode::Stat, write],
        _ => vec![write],
    }
}

fn gen_read(rng: &mut StdRng) -> Vec<OpCode> {
    let read = match rng.gen_range(0..7) {
        0 => OpCode::Read {
            offset: 0,
            length: 0,
        },
        1 => OpCode::Read {
            offset: rng.gen_range(0..140),
            length: rng.gen_range(0..40),
        },
        2 => OpCode::Stat,
        3 => OpCode::GetXattr {
            name: xattr_name(rng),
        },
        4 => OpCode::GetXattrs,
        5 => OpCode::OmapGetVals {
            after: rng.gen_bool(0.5).then(|| key(rng)),
            max_entries: rng.gen_range(1..6),
        },
        _ => OpCode::AssertExists,
    };
    if rng.gen_bool(0.2) {
        vec![read, OpCode::Stat, OpCode::GetXattrs]
    } else {
        vec![read]
    }
}

struct Sent {
    op: OsdOp,
    expected: Expected,
    is_write: bool,
    resend: bool,
}

struct Workload {
    seed: u64,
    cluster: Cluster,
    rng: StdRng,
    model: Model,
    names: Vec<String>,
    sent: HashMap<ReqId, Sent>,
    answered: HashMap<ReqId, usize>,
    reads_out: HashMap<String, usize>,
    /// The newest successful write version answered per PG.
    last_acked: BTreeMap<PgId, u64>,
    replies_checked: usize,
}

impl Workload {
    fn new(seed: u64) -> Workload {
        let cluster = Cluster::with_seed(
            Config {
                osd_count: 4,
                pg_num: 4,
                shards_per_osd: 2,
                ..Config::default()
            },
            seed,
        );
        Workload {
            seed,
            cluster,
            rng: StdRng::seed_from_u64(seed ^ 0x5eed),
            model: Model::default(),
            names: (0..OBJECT_COUNT).map(|i| format!("obj{i}")).collect(),
            sent: HashMap::new(),
            answered: HashMap::new(),
            reads_out: HashMap::new(),
            last_acked: BTreeMap::new(),
            replies_checked: 0,
        }
    }

    fn send_one(&mut self) {
        if !self.sent.is_empty() && self.rng.gen_bool(0.05) {
            self.resend_one();
            return;
        }
        let name = self.names[self.rng.gen_range(0..self.names.len())].clone();
        let reads_out = self.reads_out.get(&name).copied().unwrap_or(0);
        let write = reads_out == 0 && self.rng.gen_bool(0.65);
        let ops = if write {
            gen_write(&mut self.rng, self.model.objects.get(&name))
        } else {
            gen_read(&mut self.rng)
        };
        let op = self.cluster.op(&name, ops);
        let expected = self.model.apply(&op);
        if !write {
            *self.reads_out.entry(name).or_default() += 1;
        }
        self.sent.insert(
            op.reqid,
            Sent {
                op: op.clone(),
                expected,
                is_write: write,
                resend: false,
            },
        );
        self.cluster.send(op);
    }

    /// Resends a successful write: it must be answered with its original version and
    /// must not apply again.
    fn resend_one(&mut self) {
        let mut candidates: Vec<&Sent> = self
            .sent
            .values()
            .filter(|s| s.is_write && s.expected.result.is_ok())
            .collect();
        if candidates.is_empty() {
            return;
        }
        candidates.sort_by_key(|s| s.op.reqid);
        let index = self.rng.gen_range(0..candidates.len());
        let op = candidates[index].op.clone();
        self.sent.get_mut(&op.reqid).expect("listed").resend = true;
        let client = 100 + self.rng.gen_range(0..3);
        let target = self.cluster.target(&op);
        self.cluster.send_to(target, client, op);
    }

    fn check_replies(&mut self) {
        let seed = self.seed;
        for reply in self.cluster.take_replies() {
            self.replies_checked += 1;
            let sent = self
                .sent
                .get(&reply.reqid)
                .unwrap_or_else(|| panic!("seed {seed}: reply to unknown {:?}", reply.reqid));
            let count = self.answered.entry(reply.reqid).or_default();
            *count += 1;
            if *count > 1 || sent.resend {
                check_duplicate(seed, sent, &reply);
                continue;
            }
            check_reply(seed, sent, &reply);
            if !sent.is_write {
                *self.reads_out.get_mut(&sent.op.oid).expect("counted") -= 1;
            } else if reply.result.is_ok() {
                let last = self.last_acked.entry(sent.op.pgid).or_default();
                assert!(
                    reply.version.version > *last,
                    "seed {seed}: write {:?} answered with version {} after {}",
                    reply.reqid,
                    reply.version,
                    last
                );
                *last = reply.version.version;
            }
        }
    }

    fn run(&mut self) {
        for _ in 0..OPS_PER_RUN {
            self.send_one();
            for _ in 0..self.rng.gen_range(0..6) {
                self.cluster.step();
            }
            self.check_replies();
        }
        self.cluster.run();
        self.check_replies();
        for (reqid, sent) in &self.sent {
            assert!(
                self.answered.get(reqid).copied().unwrap_or(0) >= 1,
                "seed {}: {reqid} {:?} never answered",
                self.seed,
                sent.op.ops
            );
        }
        self.check_final_state();
    }

    fn check_final_state(&self) {
        let seed = self.seed;
        self.cluster.assert_all_replicas_identical();
        let pgs: Vec<PgId> = self.cluster.map.all_pgs().collect();
        for pgid in pgs {
            let dump = self.cluster.dump_pg(self.cluster.primary_of(pgid), pgid);
            let mut expected_bytes = 0;
            let mut expected_count = 0;
            for (name, object) in &self.model.objects {
                if self.cluster.pg_of(name) != pgid {
                    continue;
                }
                expected_count += 1;
                expected_bytes += object.data.len() as u64;
                let stored = dump
                    .get(name)
                    .unwrap_or_else(|| panic!("seed {seed}: {name} missing"));
                assert_eq!(&stored.data[..], &object.data[..], "seed {seed}: {name}");
                assert_eq!(stored.mtime_ns, object.mtime_ns, "seed {seed}: {name}");
                let user: BTreeMap<String, Bytes> = stored
                    .xattrs
                    .iter()
                    .filter_map(|(k, v)| Some((k.strip_prefix('_')?.to_string(), v.clone())))
                    .filter(|(k, _)| !k.is_empty())
                    .collect();
                assert_eq!(user, object.xattrs, "seed {seed}: {name}");
                let omap: BTreeMap<Bytes, Bytes> = stored.omap.iter().cloned().collect();
                assert_eq!(omap, object.omap, "seed {seed}: {name}");
            }
            let extra: Vec<&String> = dump
                .keys()
                .filter(|name| !name.is_empty() && !self.model.objects.contains_key(*name))
                .collect();
            assert!(
                extra.is_empty(),
                "seed {seed}: unexpected objects {extra:?}"
            );
            let stat = self.cluster.pg_stat(pgid);
            assert_eq!(stat.object_count, expected_count, "seed {seed}: {pgid}");
            assert_eq!(stat.data_bytes, expected_bytes, "seed {seed}: {pgid}");
            let version = self.model.pg_versions.get(&pgid).copied().unwrap_or(0);
            assert_eq!(stat.last_update.version, version, "seed {seed}: {pgid}");
        }
    }
}

fn check_reply(seed: u64, sent: &Sent, reply: &OsdOpReply) {
    let got = Expected {
        result: reply.result.clone(),
        outputs: reply.outputs.clone(),
        user_version: reply.user_version,
    };
    assert_eq!(
        got, sent.expected,
        "seed {seed}: {} {:?} on {}",
        sent.op.reqid, sent.op.ops, sent.op.oid
    );
    if sent.is_write && reply.result.is_ok() {
        assert_eq!(reply.version.version, reply.user_version, "seed {seed}");
    }
}

fn check_duplicate(seed: u64, sent: &Sent, reply: &OsdOpReply) {
    assert_eq!(reply.result, sent.expected.result, "seed {seed}: duplicate");
    assert_eq!(
        reply.user_version, sent.expected.user_version,
        "seed {seed}: duplicate {} answered with another version",
        sent.op.reqid
    );
}

#[test]
fn random_workloads_match_the_reference_model() {
    for seed in SEEDS {
        let mut workload = Workload::new(seed);
        workload.run();
        assert!(workload.replies_checked >= OPS_PER_RUN, "seed {seed}");
    }
}

#[test]
fn the_model_catches_a_wrong_answer() {
    // A canary for the checker itself: a reply that differs from the model fails.
    let mut model = Model::default();
    let mut cluster = Cluster::new(Config::default());
    let op = cluster.op(
        "c",
        vec![OpCode::Append {
            data: bytes(b"abc"),
        }],
    );
    let expected = model.apply(&op);
    let mut reply = cluster.call_op(op.clone());
    let sent = Sent {
        op,
        expected,
        is_write: true,
        resend: false,
    };
    check_reply(0, &sent, &reply);
    reply.user_version += 1;
    let caught = std::panic::catch_unwind(|| check_reply(0, &sent, &reply));
    assert!(caught.is_err());
}
