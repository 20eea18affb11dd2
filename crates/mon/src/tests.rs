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
    // The booting OSD holds no map yet: a full one.
    let MonOutput::Send(1, Msg::OsdMap(published)) = &out[1] else {
        panic!("{:?}", out[1]);
    };
    assert_eq!(published.full.as_ref(), Some(mon.map()));
    assert!(mon.map().is_up(OsdId(0)));
    // The next epoch reaches it as the change alone.
    let before = mon.map().clone();
    let out = boot(&mut mon, now, 2, 1);
    let published = out
        .iter()
        .find_map(|o| match o {
            MonOutput::Send(1, Msg::OsdMap(m)) => Some(m),
            _ => None,
        })
        .expect("osd.0 is sent epoch 3");
    assert!(published.full.is_none());
    assert_eq!(published.newest_epoch(), Epoch(3));
    let step = published.advance(Some(&before));
    assert_eq!(step.maps, vec![mon.map().clone()]);
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

fn done(result: Result<CommandOutput, String>) -> Epoch {
    match result {
        Ok(CommandOutput::Done { epoch, .. }) => epoch,
        other => panic!("expected a done reply, got {other:?}"),
    }
}

#[test]
fn noout_keeps_a_down_osd_in_until_unset() {
    let (mut mon, now) = cluster(3);
    let noout = carmine_clustermap::OsdFlags::NOOUT;
    done(command(
        &mut mon,
        now,
        Command::OsdFlag {
            flag: noout,
            set: true,
        },
    ));
    let error = command(
        &mut mon,
        now,
        Command::OsdFlag {
            flag: noout,
            set: true,
        },
    )
    .unwrap_err();
    assert!(error.contains("already set"), "{error}");
    assert!(mon
        .status(now)
        .health_checks
        .iter()
        .any(|c| c.contains("OSDMAP_FLAGS: noout")));
    mon.handle_disconnect(now, 2);
    let config = MonConfig::default();
    let late = now + config.osd_down_grace + config.osd_down_out_interval * 2;
    mon.handle_tick(now + config.osd_down_grace);
    assert!(!mon.map().is_up(OsdId(1)));
    mon.handle_tick(late);
    assert!(
        mon.map().osd(OsdId(1)).unwrap().is_in(),
        "noout keeps it in"
    );
    done(command(
        &mut mon,
        late,
        Command::OsdFlag {
            flag: noout,
            set: false,
        },
    ));
    mon.handle_tick(late + Duration::from_secs(1));
    assert!(
        !mon.map().osd(OsdId(1)).unwrap().is_in(),
        "out once noout is unset"
    );
}

#[test]
fn noup_keeps_a_booting_osd_down() {
    let (mut mon, now) = cluster(3);
    let noup = carmine_clustermap::OsdFlags::NOUP;
    done(command(
        &mut mon,
        now,
        Command::OsdFlag {
            flag: noup,
            set: true,
        },
    ));
    command(&mut mon, now, Command::OsdDown(OsdId(2))).unwrap();
    assert!(!mon.map().is_up(OsdId(2)));
    let mut second = OsdBoot {
        osd: OsdId(2),
        shard_addrs: vec!["127.0.0.1:6900".parse().unwrap()],
        host: "host2".into(),
        fsid: 0,
        instance: 2,
    };
    mon.handle_message(
        now,
        50,
        EntityName::osd(OsdId(2)),
        Msg::OsdBoot(second.clone()),
    );
    assert!(!mon.map().is_up(OsdId(2)), "noup refuses the boot");
    done(command(
        &mut mon,
        now,
        Command::OsdFlag {
            flag: noup,
            set: false,
        },
    ));
    second.instance = 3;
    mon.handle_message(now, 50, EntityName::osd(OsdId(2)), Msg::OsdBoot(second));
    assert!(mon.map().is_up(OsdId(2)));
    let error = command(
        &mut mon,
        now,
        Command::OsdFlag {
            flag: 1 << 20,
            set: true,
        },
    )
    .unwrap_err();
    assert!(error.contains("unknown OSD flag"), "{error}");
}

#[test]
fn reweight_and_pool_set_validate_their_values() {
    let (mut mon, now) = cluster(3);
    done(command(
        &mut mon,
        now,
        Command::OsdReweight(OsdId(0), 0x8000),
    ));
    assert_eq!(mon.map().osd(OsdId(0)).unwrap().weight, 0x8000);
    assert!(command(&mut mon, now, Command::OsdReweight(OsdId(0), 0x20000)).is_err());
    assert!(command(&mut mon, now, Command::OsdReweight(OsdId(9), 0)).is_err());

    command(
        &mut mon,
        now,
        Command::PoolCreate(PoolSpec::replicated("rbd", 3, 8)),
    )
    .unwrap();
    let set = |key: &str, value: &str| Command::PoolSet {
        name: "rbd".into(),
        key: key.into(),
        value: value.into(),
    };
    done(command(&mut mon, now, set("min_size", "1")));
    done(command(&mut mon, now, set("size", "2")));
    let pool = mon.map().pool_by_name("rbd").unwrap().clone();
    assert_eq!((pool.size, pool.min_size), (2, 1));
    for (key, value, expected) in [
        ("size", "0", "outside"),
        ("size", "4", "exceeds the 3 OSDs"),
        ("min_size", "3", "outside"),
        ("size", "three", "must be a number"),
        ("crush_rule", "7", "does not exist"),
        ("pg_num", "64", "splitting"),
        ("colour", "1", "unknown pool setting"),
    ] {
        let error = command(&mut mon, now, set(key, value)).unwrap_err();
        assert!(error.contains(expected), "{key}={value}: {error}");
    }
    let missing = Command::PoolSet {
        name: "nope".into(),
        key: "size".into(),
        value: "1".into(),
    };
    assert!(command(&mut mon, now, missing)
        .unwrap_err()
        .contains("does not exist"));
}

#[test]
fn pg_dump_lists_every_pg_stale_until_its_primary_reports() {
    let (mut mon, now) = cluster(3);
    command(
        &mut mon,
        now,
        Command::PoolCreate(PoolSpec::replicated("rbd", 3, 8)),
    )
    .unwrap();
    let Ok(CommandOutput::PgStats { epoch, pgs }) = command(&mut mon, now, Command::PgDump) else {
        panic!("pg dump answers with PG stats");
    };
    assert_eq!(epoch, mon.map().epoch);
    assert_eq!(pgs.len(), 8);
    assert!(pgs
        .iter()
        .all(|pg| pg.state.0 == carmine_proto::PgState::STALE));
    assert!(pgs.iter().all(|pg| pg.acting.len() == 3));
}

#[test]
fn config_keys_are_set_and_removed_through_the_map() {
    let (mut mon, now) = cluster(1);
    let set = |key: &str, value: Option<&str>| Command::ConfigSet {
        key: key.into(),
        value: value.map(str::to_string),
    };
    done(command(&mut mon, now, set("a/b", Some("1"))));
    assert_eq!(mon.map().config.get("a/b").map(String::as_str), Some("1"));
    done(command(&mut mon, now, set("a/b", None)));
    assert!(mon.map().config.is_empty());
    let error = command(&mut mon, now, set("a/b", None)).unwrap_err();
    assert!(error.contains("does not exist"), "{error}");
    assert!(command(&mut mon, now, set("bad key", Some("x"))).is_err());
}

#[test]
fn self_managed_snap_ids_are_allocated_in_order_and_removed_once() {
    let (mut mon, now) = cluster(3);
    let create = Command::PoolCreate(PoolSpec::replicated("rbd", 3, 8));
    command(&mut mon, now, create).unwrap();
    let allocate = || Command::PoolSnapCreate { pool: "rbd".into() };
    let mut ids = Vec::new();
    for _ in 0..2 {
        let Ok(CommandOutput::Done { epoch, message }) = command(&mut mon, now, allocate()) else {
            panic!("allocation answers done");
        };
        assert_eq!(epoch, mon.map().epoch);
        ids.push(carmine_proto::parse_snap_allocated(&message).expect("carries the id"));
    }
    assert_eq!(ids, vec![1, 2]);
    let remove = |snap| Command::PoolSnapRemove {
        pool: "rbd".into(),
        snap,
    };
    done(command(&mut mon, now, remove(1)));
    let pool = mon.map().pool_by_name("rbd").expect("exists").clone();
    assert_eq!(pool.snap_seq, 2);
    assert!(pool.removed_snaps.contains(&1));
    assert!(command(&mut mon, now, remove(1)).is_err());
    assert!(command(&mut mon, now, remove(9)).is_err());
    let missing = Command::PoolSnapCreate {
        pool: "none".into(),
    };
    assert!(command(&mut mon, now, missing).is_err());
}

fn report(mon: &mut Monitor, now: Instant, osd: OsdId, pg: carmine_proto::PgStat) {
    let conn = u64::from(osd.0) + 1;
    mon.handle_message(
        now,
        conn,
        EntityName::osd(osd),
        Msg::OsdStats(carmine_proto::OsdStats {
            osd,
            map_epoch: mon.map().epoch,
            pgs: vec![pg],
            ..carmine_proto::OsdStats::default()
        }),
    );
}

/// Creates pool "rbd" (size 3, `pg_num` PGs); its first PG and where it maps.
fn first_pg_of_new_pool(
    mon: &mut Monitor,
    now: Instant,
    pg_num: u32,
) -> (carmine_types::PgId, carmine_clustermap::PgMapping) {
    let spec = PoolSpec::replicated("rbd", 3, pg_num);
    command(mon, now, Command::PoolCreate(spec)).unwrap();
    let pgid = mon.map().all_pgs().next().unwrap();
    (pgid, mon.map().pg_mapping(pgid).unwrap())
}

/// A primary's report on `pgid` in `state` with `acting`, asking for nothing.
fn primary_stat(
    pgid: carmine_types::PgId,
    state: u32,
    acting: Vec<OsdId>,
) -> carmine_proto::PgStat {
    carmine_proto::PgStat {
        pgid,
        state: carmine_proto::PgState(state),
        object_count: 0,
        data_bytes: 0,
        last_update: Default::default(),
        acting,
        interval_start: Epoch(0),
        want_acting: Vec::new(),
        reason: String::new(),
        want_up_thru: Epoch(0),
        unfound: 0,
    }
}

#[test]
fn a_primary_gets_the_pg_temp_it_asks_for_until_its_pg_is_clean() {
    use carmine_proto::{PgStat, PgState};
    let (mut mon, now) = cluster(4);
    let (pgid, mapping) = first_pg_of_new_pool(&mut mon, now, 8);
    let primary = mapping.primary.unwrap();
    let mut want = mapping.up.clone();
    want.rotate_left(1);
    let stat = |state: u32, acting: Vec<OsdId>, want_acting: Vec<OsdId>| PgStat {
        want_acting,
        ..primary_stat(pgid, state, acting)
    };

    // A request from an OSD that is not the PG's primary is ignored.
    let before = mon.map().epoch;
    report(
        &mut mon,
        now,
        want[0],
        stat(PgState::PEERING, mapping.acting.clone(), want.clone()),
    );
    assert_eq!(mon.map().epoch, before);
    assert!(mon.map().pg_temp.is_empty());

    // The primary's request becomes the acting set in one new epoch.
    report(
        &mut mon,
        now,
        primary,
        stat(PgState::PEERING, mapping.acting.clone(), want.clone()),
    );
    assert_eq!(mon.map().epoch, before.next());
    assert_eq!(mon.map().pg_temp.get(&pgid), Some(&want));
    let during = mon.map().pg_mapping(pgid).unwrap();
    assert_eq!(during.acting, want);
    assert_eq!(during.primary, Some(want[0]));

    // Asking again for the same set changes nothing; the old primary no longer counts.
    report(
        &mut mon,
        now,
        primary,
        stat(PgState::PEERING, want.clone(), want.clone()),
    );
    let epoch = mon.map().epoch;
    report(
        &mut mon,
        now,
        want[0],
        stat(PgState::PEERING, want.clone(), want.clone()),
    );
    assert_eq!(mon.map().epoch, epoch);

    // Active but still backfilling: kept. Clean: handed back to the up set.
    let backfilling = PgState::ACTIVE | PgState::BACKFILLING | PgState::DEGRADED;
    report(
        &mut mon,
        now,
        want[0],
        stat(backfilling, want.clone(), Vec::new()),
    );
    assert!(mon.map().pg_temp.contains_key(&pgid));
    let clean = PgState::ACTIVE | PgState::CLEAN | PgState::REMAPPED;
    report(
        &mut mon,
        now,
        want[0],
        stat(clean, want.clone(), Vec::new()),
    );
    assert!(mon.map().pg_temp.is_empty());
    assert_eq!(mon.map().pg_mapping(pgid).unwrap().acting, mapping.up);
}

#[test]
fn a_primary_gets_the_up_thru_it_asks_for_while_it_is_up() {
    use carmine_proto::{PgStat, PgState};
    let (mut mon, now) = cluster(3);
    let (pgid, mapping) = first_pg_of_new_pool(&mut mon, now, 8);
    let primary = mapping.primary.unwrap();
    let other = mapping.acting[1];
    let stat = |want_up_thru: Epoch| PgStat {
        interval_start: want_up_thru,
        want_up_thru,
        ..primary_stat(pgid, PgState::PEERING, mapping.acting.clone())
    };
    let up_thru = |mon: &Monitor, osd| mon.map().osd(osd).unwrap().up_thru;
    let asked = mon.map().epoch;

    // Not the PG's primary: not its request to make.
    report(&mut mon, now, other, stat(asked));
    assert_eq!(mon.map().epoch, asked);

    // The primary's request is recorded in one new epoch, no further than the map.
    report(&mut mon, now, primary, stat(Epoch(asked.0 + 50)));
    assert_eq!(mon.map().epoch, asked.next());
    assert_eq!(up_thru(&mon, primary), asked);
    // Asking again for what is recorded changes nothing.
    report(&mut mon, now, primary, stat(asked));
    assert_eq!(mon.map().epoch, asked.next());

    // Marked down, it leads nothing: its stats, which may trail its death, ask for none.
    command(&mut mon, now, Command::OsdDown(primary)).unwrap();
    let down = mon.map().epoch;
    let remapped = mon.map().pg_mapping(pgid).unwrap();
    assert_ne!(remapped.primary, Some(primary));
    report(&mut mon, now, primary, stat(down));
    assert_eq!(mon.map().epoch, down);
    assert_eq!(
        up_thru(&mon, primary),
        asked,
        "never lowered, never raised while down"
    );
}

#[test]
fn unrepaired_corrupt_copies_raise_a_health_warning() {
    let (mut mon, now) = cluster(3);
    let epoch = mon.map().epoch;
    let stats = |found, repaired| {
        Msg::OsdStats(carmine_proto::OsdStats {
            osd: OsdId(1),
            map_epoch: epoch,
            corrupt_copies_found_total: found,
            copies_repaired_total: repaired,
            ..carmine_proto::OsdStats::default()
        })
    };
    let scrub_check = |mon: &Monitor| {
        mon.status(now)
            .health_checks
            .into_iter()
            .find(|check| check.starts_with("OSD_SCRUB_ERRORS"))
    };
    let report = stats(3, 1);
    mon.handle_message(now, 2, EntityName::osd(OsdId(1)), report);
    let check = scrub_check(&mon).expect("a warning while copies are unrepaired");
    assert!(
        check.contains("2 corrupt or inconsistent object copies"),
        "{check}"
    );
    let report = stats(3, 3);
    mon.handle_message(now, 2, EntityName::osd(OsdId(1)), report);
    assert_eq!(scrub_check(&mon), None, "every copy was repaired");
}

#[test]
fn why_a_pg_cannot_serve_is_kept_and_shown_in_status_and_pg_dump() {
    use carmine_proto::{PgStat, PgState};
    let (mut mon, now) = cluster(3);
    let (pgid, mapping) = first_pg_of_new_pool(&mut mon, now, 4);
    let primary = mapping.primary.unwrap();
    let reason = "down: interval e4-e9 may have accepted writes; waiting for osd.3";
    let stat = PgStat {
        pgid,
        state: PgState(PgState::DOWN),
        object_count: 0,
        data_bytes: 0,
        last_update: Default::default(),
        acting: mapping.acting.clone(),
        interval_start: Epoch(10),
        want_acting: Vec::new(),
        reason: reason.into(),
        want_up_thru: Epoch(0),
        unfound: 0,
    };
    report(&mut mon, now, primary, stat);
    let checks = mon.status(now).health_checks;
    let expected = format!("PG_AVAILABILITY: pg {pgid} is {reason}");
    assert!(checks.contains(&expected), "{checks:?}");
    let Ok(CommandOutput::PgStats { pgs, .. }) = command(&mut mon, now, Command::PgDump) else {
        panic!("pg dump answers with stats");
    };
    let dumped = pgs.iter().find(|pg| pg.pgid == pgid).unwrap();
    assert_eq!(dumped.reason, reason);
    // The PGs no primary reported on are stale, and say so.
    let other = pgs.iter().find(|pg| pg.pgid != pgid).unwrap();
    assert!(other.reason.starts_with("stale: "), "{}", other.reason);
}

/// `osd lost` needs the confirmation and a down OSD, and records the epoch of the
/// mark in the map.
#[test]
fn only_a_down_osd_is_marked_lost_and_only_when_confirmed() {
    let (mut mon, now) = cluster(3);
    let lost = |confirm| Command::OsdLost {
        osd: OsdId(2),
        confirm,
    };
    let error = command(&mut mon, now, lost(true)).unwrap_err();
    assert!(error.contains("only a down OSD"), "{error}");
    command(&mut mon, now, Command::OsdDown(OsdId(2))).unwrap();
    let error = command(&mut mon, now, lost(false)).unwrap_err();
    assert!(error.contains("--yes-i-really-mean-it"), "{error}");
    assert_eq!(mon.map().osd(OsdId(2)).unwrap().lost_at, Epoch(0));
    let before = mon.map().epoch;
    let Ok(CommandOutput::Done { message, .. }) = command(&mut mon, now, lost(true)) else {
        panic!("marked lost");
    };
    assert_eq!(message, "marked osd.2 lost");
    assert_eq!(mon.map().epoch, before.next());
    assert_eq!(mon.map().osd(OsdId(2)).unwrap().lost_at, before.next());
    let error = command(
        &mut mon,
        now,
        Command::OsdLost {
            osd: OsdId(9),
            confirm: true,
        },
    );
    assert!(error.unwrap_err().contains("does not exist"));
}

/// A PG reporting unfound objects makes the cluster `HEALTH_ERR` with Ceph's two
/// checks, the warning naming the PG and the error counting it, and `pg dump` carries
/// the count; a report without them clears both.
#[test]
fn unfound_objects_are_a_health_error_naming_their_pgs() {
    use carmine_proto::{PgStat, PgState};
    let (mut mon, now) = cluster(3);
    let (pgid, mapping) = first_pg_of_new_pool(&mut mon, now, 4);
    let primary = mapping.primary.unwrap();
    let stat = |unfound: u64| PgStat {
        pgid,
        state: PgState(PgState::ACTIVE | PgState::DEGRADED | PgState::RECOVERY_UNFOUND),
        object_count: 8,
        data_bytes: 0,
        last_update: Default::default(),
        acting: mapping.acting.clone(),
        interval_start: Epoch(10),
        want_acting: Vec::new(),
        reason: String::new(),
        want_up_thru: Epoch(0),
        unfound,
    };
    report(&mut mon, now, primary, stat(2));
    let status = mon.status(now);
    assert_eq!(status.health, "HEALTH_ERR");
    let checks = status.health_checks;
    let unfound = checks.iter().find(|c| c.starts_with("OBJECT_UNFOUND:"));
    let unfound = unfound.unwrap_or_else(|| panic!("{checks:?}"));
    assert!(
        unfound.contains("2/8 objects unfound (25.000%)"),
        "{unfound}"
    );
    assert!(
        unfound.contains(&format!("pg {pgid} has 2 unfound objects")),
        "{unfound}"
    );
    let damaged = "PG_DAMAGED: Possible data damage: 1 pgs recovery_unfound";
    assert!(checks.iter().any(|c| c == damaged), "{checks:?}");
    let Ok(CommandOutput::PgStats { pgs, .. }) = command(&mut mon, now, Command::PgDump) else {
        panic!("pg dump answers with stats");
    };
    assert_eq!(pgs.iter().find(|pg| pg.pgid == pgid).unwrap().unfound, 2);

    report(&mut mon, now, primary, stat(0));
    let checks = mon.status(now).health_checks;
    assert!(
        !checks
            .iter()
            .any(|c| c.starts_with("OBJECT_UNFOUND") || c.starts_with("PG_DAMAGED")),
        "{checks:?}"
    );
}

fn usage_report(mon: &mut Monitor, now: Instant, osd: OsdId, used_bytes: u64) {
    let conn = u64::from(osd.0) + 1;
    let stats = Msg::OsdStats(carmine_proto::OsdStats {
        osd,
        map_epoch: mon.map().epoch,
        data_bytes: used_bytes / 2,
        metadata_bytes: used_bytes - used_bytes / 2,
        capacity_bytes: 1000,
        ..carmine_proto::OsdStats::default()
    });
    mon.handle_message(now, conn, EntityName::osd(osd), stats);
}

fn checks_starting(mon: &Monitor, now: Instant, code: &str) -> Vec<String> {
    mon.status(now)
        .health_checks
        .into_iter()
        .filter(|check| check.starts_with(&format!("{code}:")))
        .collect()
}

#[test]
fn usage_reports_mark_osds_nearfull_and_full_in_the_map_and_in_health() {
    use carmine_clustermap::Fullness;
    let (mut mon, now) = cluster(3);
    command(
        &mut mon,
        now,
        Command::PoolCreate(PoolSpec::replicated("rbd", 3, 4)),
    )
    .unwrap();
    let osd = OsdId(1);
    let before = mon.map().epoch;
    usage_report(&mut mon, now, osd, 500);
    assert_eq!(mon.map().epoch, before, "half full changes nothing");
    // (The pool's PGs have not reported: PG_NOT_CLEAN alone warns.)
    assert_eq!(mon.status(now).health, "HEALTH_WARN");
    assert!(checks_starting(&mon, now, "OSD_NEARFULL").is_empty());

    usage_report(&mut mon, now, osd, 860);
    assert_eq!(mon.map().epoch, before.next());
    assert_eq!(mon.map().fullness(osd), Fullness::NearFull);
    let status = mon.status(now);
    assert_eq!(status.health, "HEALTH_WARN");
    let nearfull = checks_starting(&mon, now, "OSD_NEARFULL");
    assert_eq!(nearfull.len(), 1, "{:?}", status.health_checks);
    assert!(nearfull[0].contains("osd.1"), "{nearfull:?}");
    // The same report again publishes nothing.
    usage_report(&mut mon, now, osd, 861);
    assert_eq!(mon.map().epoch, before.next());

    usage_report(&mut mon, now, osd, 960);
    assert_eq!(mon.map().fullness(osd), Fullness::Full);
    assert_eq!(mon.status(now).health, "HEALTH_ERR");
    assert_eq!(checks_starting(&mon, now, "OSD_FULL").len(), 1);
    let pool_full = checks_starting(&mon, now, "POOL_FULL");
    assert!(pool_full[0].contains("'rbd'"), "{pool_full:?}");
    assert!(checks_starting(&mon, now, "OSD_NEARFULL").is_empty());

    // Hysteresis: just below the ratio stays full; a clear drop clears it.
    let epoch = mon.map().epoch;
    usage_report(&mut mon, now, osd, 945);
    assert_eq!(mon.map().epoch, epoch);
    assert_eq!(mon.map().fullness(osd), Fullness::Full);
    usage_report(&mut mon, now, osd, 100);
    assert_eq!(mon.map().fullness(osd), Fullness::None);
    assert_eq!(mon.map().epoch, epoch.next());
    assert_eq!(mon.status(now).health, "HEALTH_WARN");
    assert!(checks_starting(&mon, now, "POOL_FULL").is_empty());
}

#[test]
fn full_ratios_are_set_in_the_map_and_checked() {
    use carmine_clustermap::settings::{
        MON_OSD_BACKFILLFULL_RATIO, MON_OSD_FULL_RATIO, MON_OSD_NEARFULL_RATIO,
    };
    use carmine_clustermap::Fullness;
    let (mut mon, now) = cluster(3);
    let set = |key: &str, value: &str| Command::ConfigSet {
        key: key.into(),
        value: Some(value.into()),
    };
    assert!(command(&mut mon, now, set(MON_OSD_FULL_RATIO, "1.5")).is_err());
    done(command(&mut mon, now, set(MON_OSD_FULL_RATIO, "0.5")));
    assert_eq!(mon.map().full_ratios().full, 0.5);
    // Full now below nearfull: Ceph's out-of-order warning.
    assert_eq!(checks_starting(&mon, now, "OSD_OUT_OF_ORDER_FULL").len(), 1);
    usage_report(&mut mon, now, OsdId(2), 600);
    assert_eq!(mon.map().fullness(OsdId(2)), Fullness::Full);
    done(command(&mut mon, now, set(MON_OSD_NEARFULL_RATIO, "0.4")));
    done(command(
        &mut mon,
        now,
        set(MON_OSD_BACKFILLFULL_RATIO, "0.45"),
    ));
    assert!(checks_starting(&mon, now, "OSD_OUT_OF_ORDER_FULL").is_empty());
}

/// Every primary reports all its PGs with `state`.
fn report_all_pgs(mon: &mut Monitor, now: Instant, state: u32) {
    let mut by_primary: BTreeMap<OsdId, Vec<carmine_proto::PgStat>> = BTreeMap::new();
    for pgid in mon.map().all_pgs().collect::<Vec<_>>() {
        let mapping = mon.map().pg_mapping(pgid).unwrap();
        let primary = mapping.primary.unwrap();
        (by_primary.entry(primary).or_default()).push(primary_stat(pgid, state, mapping.acting));
    }
    for (osd, pgs) in by_primary {
        let stats = Msg::OsdStats(carmine_proto::OsdStats {
            osd,
            map_epoch: mon.map().epoch,
            pgs,
            ..carmine_proto::OsdStats::default()
        });
        mon.handle_message(now, u64::from(osd.0) + 1, EntityName::osd(osd), stats);
    }
}

/// `osd safe-to-destroy` says no while PGs map to the OSD, lack reports or are not
/// all active+clean; `osd purge` needs the confirmation, a down OSD and that check
/// (or `--force`), and removes the OSD from the map and CRUSH; its id may boot anew.
#[test]
fn only_a_down_osd_safe_to_destroy_is_purged_unless_forced() {
    use carmine_proto::PgState;
    let (mut mon, now) = cluster(4);
    command(
        &mut mon,
        now,
        Command::PoolCreate(PoolSpec::replicated("rbd", 2, 16)),
    )
    .unwrap();
    let safe = |mon: &mut Monitor| command(mon, now, Command::OsdSafeToDestroy(OsdId(3)));
    let purge = |mon: &mut Monitor, confirm, force| {
        command(
            mon,
            now,
            Command::OsdPurge {
                osd: OsdId(3),
                confirm,
                force,
            },
        )
    };
    let clean = PgState::ACTIVE | PgState::CLEAN;
    report_all_pgs(&mut mon, now, clean);
    let error = safe(&mut mon).unwrap_err();
    assert!(error.contains("pgs are mapped to it"), "{error}");
    command(&mut mon, now, Command::OsdOut(OsdId(3))).unwrap();
    let error = safe(&mut mon).unwrap_err();
    assert!(error.contains("have no report"), "{error}");
    report_all_pgs(&mut mon, now, PgState::ACTIVE | PgState::DEGRADED);
    let error = safe(&mut mon).unwrap_err();
    assert!(error.contains("16 pgs are not active+clean"), "{error}");
    report_all_pgs(&mut mon, now, clean);
    let Ok(CommandOutput::Done { message, .. }) = safe(&mut mon) else {
        panic!("safe once every PG is clean elsewhere");
    };
    assert_eq!(
        message,
        "osd.3 is safe to destroy without reducing data durability"
    );
    // Purging: confirmed, down, and safe.
    let error = purge(&mut mon, true, false).unwrap_err();
    assert!(error.contains("is up"), "{error}");
    command(&mut mon, now, Command::OsdDown(OsdId(3))).unwrap();
    let error = purge(&mut mon, false, false).unwrap_err();
    assert!(error.contains("--yes-i-really-mean-it"), "{error}");
    report_all_pgs(&mut mon, now, PgState::ACTIVE | PgState::DEGRADED);
    let error = purge(&mut mon, true, false).unwrap_err();
    assert!(
        error.contains("not active+clean") && error.contains("--force"),
        "{error}"
    );
    report_all_pgs(&mut mon, now, clean);
    let before = mon.map().epoch;
    let Ok(CommandOutput::Done { message, .. }) = purge(&mut mon, true, false) else {
        panic!("purged");
    };
    assert_eq!(message, "purged osd.3");
    assert_eq!(mon.map().epoch, before.next());
    assert!(mon.map().osd(OsdId(3)).is_none());
    assert!(!mon.map().crush.device_in_any_bucket(3));
    assert_eq!(mon.status(now).osd_count, 3);
    let error = safe(&mut mon).unwrap_err();
    assert!(error.contains("does not exist"), "{error}");
    // `--force` purges an OSD that PGs still map to.
    command(&mut mon, now, Command::OsdDown(OsdId(2))).unwrap();
    let force = |confirm, force| Command::OsdPurge {
        osd: OsdId(2),
        confirm,
        force,
    };
    let error = command(&mut mon, now, force(true, false)).unwrap_err();
    assert!(error.contains("mapped to it"), "{error}");
    command(&mut mon, now, force(true, true)).unwrap();
    assert!(mon.map().osd(OsdId(2)).is_none());
    // The freed id boots as a new OSD.
    boot(&mut mon, now, 30, 3);
    let info = mon.map().osd(OsdId(3)).unwrap();
    assert!(info.up && info.lost_at == Epoch(0));
    assert!(mon.map().crush.device_in_any_bucket(3));
}
