//! What a subscriber receives: incrementals from the epoch it holds, or a full map when
//! it is new or too far behind, also after the monitor restarts.

use super::*;
use carmine_proto::{Command, MonCommand, MonGetMap, OsdMapMsg};
use carmine_types::Epoch;

const SUBSCRIBER: ConnId = 500;

/// Publishes `count` epochs, each setting one config key.
fn publish_epochs(mon: &mut Monitor, now: Instant, count: u32) {
    for index in 0..count {
        let command = Command::ConfigSet {
            key: format!("key{index}"),
            value: Some("v".into()),
        };
        let out = mon.handle_message(
            now,
            99,
            EntityName::client(1),
            Msg::MonCommand(MonCommand {
                tid: u64::from(index),
                command,
            }),
        );
        assert!(out.iter().any(
            |o| matches!(o, MonOutput::Send(99, Msg::MonCommandReply(r)) if r.result.is_ok())
        ));
    }
}

/// The map messages a subscriber holding `have` is sent.
fn get_map(mon: &mut Monitor, now: Instant, have: Epoch) -> Vec<OsdMapMsg> {
    let request = Msg::MonGetMap(MonGetMap {
        have,
        subscribe: true,
    });
    mon.handle_message(now, SUBSCRIBER, EntityName::client(2), request)
        .into_iter()
        .filter_map(|output| match output {
            MonOutput::Send(SUBSCRIBER, Msg::OsdMap(msg)) => Some(msg),
            _ => None,
        })
        .collect()
}

/// Every map `messages` bring a subscriber holding `held`, checked to end at `newest`.
fn follow(held: &Arc<OsdMap>, messages: &[OsdMapMsg], newest: &Arc<OsdMap>) -> Vec<Arc<OsdMap>> {
    let mut current = held.clone();
    let mut maps = Vec::new();
    for msg in messages {
        let step = msg.advance(Some(&current));
        assert_eq!(step.request, None, "{:?}", step.error);
        current = step.maps.last().cloned().unwrap_or(current);
        maps.extend(step.maps);
    }
    assert_eq!(&current, newest);
    maps
}

#[test]
fn a_subscriber_behind_by_k_epochs_gets_k_incrementals() {
    let now = Instant::now();
    let mut mon = Monitor::new(OsdMap::new_dev(3), MonConfig::default(), now);
    let mut maps = vec![mon.map().clone()];
    for _ in 0..6 {
        publish_epochs(&mut mon, now, 1);
        maps.push(mon.map().clone());
    }
    for k in 1..=6 {
        let held = &maps[6 - k];
        let messages = get_map(&mut mon, now, held.epoch);
        assert_eq!(messages.len(), 1);
        assert!(messages[0].full.is_none(), "behind by {k}: no full map");
        assert_eq!(messages[0].incrementals.len(), k);
        let seen = follow(held, &messages, mon.map());
        assert_eq!(seen, maps[7 - k..].to_vec(), "every epoch, in order");
    }
    let newest = mon.map().epoch;
    assert!(get_map(&mut mon, now, newest).is_empty());
}

#[test]
fn a_newcomer_or_one_too_far_behind_gets_a_full_map() {
    let now = Instant::now();
    let mut mon = Monitor::new(OsdMap::new_dev(3), MonConfig::default(), now);
    let first = mon.map().clone();
    publish_epochs(&mut mon, now, RECENT_INCREMENTALS_MAX as u32 + 2);
    for have in [Epoch(0), first.epoch, first.epoch.next()] {
        let messages = get_map(&mut mon, now, have);
        assert_eq!(messages.len(), 1);
        assert_eq!(messages[0].full.as_ref(), Some(mon.map()), "have {have}");
        assert!(messages[0].incrementals.is_empty());
    }
    // Exactly as far back as the changes kept: incrementals still.
    let oldest_served = Epoch(mon.map().epoch.0 - RECENT_INCREMENTALS_MAX as u32);
    let messages = get_map(&mut mon, now, oldest_served);
    assert!(messages[0].full.is_none());
    assert_eq!(messages[0].incrementals.len(), RECENT_INCREMENTALS_MAX);
}

#[test]
fn a_restarted_monitor_serves_incrementals_after_its_snapshot_and_full_maps_before() {
    let now = Instant::now();
    let mut mon = Monitor::new(OsdMap::new_dev(3), MonConfig::default(), now);
    let mut maps = vec![mon.map().clone()];
    // Past a compaction: the store keeps a snapshot map and the entries after it.
    for _ in 0..storage::LOG_ENTRIES_MAX + 4 {
        publish_epochs(&mut mon, now, 1);
        maps.push(mon.map().clone());
    }
    let image = mon.take_store().expect("the store changed");
    let store = MonStore::from_bytes(&image).unwrap();
    let snapshot_epoch = store.snapshot_map().unwrap().epoch;
    assert!(snapshot_epoch > maps[0].epoch, "the log was compacted");
    let mut mon = Monitor::open(0, &[0], store, MonConfig::default(), now).unwrap();
    assert_eq!(mon.map(), maps.last().unwrap());

    // Held before the snapshot: the restarted monitor lacks the changes, full map.
    let messages = get_map(&mut mon, now, maps[0].epoch);
    assert_eq!(messages[0].full.as_ref(), Some(mon.map()));
    // Held at or after the snapshot: the replayed log rebuilt the changes.
    let held = maps.iter().find(|m| m.epoch == snapshot_epoch).unwrap();
    let messages = get_map(&mut mon, now, held.epoch);
    assert!(messages[0].full.is_none());
    follow(held, &messages, mon.map());
    // New epochs go out as incrementals again.
    let out = mon.handle_message(
        now,
        99,
        EntityName::client(1),
        Msg::MonCommand(MonCommand {
            tid: 1,
            command: Command::ConfigSet {
                key: "after".into(),
                value: Some("restart".into()),
            },
        }),
    );
    let pushed = out.iter().find_map(|o| match o {
        MonOutput::Send(SUBSCRIBER, Msg::OsdMap(msg)) => Some(msg),
        _ => None,
    });
    let pushed = pushed.expect("the subscriber is pushed the new epoch");
    assert_eq!(pushed.incrementals.len(), 1);
    assert!(pushed.full.is_none());
}

#[test]
fn a_subscriber_is_not_pushed_epochs_it_already_holds() {
    let now = Instant::now();
    let mut mon = Monitor::new(OsdMap::new_dev(3), MonConfig::default(), now);
    // It holds two epochs more than this monitor has applied (from a monitor ahead).
    let ahead = Epoch(mon.map().epoch.0 + 2);
    assert!(get_map(&mut mon, now, ahead).is_empty());
    let pushed_count = |mon: &mut Monitor| {
        let command = Command::ConfigSet {
            key: "k".into(),
            value: Some(mon.map().epoch.0.to_string()),
        };
        let request = Msg::MonCommand(MonCommand { tid: 1, command });
        mon.handle_message(now, 99, EntityName::client(1), request)
            .iter()
            .filter(|o| matches!(o, MonOutput::Send(SUBSCRIBER, Msg::OsdMap(_))))
            .count()
    };
    assert_eq!(pushed_count(&mut mon), 0, "it holds this epoch");
    assert_eq!(pushed_count(&mut mon), 0, "and this one");
    assert_eq!(pushed_count(&mut mon), 1, "the first epoch it lacks");
}
