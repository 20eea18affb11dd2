//! Which outputs may leave a shard before its turn's store flush: a write's RepOps
//! may (they claim nothing about the primary's store), nothing that claims durability
//! may (client replies, RepOpReplies), and no message overtakes an earlier held one
//! to the same peer shard. The shards here flush once per turn, as the runtime's do,
//! and each turn's outputs are split with the runtime's own `take_outputs_before_flush`.

mod harness;

use carmine_osd::{take_outputs_before_flush, OsdShard, Output};
use carmine_proto::{Msg, OpCode, OsdOpReply};
use carmine_store::MemStore;
use harness::{Addr, Cluster, Config, CLIENT};

/// What one shard turn sent before its flush, and what it held for after.
#[derive(Debug, Default)]
struct Turn {
    before_flush: Vec<Output>,
    held: Vec<Output>,
}

/// One turn of the shard at `addr`: `handle` produces outputs, they are split, the
/// shard flushes, and what the flush produced joins the held outputs behind them.
fn turn(
    cluster: &mut Cluster,
    addr: Addr,
    handle: impl FnOnce(&mut OsdShard<MemStore>, &mut Vec<Output>),
) -> Turn {
    let shard = cluster.shard_mut(addr);
    let mut turn = Turn::default();
    handle(shard, &mut turn.held);
    take_outputs_before_flush(&mut turn.held, 0, &mut turn.before_flush);
    shard.flush(&mut turn.held);
    turn
}

/// The turns of one replicated write: the primary's for the client op, each
/// replica's for its RepOp, and the primary's for each RepOpReply.
struct WriteTurns {
    primary: Turn,
    replicas: Vec<Turn>,
    replies: Vec<Turn>,
}

fn replicated_write(cluster: &mut Cluster) -> WriteTurns {
    let op = cluster.op(
        "flush-order",
        vec![OpCode::WriteFull {
            data: b"written"[..].into(),
        }],
    );
    let pgid = op.pgid;
    let acting = cluster.acting(pgid);
    assert_eq!(acting.len(), 3, "a size-3 pool");
    for &osd in &acting {
        let addr = cluster.addr(osd, pgid);
        cluster.shard_mut(addr).set_deferred_flush(true);
    }
    let primary = cluster.addr(acting[0], pgid);
    let primary_turn = turn(cluster, primary, |shard, out| {
        shard.handle_client_op(CLIENT, op, out)
    });
    let mut replicas = Vec::new();
    let mut replies = Vec::new();
    let sent: Vec<Output> = primary_turn
        .before_flush
        .iter()
        .chain(&primary_turn.held)
        .cloned()
        .collect();
    for output in sent {
        let Output::Peer(osd, shard, msg) = output else {
            continue;
        };
        let replica_turn = turn(cluster, (osd, shard), |shard, out| {
            shard.handle_peer_message(primary.0, msg, out)
        });
        let answers: Vec<Output> = replica_turn
            .before_flush
            .iter()
            .chain(&replica_turn.held)
            .cloned()
            .collect();
        replicas.push(replica_turn);
        for answer in answers {
            let Output::Peer(_, _, msg) = answer else {
                continue;
            };
            replies.push(turn(cluster, primary, |shard, out| {
                shard.handle_peer_message(osd, msg, out)
            }));
        }
    }
    WriteTurns {
        primary: primary_turn,
        replicas,
        replies,
    }
}

fn is_rep_op(output: &Output) -> bool {
    matches!(output, Output::Peer(_, _, Msg::RepOp(_)))
}

fn client_replies(outputs: &[Output]) -> Vec<&OsdOpReply> {
    outputs
        .iter()
        .filter_map(|output| match output {
            Output::Client(client, Msg::OsdOpReply(reply)) if *client == CLIENT => Some(reply),
            _ => None,
        })
        .collect()
}

#[test]
fn a_writes_rep_ops_leave_before_the_primarys_flush() {
    let mut cluster = Cluster::new(Config::default());
    let write = replicated_write(&mut cluster);
    assert_eq!(write.primary.before_flush.len(), 2, "{:?}", write.primary);
    assert!(write.primary.before_flush.iter().all(is_rep_op));
    assert!(write.primary.held.is_empty(), "{:?}", write.primary.held);
    assert_eq!(write.replicas.len(), 2, "each replica got its RepOp");
}

#[test]
fn replies_that_claim_durability_wait_for_the_flush() {
    let mut cluster = Cluster::new(Config::default());
    let write = replicated_write(&mut cluster);
    // The replicas' RepOpReplies say the write is durable there.
    for replica in &write.replicas {
        assert!(replica.before_flush.is_empty(), "{replica:?}");
        let acks = replica.held.iter().filter(|output| {
            matches!(output, Output::Peer(_, _, Msg::RepOpReply(reply)) if reply.result.is_ok())
        });
        assert_eq!(acks.count(), 1, "{replica:?}");
    }
    // The client's reply says it is durable everywhere.
    assert_eq!(write.replies.len(), 2);
    for reply_turn in &write.replies {
        assert!(reply_turn.before_flush.is_empty(), "{reply_turn:?}");
    }
    let answered: Vec<&OsdOpReply> = write
        .replies
        .iter()
        .flat_map(|reply_turn| client_replies(&reply_turn.held))
        .collect();
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert_eq!(answered[0].result, Ok(()));
}

#[test]
fn a_rep_op_does_not_overtake_a_held_message_to_the_same_shard() {
    let mut cluster = Cluster::new(Config::default());
    let write = replicated_write(&mut cluster);
    let Output::Peer(to_osd, to_shard, rep_op) = write.primary.before_flush[0].clone() else {
        panic!("a RepOp first");
    };
    let Output::Peer(other_osd, other_shard, other_rep_op) = write.primary.before_flush[1].clone()
    else {
        panic!("a RepOp second");
    };
    assert_ne!(to_osd, other_osd);
    let ack = write.replicas[0].held[0].clone();
    let Output::Peer(_, _, ack) = ack else {
        panic!("a RepOpReply");
    };
    // A message that waits for the flush, to the first RepOp's shard, made by an
    // earlier message of the turn (it is in the held part already) ...
    let held_before = Output::Peer(to_osd, to_shard, ack.clone());
    let mut outputs = vec![
        held_before.clone(),
        Output::Peer(to_osd, to_shard, rep_op.clone()),
        Output::Peer(other_osd, other_shard, other_rep_op.clone()),
    ];
    let mut before_flush = Vec::new();
    take_outputs_before_flush(&mut outputs, 1, &mut before_flush);
    assert_eq!(
        before_flush,
        vec![Output::Peer(other_osd, other_shard, other_rep_op.clone())]
    );
    assert_eq!(
        outputs,
        vec![held_before, Output::Peer(to_osd, to_shard, rep_op.clone())]
    );
    // ... or by the same message, ahead of the RepOp.
    let mut outputs = vec![
        Output::Peer(to_osd, to_shard, ack),
        Output::Peer(to_osd, to_shard, rep_op),
    ];
    let mut before_flush = Vec::new();
    take_outputs_before_flush(&mut outputs, 0, &mut before_flush);
    assert!(before_flush.is_empty(), "{before_flush:?}");
    assert_eq!(outputs.len(), 2);
}
