use super::*;
use crate::{ConnId, MonConfig, MonOutput, Monitor};
use carmine_clustermap::settings::{
    MON_OSD_DOWN_OUT_INTERVAL, MON_OSD_MIN_DOWN_REPORTERS, OSD_HEARTBEAT_GRACE,
};
use carmine_clustermap::OsdFlags;
use carmine_proto::{Command, CommandOutput, MonCommand, Msg, OsdBoot};
use carmine_types::EntityName;
use std::net::SocketAddr;

const SECOND: Duration = Duration::from_secs(1);

fn boot(mon: &mut Monitor, now: Instant, conn: ConnId, id: u32, instance: u64) {
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
            instance,
        }),
    );
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

fn config_set(mon: &mut Monitor, now: Instant, key: &str, value: &str) -> Result<(), String> {
    command(
        mon,
        now,
        Command::ConfigSet {
            key: key.into(),
            value: Some(value.into()),
        },
    )
    .map(|_| ())
}

/// A monitor with `osds` OSDs booted, each keeping its session open (so the session
/// backstop never marks them down).
fn cluster(osds: u32) -> (Monitor, Instant) {
    let now = Instant::now();
    let mut mon = Monitor::new(OsdMap::new_dev(osds), MonConfig::default(), now);
    for id in 0..osds {
        boot(&mut mon, now, u64::from(id) + 1, id, 1);
    }
    (mon, now)
}

fn report(mon: &mut Monitor, now: Instant, reporter: u32, target: u32, alive: bool) {
    let failure = OsdFailure {
        target: OsdId(target),
        reporter: OsdId(reporter),
        epoch: mon.map().epoch,
        silent_for_ms: 3_000,
        alive,
    };
    let conn = u64::from(reporter) + 1;
    mon.handle_message(
        now,
        conn,
        EntityName::osd(OsdId(reporter)),
        Msg::OsdFailure(failure),
    );
}

#[test]
fn one_report_marks_an_osd_down_when_one_reporter_is_enough() {
    let (mut mon, now) = cluster(3);
    mon.handle_tick(now + SECOND);
    assert!(mon.map().is_up(OsdId(2)), "sessions alone keep it up");
    report(&mut mon, now + SECOND, 0, 2, false);
    mon.handle_tick(now + SECOND);
    assert!(!mon.map().is_up(OsdId(2)));
    assert!(mon.map().is_up(OsdId(0)));
    assert!(mon.map().is_up(OsdId(1)));
    assert!(
        mon.failures.reporters(OsdId(2)).is_empty(),
        "moot once down"
    );
}

#[test]
fn two_reporters_are_needed_when_configured_and_a_cancellation_withdraws_one() {
    let (mut mon, now) = cluster(4);
    config_set(&mut mon, now, MON_OSD_MIN_DOWN_REPORTERS, "2").unwrap();
    report(&mut mon, now, 0, 3, false);
    mon.handle_tick(now + SECOND / 2);
    assert!(mon.map().is_up(OsdId(3)), "one reporter of two");
    // The same reporter again is still one reporter.
    report(&mut mon, now + SECOND / 2, 0, 3, false);
    mon.handle_tick(now + SECOND / 2);
    assert!(mon.map().is_up(OsdId(3)));
    // It hears osd.3 again; then another OSD reports: still one.
    report(&mut mon, now + SECOND, 0, 3, true);
    report(&mut mon, now + SECOND, 1, 3, false);
    mon.handle_tick(now + SECOND);
    assert!(
        mon.map().is_up(OsdId(3)),
        "the withdrawn report does not count"
    );
    assert_eq!(mon.failures.reporters(OsdId(3)), vec![OsdId(1)]);
    // A second distinct reporter: down.
    report(&mut mon, now + 2 * SECOND, 2, 3, false);
    mon.handle_tick(now + 2 * SECOND);
    assert!(!mon.map().is_up(OsdId(3)));
}

#[test]
fn reports_older_than_the_grace_do_not_count() {
    let (mut mon, now) = cluster(3);
    config_set(&mut mon, now, MON_OSD_MIN_DOWN_REPORTERS, "2").unwrap();
    let grace = MonConfig::default().osd_heartbeat_grace;
    report(&mut mon, now, 0, 2, false);
    let later = now + grace + SECOND;
    report(&mut mon, later, 1, 2, false);
    mon.handle_tick(later);
    assert!(mon.map().is_up(OsdId(2)), "osd.0's report went stale");
    // osd.0 repeats its report (as OSDs do while the silence lasts): now two.
    report(&mut mon, later, 0, 2, false);
    mon.handle_tick(later);
    assert!(!mon.map().is_up(OsdId(2)));
}

#[test]
fn reports_by_down_osds_or_about_an_earlier_incarnation_are_ignored() {
    let (mut mon, now) = cluster(3);
    command(&mut mon, now, Command::OsdDown(OsdId(0))).unwrap();
    assert!(!mon.map().is_up(OsdId(0)));
    report(&mut mon, now, 0, 2, false);
    mon.handle_tick(now);
    assert!(mon.map().is_up(OsdId(2)), "a down reporter is not believed");

    // osd.2 restarts (a new instance): a report made under an older map judged the
    // old process and is ignored.
    let before_restart = mon.map().epoch;
    boot(&mut mon, now, 50, 2, 2);
    let up_from = mon.map().osd(OsdId(2)).unwrap().up_from;
    assert!(up_from > before_restart);
    let stale = OsdFailure {
        target: OsdId(2),
        reporter: OsdId(1),
        epoch: before_restart,
        silent_for_ms: 5_000,
        alive: false,
    };
    mon.handle_message(now, 2, EntityName::osd(OsdId(1)), Msg::OsdFailure(stale));
    mon.handle_tick(now);
    assert!(mon.map().is_up(OsdId(2)));
    assert!(mon.failures.reporters(OsdId(2)).is_empty());

    // A report sent in another OSD's name is ignored too.
    let forged = OsdFailure {
        target: OsdId(2),
        reporter: OsdId(1),
        epoch: mon.map().epoch,
        silent_for_ms: 5_000,
        alive: false,
    };
    mon.handle_message(now, 99, EntityName::client(5), Msg::OsdFailure(forged));
    mon.handle_tick(now);
    assert!(mon.map().is_up(OsdId(2)));
}

#[test]
fn nodown_suspends_marking_down_on_reports() {
    let (mut mon, now) = cluster(3);
    let flag = |set| Command::OsdFlag {
        flag: OsdFlags::NODOWN,
        set,
    };
    command(&mut mon, now, flag(true)).unwrap();
    report(&mut mon, now, 0, 1, false);
    mon.handle_tick(now + SECOND / 2);
    assert!(mon.map().is_up(OsdId(1)), "nodown");
    command(&mut mon, now + SECOND, flag(false)).unwrap();
    report(&mut mon, now + SECOND, 0, 1, false);
    mon.handle_tick(now + SECOND);
    assert!(!mon.map().is_up(OsdId(1)));
}

#[test]
fn a_wrongly_marked_down_osd_that_boots_again_is_up_and_old_reports_are_moot() {
    let (mut mon, now) = cluster(3);
    report(&mut mon, now, 0, 2, false);
    mon.handle_tick(now);
    assert!(!mon.map().is_up(OsdId(2)));
    // The same process (same instance) sees itself down and boots again.
    boot(&mut mon, now + SECOND, 3, 2, 1);
    assert!(mon.map().is_up(OsdId(2)));
    // A report still in flight from before judged the earlier incarnation.
    let late = OsdFailure {
        target: OsdId(2),
        reporter: OsdId(0),
        epoch: Epoch(mon.map().osd(OsdId(2)).unwrap().up_from.0 - 1),
        silent_for_ms: 4_000,
        alive: false,
    };
    mon.handle_message(
        now + SECOND,
        1,
        EntityName::osd(OsdId(0)),
        Msg::OsdFailure(late),
    );
    mon.handle_tick(now + SECOND);
    assert!(mon.map().is_up(OsdId(2)));
}

#[test]
fn known_config_keys_are_checked_and_read() {
    let (mut mon, now) = cluster(3);
    let error = config_set(&mut mon, now, OSD_HEARTBEAT_GRACE, "soon").unwrap_err();
    assert!(error.contains("osd_heartbeat_grace"), "{error}");
    let error = config_set(&mut mon, now, MON_OSD_MIN_DOWN_REPORTERS, "0").unwrap_err();
    assert!(error.contains("whole number"), "{error}");
    assert!(!mon.map().config.contains_key(OSD_HEARTBEAT_GRACE));
    config_set(&mut mon, now, "site/anything", "free form").unwrap();

    // A longer grace keeps an older report counting.
    config_set(&mut mon, now, OSD_HEARTBEAT_GRACE, "10").unwrap();
    config_set(&mut mon, now, MON_OSD_MIN_DOWN_REPORTERS, "2").unwrap();
    report(&mut mon, now, 0, 2, false);
    report(&mut mon, now + 8 * SECOND, 1, 2, false);
    mon.handle_tick(now + 8 * SECOND);
    assert!(!mon.map().is_up(OsdId(2)));

    // mon_osd_down_out_interval: a down OSD goes out after it; 0 never.
    config_set(&mut mon, now, MON_OSD_DOWN_OUT_INTERVAL, "0").unwrap();
    mon.handle_tick(now + 3600 * SECOND);
    assert!(
        mon.map().osd(OsdId(2)).unwrap().is_in(),
        "0 never marks out"
    );
    config_set(&mut mon, now, MON_OSD_DOWN_OUT_INTERVAL, "5").unwrap();
    mon.handle_tick(now + 3600 * SECOND);
    assert!(!mon.map().osd(OsdId(2)).unwrap().is_in());
}
