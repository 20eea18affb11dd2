//! Monitor groups of 3 and 5 wired in memory: the test delivers every message between
//! monitors, in order, on virtual time, and can kill, restart and partition them. A
//! monitor's "disk" is the last store image it asked to persist. Every map any monitor
//! applies is checked against every other monitor's map of the same epoch.

use super::*;
use carmine_clustermap::PoolSpec;
use carmine_proto::{Command, CommandOutput, MonCommand, MonCommandReply, OsdBoot};
use carmine_types::encoding::Encode;
use carmine_types::Epoch;
use std::collections::BTreeMap;

/// Monitor `i` reaches monitor `j` on its connection `PEER_CONN + j`; `j` sees the
/// message arrive on `INBOUND_CONN + i`. Client connections are below both.
const PEER_CONN: ConnId = 1000;
const INBOUND_CONN: ConnId = 2000;

struct Group {
    now: Instant,
    config: MonConfig,
    ranks: Vec<u64>,
    mons: Vec<Option<Monitor>>,
    disks: Vec<bytes::Bytes>,
    wire: VecDeque<(u64, u64, Msg)>,
    /// Pairs that cannot talk (both directions are listed).
    cut: BTreeSet<(u64, u64)>,
    /// What monitors sent to clients and OSDs: (rank, conn, message).
    to_clients: Vec<(u64, ConnId, Msg)>,
    /// Every epoch's map as first applied, encoded.
    published: BTreeMap<Epoch, bytes::Bytes>,
    next_client_conn: ConnId,
    /// Raft snapshots still to lose on the wire.
    snapshots_to_lose: usize,
}

impl Group {
    /// `size` monitors whose initial map has OSDs 0 and 2 up (with a grace long enough
    /// that they stay up) and OSD 1 not yet booted.
    fn new(size: u64) -> Group {
        let config = MonConfig {
            osd_down_grace: Duration::from_secs(3600),
            ..MonConfig::default()
        };
        Group::with_config(size, config)
    }

    fn with_config(size: u64, config: MonConfig) -> Group {
        let now = Instant::now();
        let ranks: Vec<u64> = (0..size).collect();
        let mut initial = OsdMap::new_dev(3);
        for id in [0, 2] {
            let addr = format!("127.0.0.1:{}", 6800 + id).parse().unwrap();
            initial
                .boot_osd(OsdId(id), vec![addr], format!("host{id}"))
                .unwrap();
        }
        let mut group = Group {
            now,
            config: config.clone(),
            ranks: ranks.clone(),
            mons: Vec::new(),
            disks: Vec::new(),
            wire: VecDeque::new(),
            cut: BTreeSet::new(),
            to_clients: Vec::new(),
            published: BTreeMap::new(),
            next_client_conn: 1,
            snapshots_to_lose: 0,
        };
        for &rank in &ranks {
            let store = MonStore::bootstrap(&initial, &ranks);
            group.disks.push(store.to_bytes().into());
            group.mons.push(None);
            group.start(rank);
        }
        group
    }

    fn start(&mut self, rank: u64) {
        let store = MonStore::from_bytes(&self.disks[rank as usize]).expect("own image loads");
        let mut mon = Monitor::open(rank, &self.ranks, store, self.config.clone(), self.now)
            .expect("monitor opens");
        for &peer in &self.ranks {
            mon.handle_peer_connected(peer, PEER_CONN + peer);
        }
        self.mons[rank as usize] = Some(mon);
    }

    fn kill(&mut self, rank: u64) {
        self.mons[rank as usize] = None;
        self.wire
            .retain(|(from, to, _)| *from != rank && *to != rank);
    }

    fn partition(&mut self, side: &[u64]) {
        for &a in side {
            for &b in &self.ranks {
                if !side.contains(&b) {
                    self.cut.insert((a, b));
                    self.cut.insert((b, a));
                }
            }
        }
    }

    fn heal(&mut self) {
        self.cut.clear();
    }

    fn mon(&self, rank: u64) -> &Monitor {
        self.mons[rank as usize]
            .as_ref()
            .expect("monitor is running")
    }

    fn live(&self) -> impl Iterator<Item = &Monitor> {
        self.mons.iter().flatten()
    }

    /// Feeds one input to monitor `rank`, persists, then carries out its outputs.
    fn call(&mut self, rank: u64, input: impl FnOnce(&mut Monitor) -> Vec<MonOutput>) {
        let Some(mon) = self.mons[rank as usize].as_mut() else {
            return;
        };
        let outputs = input(mon);
        if let Some(image) = mon.take_store() {
            self.disks[rank as usize] = image;
        }
        for output in outputs {
            match output {
                MonOutput::PersistMap(map) => {
                    let bytes = map.to_bytes();
                    let first = self.published.entry(map.epoch).or_insert(bytes.clone());
                    assert_eq!(
                        *first, bytes,
                        "mon.{rank} applied a different map for epoch {}",
                        map.epoch.0
                    );
                }
                MonOutput::Send(conn, msg) if (PEER_CONN..INBOUND_CONN).contains(&conn) => {
                    self.wire.push_back((rank, conn - PEER_CONN, msg));
                }
                MonOutput::Send(conn, msg) => self.to_clients.push((rank, conn, msg)),
            }
        }
    }

    /// Delivers messages between monitors until none is left (or a bound).
    fn deliver(&mut self) {
        for _ in 0..100_000 {
            let Some((from, to, msg)) = self.wire.pop_front() else {
                return;
            };
            if self.cut.contains(&(from, to)) {
                continue;
            }
            if self.snapshots_to_lose > 0 && is_raft_snapshot(&msg) {
                self.snapshots_to_lose -= 1;
                continue;
            }
            let now = self.now;
            self.call(to, |mon| {
                mon.handle_message(now, INBOUND_CONN + from, EntityName::mon(from), msg)
            });
        }
        panic!("monitors kept talking without end");
    }

    /// Runs `duration` of virtual time in Raft ticks.
    fn run_for(&mut self, duration: Duration) {
        let end = self.now + duration;
        while self.now < end {
            self.now += self.config.raft_tick;
            for rank in self.ranks.clone() {
                let now = self.now;
                self.call(rank, |mon| mon.handle_tick(now));
                self.deliver();
            }
        }
    }

    fn leaders(&self) -> Vec<u64> {
        self.live()
            .filter(|mon| mon.is_leader())
            .map(|mon| mon.rank())
            .collect()
    }

    /// The one leader every live monitor agrees on.
    fn agreed_leader(&self) -> u64 {
        let leaders = self.leaders();
        assert_eq!(leaders.len(), 1, "one leader, not {leaders:?}");
        for mon in self.live() {
            assert_eq!(mon.leader(), Some(leaders[0]), "mon.{} follows", mon.rank());
        }
        leaders[0]
    }

    fn follower(&self) -> u64 {
        let leader = self.agreed_leader();
        self.live()
            .map(|mon| mon.rank())
            .find(|&rank| rank != leader)
            .expect("a follower")
    }

    /// Sends a client command to monitor `rank`; returns the client connection.
    fn send_command(&mut self, rank: u64, command: Command) -> ConnId {
        let conn = self.next_client_conn;
        self.next_client_conn += 1;
        let now = self.now;
        let msg = Msg::MonCommand(MonCommand { tid: 77, command });
        self.call(rank, |mon| {
            mon.handle_message(now, conn, EntityName::client(conn), msg)
        });
        self.deliver();
        conn
    }

    fn reply(&self, conn: ConnId) -> Option<Result<CommandOutput, String>> {
        self.to_clients.iter().find_map(|(_, c, msg)| match msg {
            Msg::MonCommandReply(MonCommandReply { tid: 77, result }) if *c == conn => {
                Some(result.clone())
            }
            _ => None,
        })
    }

    /// Runs a command at `rank` to its answer (within the command timeout).
    fn command(&mut self, rank: u64, command: Command) -> Result<CommandOutput, String> {
        let conn = self.send_command(rank, command);
        for _ in 0..200 {
            if let Some(result) = self.reply(conn) {
                return result;
            }
            self.run_for(self.config.raft_tick);
        }
        panic!("no answer to the command at mon.{rank}");
    }

    fn create_pool(&mut self, rank: u64, name: &str) -> Epoch {
        let spec = PoolSpec::replicated(name, 2, 8);
        match self.command(rank, Command::PoolCreate(spec)) {
            Ok(CommandOutput::Done { epoch, .. }) => epoch,
            other => panic!("pool create at mon.{rank}: {other:?}"),
        }
    }

    fn assert_converged(&self) {
        let epoch = self.live().map(|m| m.map().epoch).max().expect("a monitor");
        for mon in self.live() {
            assert_eq!(mon.map().epoch, epoch, "mon.{} is behind", mon.rank());
            assert_eq!(mon.map().to_bytes(), self.published[&epoch]);
        }
    }
}

fn settled(size: u64) -> Group {
    let mut group = Group::new(size);
    group.run_for(Duration::from_secs(3));
    group
}

fn settled_with(size: u64, config: MonConfig) -> Group {
    let mut group = Group::with_config(size, config);
    group.run_for(Duration::from_secs(3));
    group
}

#[test]
fn three_and_five_monitors_elect_one_leader() {
    for size in [3, 5] {
        let group = settled(size);
        let leader = group.agreed_leader();
        let status = group.mon(leader).status(group.now);
        assert_eq!(status.mon_leader, Some(leader));
        assert_eq!(status.mon_quorum, group.ranks, "all {size} in quorum");
        assert_eq!(status.mon_count, size as u32);
    }
}

#[test]
fn a_pool_created_at_a_follower_is_applied_everywhere_in_order() {
    let mut group = settled(3);
    let follower = group.follower();
    let first = group.create_pool(follower, "one");
    let second = group.create_pool(group.agreed_leader(), "two");
    assert_eq!(second, first.next());
    group.run_for(Duration::from_millis(500));
    group.assert_converged();
    for mon in group.live() {
        assert!(mon.map().pool_by_name("one").is_some());
        assert!(mon.map().pool_by_name("two").is_some());
    }
    // A bad command is refused by the leader, and the follower relays the refusal.
    let error = group
        .command(
            follower,
            Command::PoolCreate(PoolSpec::replicated("one", 2, 8)),
        )
        .unwrap_err();
    assert!(error.contains("already exists"), "{error}");
    // Status is answered by the leader, with the group's view.
    let Ok(CommandOutput::Status(status)) = group.command(follower, Command::Status) else {
        panic!("status");
    };
    assert_eq!(status.mon_leader, Some(group.agreed_leader()));
    assert_eq!(status.mon_quorum.len(), 3);
}

#[test]
fn an_osd_booting_at_a_follower_comes_up_everywhere_and_followers_serve_maps() {
    let mut group = settled_with(3, MonConfig::default());
    let follower = group.follower();
    let boot = Msg::OsdBoot(OsdBoot {
        osd: OsdId(1),
        shard_addrs: vec!["127.0.0.1:6801".parse().unwrap()],
        host: "host1".into(),
        fsid: 0,
        instance: 1,
    });
    let now = group.now;
    group.call(follower, |mon| {
        mon.handle_message(now, 500, EntityName::osd(OsdId(1)), boot)
    });
    group.deliver();
    group.run_for(Duration::from_millis(500));
    group.assert_converged();
    assert!(group.live().all(|mon| mon.map().is_up(OsdId(1))));
    // The OSD's session at the follower got the new epoch pushed.
    let pushed = group.to_clients.iter().any(|(rank, conn, msg)| {
        *rank == follower
            && *conn == 500
            && matches!(msg, Msg::OsdMap(m) if m.full.as_ref().is_some_and(|map| map.is_up(OsdId(1))))
    });
    assert!(pushed, "the follower pushed the map to its subscriber");
    // It stays up while its stats reach the leader through the follower...
    for _ in 0..5 {
        let stats = Msg::OsdStats(OsdStats {
            osd: OsdId(1),
            ..OsdStats::default()
        });
        let now = group.now;
        group.call(follower, |mon| {
            mon.handle_message(now, 500, EntityName::osd(OsdId(1)), stats)
        });
        group.run_for(Duration::from_secs(1));
    }
    assert!(group.live().all(|mon| mon.map().is_up(OsdId(1))));
    // ...and goes down once it falls silent for the grace period.
    group.run_for(group.config.osd_down_grace + Duration::from_secs(1));
    assert!(group.live().all(|mon| !mon.map().is_up(OsdId(1))));
    group.assert_converged();
    let _ = group.leaders();
}

#[test]
fn killing_the_leader_elects_another_and_loses_no_committed_change() {
    let mut group = settled(3);
    let old = group.agreed_leader();
    let committed = group.create_pool(group.follower(), "before");
    group.kill(old);
    group.run_for(Duration::from_secs(4));
    let new = group.agreed_leader();
    assert_ne!(new, old);
    for mon in group.live() {
        assert!(mon.map().epoch >= committed);
        assert!(mon.map().pool_by_name("before").is_some());
    }
    let survivor = group.follower();
    let after = group.create_pool(survivor, "after");
    assert!(after > committed);
    // The old leader restarts from its disk and catches up.
    group.start(old);
    group.run_for(Duration::from_secs(3));
    group.assert_converged();
    assert!(group.mon(old).map().pool_by_name("after").is_some());
    assert_eq!(
        group.agreed_leader(),
        new,
        "a returning monitor does not disrupt"
    );
}

#[test]
fn a_minority_partition_cannot_commit() {
    let mut group = settled(5);
    let leader = group.agreed_leader();
    let buddy = group.follower();
    group.partition(&[leader, buddy]);
    let stuck = group.send_command(
        leader,
        Command::PoolCreate(PoolSpec::replicated("lost", 2, 8)),
    );
    group.run_for(Duration::from_secs(4));
    // The majority side elected its own leader and goes on.
    let majority: Vec<u64> = group
        .ranks
        .iter()
        .copied()
        .filter(|r| *r != leader && *r != buddy)
        .collect();
    let new_leader = group
        .mon(majority[0])
        .leader()
        .expect("majority has a leader");
    assert!(majority.contains(&new_leader));
    group.create_pool(majority[1], "kept");
    for &rank in &[leader, buddy] {
        assert!(group.mon(rank).map().pool_by_name("lost").is_none());
        assert!(group.mon(rank).map().pool_by_name("kept").is_none());
    }
    group.run_for(group.config.command_timeout);
    let error = group.reply(stuck).expect("answered").unwrap_err();
    assert!(
        error.contains("may or may not") || error.contains("quorum"),
        "{error}"
    );
    group.heal();
    group.run_for(Duration::from_secs(4));
    group.assert_converged();
    for mon in group.live() {
        assert!(mon.map().pool_by_name("kept").is_some());
        assert!(mon.map().pool_by_name("lost").is_none());
    }
}

#[test]
fn a_whole_group_restarts_from_its_persisted_state() {
    let mut group = settled(3);
    for name in ["a", "b", "c"] {
        let rank = group.follower();
        group.create_pool(rank, name);
    }
    // Enough changes to fold the log into a snapshot at least once.
    for index in 0..storage::LOG_ENTRIES_MAX {
        let leader = group.agreed_leader();
        group.create_pool(leader, &format!("p{index}"));
    }
    group.run_for(Duration::from_millis(500));
    let epoch = group.mon(0).map().epoch;
    for rank in group.ranks.clone() {
        group.kill(rank);
    }
    for rank in group.ranks.clone() {
        group.start(rank);
        assert!(group.mon(rank).map().epoch <= epoch);
    }
    group.run_for(Duration::from_secs(3));
    group.assert_converged();
    assert_eq!(group.mon(0).map().epoch, epoch);
    assert!(group.mon(2).map().pool_by_name("c").is_some());
    let next = group.create_pool(group.follower(), "d");
    assert_eq!(next, epoch.next());
}

#[test]
fn a_lagging_monitor_catches_up_from_a_snapshot() {
    let (mut group, lagging) = settled_with_a_follower_past_the_log();
    group.start(lagging);
    group.run_for(Duration::from_secs(3));
    group.assert_converged();
}

/// A settled group of three whose follower, down, missed more changes than the
/// log keeps (it needs a snapshot); returns the group and that follower's rank.
fn settled_with_a_follower_past_the_log() -> (Group, u64) {
    let mut group = settled(3);
    let leader = group.agreed_leader();
    let lagging = group.follower();
    group.kill(lagging);
    for index in 0..storage::LOG_ENTRIES_MAX * 2 {
        group.create_pool(leader, &format!("p{index}"));
    }
    (group, lagging)
}

/// A snapshot lost on its way leaves the follower behind only until the leader
/// learns of it. raft-rs sends a follower nothing more while a snapshot to it is
/// outstanding, until the application reports the snapshot's fate; unreported, a
/// lost one stranded that monitor for as long as the leader lasted (the simulator's
/// seed 26545 of expansion, remaps, space and snapshot trims).
#[test]
fn a_lagging_monitor_catches_up_when_its_snapshot_is_lost() {
    let (mut group, lagging) = settled_with_a_follower_past_the_log();
    let leader = group.agreed_leader();
    group.snapshots_to_lose = 1;
    group.start(lagging);
    group.run_for(Duration::from_secs(3));
    assert_eq!(group.snapshots_to_lose, 0, "no snapshot was sent");
    assert_eq!(group.agreed_leader(), leader);
    group.assert_converged();
}

fn is_raft_snapshot(msg: &Msg) -> bool {
    let Msg::MonRaft(raft) = msg else {
        return false;
    };
    storage::decode_raft_message(&raft.payload)
        .is_ok_and(|m| m.get_msg_type() == raft::prelude::MessageType::MsgSnapshot)
}

#[test]
fn a_failure_report_made_at_a_follower_reaches_the_leader() {
    let mut group = settled(3);
    let follower = group.follower();
    // The bootstrapped map says osd.2 is up from the epoch after it; a reporter holds
    // at least that epoch.
    let map = group.mon(follower).map().clone();
    let epoch = map.epoch.max(map.osd(OsdId(2)).unwrap().up_from);
    let report = |alive| {
        Msg::OsdFailure(carmine_proto::OsdFailure {
            target: OsdId(2),
            reporter: OsdId(0),
            epoch,
            silent_for_ms: 3_000,
            alive,
        })
    };
    // Withdrawn before the leader acts on it: nothing happens.
    let now = group.now;
    group.call(follower, |mon| {
        mon.handle_message(now, 500, EntityName::osd(OsdId(0)), report(false))
    });
    group.call(follower, |mon| {
        mon.handle_message(now, 500, EntityName::osd(OsdId(0)), report(true))
    });
    group.deliver();
    group.run_for(Duration::from_millis(500));
    assert!(group.live().all(|mon| mon.map().is_up(OsdId(2))));
    // Standing: the leader marks osd.2 down and every monitor applies it.
    let now = group.now;
    group.call(follower, |mon| {
        mon.handle_message(now, 500, EntityName::osd(OsdId(0)), report(false))
    });
    group.deliver();
    group.run_for(Duration::from_millis(500));
    group.assert_converged();
    assert!(group.live().all(|mon| !mon.map().is_up(OsdId(2))));
    assert!(group.live().all(|mon| mon.map().is_up(OsdId(0))));
}

/// `osd safe-to-destroy` is answered from the leader's own state, without a
/// proposal, so a leader cut off from the others must not answer it: the majority
/// may have moved past its map (seed 204 of `--faults
/// all,decommission,expansion,replacements,remaps,space --snap-trim --disk mem` had a
/// cut-off leader answer yes from a map that showed the OSD out, while the commands
/// marking it in again waited for a quorum).
#[test]
fn a_cut_off_leader_does_not_answer_safe_to_destroy() {
    let mut group = settled(3);
    let leader = group.agreed_leader();
    let ask = Command::OsdSafeToDestroy(OsdId(9));
    let error = group.command(leader, ask.clone()).unwrap_err();
    assert!(error.contains("does not exist"), "{error}");
    group.partition(&[leader]);
    group.run_for(group.config.raft_tick * (group.config.election_ticks as u32) * 6 / 10);
    assert_eq!(group.mon(leader).leader(), Some(leader), "still leading");
    let error = group.command(leader, ask.clone()).unwrap_err();
    assert!(error.contains("may be stale"), "{error}");
    // The majority side elects its own leader, which answers.
    group.run_for(Duration::from_secs(4));
    let majority = (group.ranks.iter().copied())
        .find(|&r| r != leader)
        .unwrap();
    let new_leader = group.mon(majority).leader().expect("the majority leads");
    let error = group.command(new_leader, ask).unwrap_err();
    assert!(error.contains("does not exist"), "{error}");
}
