use super::*;
use carmine_clustermap::PoolSpec;
use carmine_proto::{Command, CommandOutput, MonCommand, OsdBoot};
use carmine_types::Epoch;
use std::net::SocketAddr;

fn boot(mon: &mut Monitor, now: Instant, conn: ConnId, id: u32) -> Vec<MonOutput> {
    let addr: SocketAddr = format!("127.0.0.1:{}", 6800 + id).parse().unwrap();
    mon.handle_message(
        now,
        conn,
        EntityName::osd(OsdId(id)),
        Msg::OsdBoot(OsdBoot {
            osd: OsdId(id),
            shard_addrs: vec![addr],
            host: format!("host{id}"),
            fsid: 0,
            instance: 1,
        }),
    )
}

fn command(mon: &mut Monitor, now: Instant, command: Command) -> Result<CommandOutput, String> {
    let out = mon.handle_message(
        now,
        99,
        EntityName::client(1),
        Msg::MonCommand(MonCommand { tid: 7, command }),
    );
    out.into_iter()
        .find_map(|o| match o {
            MonOutput::Send(99, Msg::MonCommandReply(reply)) => Some(reply.result),
            _ => None,
        })
        .expect("a command gets a reply")
}

fn cluster(osds: u32) -> (Monitor, Instant) {
    let now = Instant::now();
    let mut mon = Monitor::new(OsdMap::new_dev(osds), MonConfig::default(), now);
    for id in 0..osds {
        boot(&mut mon, now, u64::from(id) + 1, id);
    }
    (mon, now)
}

#[test]
fn boot_publishes_a_new_epoch_persisted_before_it_is_sent() {
    let now = Instant::now();
    let mut mon = Monitor::new(OsdMap::new_dev(3), MonConfig::default(), now);
    let out = boot(&mut mon, now, 1, 0);
    assert!(matches!(&out[0], MonOutput::PersistMap(map) if map.epoch == Epoch(2)));
    assert!(matches!(&out[1], MonOutput::Send(1, Msg::OsdMap(m)) if m.map.epoch == Epoch(2)));
    assert!(mon.map().is_up(OsdId(0)));
}

#[test]
fn pool_create_rejects_size_above_osd_count_and_duplicates() {
    let (mut mon, now) = cluster(3);
    let error = command(
        &mut mon,
        now,
        Command::PoolCreate(PoolSpec::replicated("big", 5, 8)),
    )
    .unwrap_err();
    assert!(error.contains("exceeds the 3 OSDs"), "{error}");
    command(
        &mut mon,
        now,
        Command::PoolCreate(PoolSpec::replicated("rbd", 3, 8)),
    )
    .unwrap();
    let error = command(
        &mut mon,
        now,
        Command::PoolCreate(PoolSpec::replicated("rbd", 3, 8)),
    )
    .unwrap_err();
    assert!(error.contains("already exists"), "{error}");
}

#[test]
fn pool_delete_needs_confirmation() {
    let (mut mon, now) = cluster(3);
    command(
        &mut mon,
        now,
        Command::PoolCreate(PoolSpec::replicated("rbd", 3, 8)),
    )
    .unwrap();
    let delete = |confirm| Command::PoolDelete {
        name: "rbd".into(),
        confirm,
    };
    assert!(command(&mut mon, now, delete(false)).is_err());
    assert!(mon.map().pool_by_name("rbd").is_some());
    command(&mut mon, now, delete(true)).unwrap();
    assert!(mon.map().pool_by_name("rbd").is_none());
    assert!(command(&mut mon, now, delete(true)).is_err());
}

#[test]
fn osd_is_marked_down_only_after_the_grace_without_a_session() {
    let (mut mon, now) = cluster(3);
    mon.handle_disconnect(now, 2);
    let grace = MonConfig::default().osd_down_grace;
    assert!(mon.handle_tick(now + grace / 2).is_empty());
    assert!(mon.map().is_up(OsdId(1)));
    let out = mon.handle_tick(now + grace);
    assert!(!out.is_empty());
    assert!(!mon.map().is_up(OsdId(1)));
    let status = mon.status(now + grace);
    assert_eq!(status.osds_up, 2);
    assert_eq!(status.health, "HEALTH_WARN");
}

#[test]
fn a_quick_reboot_keeps_the_osd_up() {
    let (mut mon, now) = cluster(3);
    mon.handle_disconnect(now, 2);
    boot(&mut mon, now, 10, 1);
    let grace = MonConfig::default().osd_down_grace;
    mon.handle_tick(now + grace * 2);
    assert!(mon.map().is_up(OsdId(1)));
}

#[test]
fn status_counts_unknown_pgs_until_primaries_report() {
    let (mut mon, now) = cluster(3);
    command(
        &mut mon,
        now,
        Command::PoolCreate(PoolSpec::replicated("rbd", 3, 8)),
    )
    .unwrap();
    let status = mon.status(now);
    assert_eq!(status.pg_count, 8);
    assert_eq!(status.pg_states.get("unknown"), Some(&8));
    assert_eq!(status.osds_up, 3);
}
