use super::*;
use carmine_clustermap::PoolSpec;

fn map_with(osds: u32) -> OsdMap {
    let mut map = OsdMap::new_dev(osds);
    for id in 0..osds {
        let addr: SocketAddr = format!("127.0.0.1:{}", 6800 + id).parse().unwrap();
        map.boot_osd(OsdId(id), vec![addr], format!("host{id}"))
            .unwrap();
    }
    map.create_pool(PoolSpec::replicated("rbd", 3, 16)).unwrap();
    map.epoch = Epoch(5);
    map
}

fn submit(objecter: &mut Objecter, now: Instant, out: &mut Vec<ObjecterOutput>) -> u64 {
    objecter.submit(
        now,
        PoolId(1),
        "greeting".into(),
        None,
        vec![OpCode::Stat],
        0,
        0,
        None,
        out,
    )
}

fn sent_to(out: &[ObjecterOutput]) -> Vec<OsdId> {
    out.iter()
        .filter_map(|o| match o {
            ObjecterOutput::Send(target, _) => Some(target.osd),
            _ => None,
        })
        .collect()
}

fn ok_reply(tid: u64, epoch: Epoch) -> OsdOpReply {
    OsdOpReply {
        reqid: ReqId { client: 7, tid },
        pgid: PgId::new(1, 0),
        result: Ok(()),
        outputs: vec![],
        user_version: 1,
        version: Default::default(),
        map_epoch: epoch,
    }
}

#[test]
fn ops_wait_for_a_map_then_go_to_the_primary() {
    let now = Instant::now();
    let mut objecter = Objecter::new(7, Duration::from_secs(30));
    let mut out = Vec::new();
    submit(&mut objecter, now, &mut out);
    assert!(out.is_empty());
    let map = Arc::new(map_with(3));
    let pg = map.object_to_pg(PoolId(1), "greeting").unwrap();
    let primary = map.pg_mapping(pg).unwrap().primary.unwrap();
    objecter.handle_map(map, &mut out);
    assert_eq!(sent_to(&out), vec![primary]);
    match &out[0] {
        ObjecterOutput::Send(_, op) => {
            assert_eq!(op.pgid, pg);
            assert_eq!(op.map_epoch, Epoch(5));
        }
        other => panic!("{other:?}"),
    }
}

/// An op sent to its primary, then resent to another when a map (epoch 6) marks the
/// first down: the objecter, the op's tid, and the first and second OSDs it went to.
fn op_moved_by_a_map() -> (Objecter, u64, OsdId, OsdId) {
    let now = Instant::now();
    let mut objecter = Objecter::new(7, Duration::from_secs(30));
    let mut map = map_with(3);
    objecter.handle_map(Arc::new(map.clone()), &mut Vec::new());
    let mut out = Vec::new();
    let tid = submit(&mut objecter, now, &mut out);
    let first = sent_to(&out)[0];
    map.mark_down(first).unwrap();
    map.epoch = Epoch(6);
    out.clear();
    objecter.handle_map(Arc::new(map), &mut out);
    let second = sent_to(&out);
    assert_eq!(second.len(), 1);
    assert_ne!(second[0], first);
    (objecter, tid, first, second[0])
}

#[test]
fn a_map_that_moves_the_primary_resends_and_a_reply_completes() {
    let (mut objecter, tid, _, second) = op_moved_by_a_map();
    let mut out = Vec::new();
    objecter.handle_reply(second, ok_reply(tid, Epoch(6)), &mut out);
    assert!(matches!(&out[0], ObjecterOutput::Complete(t, Ok(_)) if *t == tid));
    assert_eq!(objecter.in_flight(), 0);
    out.clear();
    objecter.handle_reply(second, ok_reply(tid, Epoch(6)), &mut out);
    assert!(out.is_empty(), "late duplicates are ignored");
}

/// Only the OSD the op was last sent to completes it: an old primary's answer to an
/// earlier attempt (here a refusal) is ignored, as Ceph's objecter ignores replies to
/// an earlier attempt. Taken, it completed a write with `NoSpace` that the new primary
/// then applied (the simulator's space faults, seeds 2046 and 2450).
#[test]
fn an_answer_from_the_op_s_previous_target_is_ignored() {
    let (mut objecter, tid, first, second) = op_moved_by_a_map();
    let mut out = Vec::new();
    let mut refusal = ok_reply(tid, Epoch(5));
    refusal.result = Err(OpError::NoSpace);
    objecter.handle_reply(first, refusal, &mut out);
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(objecter.in_flight(), 1);
    objecter.handle_reply(second, ok_reply(tid, Epoch(6)), &mut out);
    assert!(matches!(&out[0], ObjecterOutput::Complete(t, Ok(_)) if *t == tid));
}

#[test]
fn a_new_map_forgets_the_cached_pg_targets() {
    let now = Instant::now();
    let mut objecter = Objecter::new(7, Duration::from_secs(30));
    let mut map = map_with(3);
    objecter.handle_map(Arc::new(map.clone()), &mut Vec::new());
    let mut out = Vec::new();
    submit(&mut objecter, now, &mut out);
    submit(&mut objecter, now, &mut out);
    let first = sent_to(&out);
    assert_eq!(first.len(), 2);
    assert_eq!(first[0], first[1], "the same PG, the same (cached) target");
    map.mark_down(first[0]).unwrap();
    map.epoch = Epoch(6);
    objecter.handle_map(Arc::new(map.clone()), &mut Vec::new());
    out.clear();
    submit(&mut objecter, now, &mut out);
    let pg = map.object_to_pg(PoolId(1), "greeting").unwrap();
    let primary = map.pg_mapping(pg).unwrap().primary.unwrap();
    assert_ne!(primary, first[0]);
    assert_eq!(sent_to(&out), vec![primary]);
}

#[test]
fn a_reset_resends_what_was_sent_on_it() {
    let now = Instant::now();
    let mut objecter = Objecter::new(7, Duration::from_secs(30));
    objecter.handle_map(Arc::new(map_with(3)), &mut Vec::new());
    let mut out = Vec::new();
    submit(&mut objecter, now, &mut out);
    let target = match &out[0] {
        ObjecterOutput::Send(target, _) => *target,
        other => panic!("{other:?}"),
    };
    out.clear();
    objecter.handle_reset(target, &mut out);
    assert_eq!(sent_to(&out), vec![target.osd]);
}

#[test]
fn wrong_primary_asks_for_a_newer_map_instead_of_failing() {
    let now = Instant::now();
    let mut objecter = Objecter::new(7, Duration::from_secs(30));
    objecter.handle_map(Arc::new(map_with(3)), &mut Vec::new());
    let mut out = Vec::new();
    let tid = submit(&mut objecter, now, &mut out);
    let target = sent_to(&out)[0];
    out.clear();
    let mut reply = ok_reply(tid, Epoch(5));
    reply.result = Err(OpError::WrongPrimary);
    objecter.handle_reply(target, reply, &mut out);
    assert_eq!(out, vec![ObjecterOutput::NeedMap(Epoch(6))]);
    assert_eq!(objecter.in_flight(), 1);
    assert!(objecter.has_untargeted());
}

#[test]
fn ops_time_out_with_an_error() {
    let now = Instant::now();
    let mut objecter = Objecter::new(7, Duration::from_secs(2));
    let mut out = Vec::new();
    let tid = submit(&mut objecter, now, &mut out);
    assert_eq!(objecter.poll_timeout(), Some(now + Duration::from_secs(2)));
    objecter.handle_timeout(now + Duration::from_secs(1), &mut out);
    assert!(out.is_empty());
    objecter.handle_timeout(now + Duration::from_secs(2), &mut out);
    assert!(matches!(
        &out[0],
        ObjecterOutput::Complete(t, Err(ObjecterError::TimedOut(_))) if *t == tid
    ));
}

#[test]
fn ops_on_a_deleted_pool_fail() {
    let now = Instant::now();
    let mut objecter = Objecter::new(7, Duration::from_secs(30));
    let mut map = map_with(3);
    objecter.handle_map(Arc::new(map.clone()), &mut Vec::new());
    let mut out = Vec::new();
    let tid = submit(&mut objecter, now, &mut out);
    map.delete_pool("rbd").unwrap();
    map.epoch = Epoch(6);
    out.clear();
    objecter.handle_map(Arc::new(map), &mut out);
    assert!(matches!(
        &out[0],
        ObjecterOutput::Complete(t, Err(ObjecterError::PoolGone(_))) if *t == tid
    ));
}
