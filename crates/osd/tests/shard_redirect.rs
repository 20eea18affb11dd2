//! A client whose map is stale about an OSD's shards (the OSD restarted with another
//! shard count on the same base port) sends an op to a shard that does not own its
//! PG. The shard answers with a redirect (`WrongShard` and its own epoch), counts it,
//! executes nothing, and the client's objecter asks for a newer map and resends the op
//! to the owning shard, where it succeeds. Under a current map no op is misrouted.

use bytes::Bytes;
use carmine_client::objecter::{Objecter, ObjecterOutput, Target};
use carmine_clustermap::{pg_shard, OsdMap, PoolSpec};
use carmine_osd::{OsdShard, Output};
use carmine_proto::{Msg, OpCode, OpError, OsdOp, OsdOpReply};
use carmine_store::MemStore;
use carmine_types::{Epoch, OsdId, PoolId, ShardIndex};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

const CLIENT_CONN: u64 = 9;
const NEW_SHARDS: u16 = 4;

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Epoch 2: osd.0 with one shard on port 6800. Epoch 3: osd.0 restarted with four
/// shards on ports 6800..6804.
fn maps() -> (Arc<OsdMap>, Arc<OsdMap>) {
    let mut old = OsdMap::new_dev(1);
    old.boot_osd(OsdId(0), vec![addr(6800)], "host0".into())
        .unwrap();
    old.create_pool(PoolSpec::replicated("rbd", 1, 64)).unwrap();
    old.epoch = Epoch(2);
    let mut new = old.clone();
    let addrs = (0..NEW_SHARDS).map(|i| addr(6800 + i)).collect();
    new.boot_osd(OsdId(0), addrs, "host0".into()).unwrap();
    new.epoch = Epoch(3);
    // No monitor here: the new map records osd.0 alive, as one would when asked.
    new.raise_up_thru(OsdId(0), new.epoch).unwrap();
    (Arc::new(old), Arc::new(new))
}

/// The OSD's shards, all holding the new map.
fn shards(map: &Arc<OsdMap>) -> Vec<OsdShard<MemStore>> {
    (0..NEW_SHARDS)
        .map(|i| {
            let mut shard = OsdShard::new(OsdId(0), ShardIndex(i), NEW_SHARDS, MemStore::new());
            shard.handle_map(map.clone(), &mut Vec::new());
            shard
        })
        .collect()
}

/// Delivers `op` to the shard listening on `target.addr`; returns its reply.
fn deliver(shards: &mut [OsdShard<MemStore>], target: Target, op: OsdOp) -> OsdOpReply {
    let index = usize::from(target.addr.port() - 6800);
    let shard = &mut shards[index];
    let mut out = Vec::new();
    shard.handle_client_op(CLIENT_CONN, op, &mut out);
    shard.flush(&mut out);
    out.into_iter()
        .find_map(|output| match output {
            Output::Client(CLIENT_CONN, Msg::OsdOpReply(reply)) => Some(reply),
            _ => None,
        })
        .expect("the shard answers")
}

fn sends(out: &mut Vec<ObjecterOutput>) -> Vec<(Target, OsdOp)> {
    let mut sent = Vec::new();
    out.retain(|o| match o {
        ObjecterOutput::Send(target, op) => {
            sent.push((*target, op.clone()));
            false
        }
        _ => true,
    });
    sent
}

/// An object whose PG the new map puts on a shard other than 0.
fn object_off_shard_zero(map: &OsdMap) -> String {
    (0..)
        .map(|i| format!("object-{i}"))
        .find(|name| {
            let pgid = map.object_to_pg(PoolId(1), name).unwrap();
            pg_shard(pgid, NEW_SHARDS) != ShardIndex(0)
        })
        .unwrap()
}

#[test]
fn a_stale_map_op_is_redirected_to_the_owning_shard() {
    let (old, new) = maps();
    let mut shards = shards(&new);
    let name = object_off_shard_zero(&new);
    let owner = pg_shard(new.object_to_pg(PoolId(1), &name).unwrap(), NEW_SHARDS);

    let now = Instant::now();
    let mut objecter = Objecter::new(7, Duration::from_secs(30));
    let mut out = Vec::new();
    objecter.handle_map(old, &mut out);
    let data = Bytes::from_static(b"redirected");
    let tid = objecter.submit(
        now,
        PoolId(1),
        name.clone(),
        None,
        vec![OpCode::WriteFull { data: data.clone() }],
        0,
        0,
        None,
        &mut out,
    );
    let sent = sends(&mut out);
    assert_eq!(sent.len(), 1);
    let (target, op) = sent[0].clone();
    assert_eq!(target.shard, ShardIndex(0), "the old map has one shard");

    // The wrong shard redirects, executes nothing and counts it.
    let reply = deliver(&mut shards, target, op);
    assert_eq!(
        reply.result,
        Err(OpError::WrongShard {
            shard_count: NEW_SHARDS
        })
    );
    assert_eq!(reply.map_epoch, Epoch(3));
    assert_eq!(shards[0].counters().wrong_shard_total, 1);
    assert!(shards
        .iter()
        .all(|s| s.pg_stats().iter().all(|p| p.object_count == 0)));

    // The objecter asks for a newer map instead of failing the op.
    objecter.handle_reply(target.osd, reply, &mut out);
    assert_eq!(out, vec![ObjecterOutput::NeedMap(Epoch(3))]);
    out.clear();
    objecter.handle_map(new, &mut out);
    let sent = sends(&mut out);
    assert_eq!(sent.len(), 1, "resent once the map arrives: {out:?}");
    let (target, op) = sent[0].clone();
    assert_eq!(target.shard, owner);
    assert_eq!(target.addr, addr(6800 + owner.0));

    let reply = deliver(&mut shards, target, op);
    assert_eq!(reply.result, Ok(()));
    objecter.handle_reply(target.osd, reply, &mut out);
    assert!(
        matches!(&out[..], [ObjecterOutput::Complete(t, Ok(_))] if *t == tid),
        "{out:?}"
    );
    let owner_shard = &shards[usize::from(owner.0)];
    assert_eq!(owner_shard.counters().wrong_shard_total, 0);
    let objects: u64 = owner_shard.pg_stats().iter().map(|p| p.object_count).sum();
    assert_eq!(objects, 1);
}

#[test]
fn a_current_map_routes_every_op_to_its_shard() {
    let (_, new) = maps();
    let mut shards = shards(&new);
    let now = Instant::now();
    let mut objecter = Objecter::new(7, Duration::from_secs(30));
    let mut out = Vec::new();
    objecter.handle_map(new, &mut out);
    for i in 0..500 {
        objecter.submit(
            now,
            PoolId(1),
            format!("steady-{i}"),
            None,
            vec![OpCode::WriteFull {
                data: Bytes::from_static(b"x"),
            }],
            0,
            0,
            None,
            &mut out,
        );
        for (target, op) in sends(&mut out) {
            let reply = deliver(&mut shards, target, op);
            assert_eq!(reply.result, Ok(()));
            objecter.handle_reply(target.osd, reply, &mut out);
        }
        out.clear();
    }
    let misrouted: u64 = shards.iter().map(|s| s.counters().wrong_shard_total).sum();
    assert_eq!(misrouted, 0);
    let ops: u64 = shards.iter().map(|s| s.counters().ops_total).sum();
    assert_eq!(ops, 500);
    assert!(
        shards.iter().all(|s| s.counters().ops_total > 0),
        "every shard served some"
    );
}
