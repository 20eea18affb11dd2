//! Every client op through a size-3 PG: results, replication before the reply, and
//! identical replicas afterwards.

mod harness;

use bytes::Bytes;
use carmine_osd::ShardCounters;
use carmine_proto::{OpCode, OpError, OpOutput, OsdOpReply, PgState};
use carmine_store::ObjectStore;
use carmine_types::{OsdId, PgId, ShardIndex};
use harness::{bytes, names_in_pg, Cluster, Config, Envelope, CLIENT};
use std::collections::BTreeMap;

fn ok(reply: &OsdOpReply) -> &[OpOutput] {
    assert_eq!(reply.result, Ok(()), "{reply:?}");
    &reply.outputs
}

fn read_all(cluster: &mut Cluster, name: &str) -> Bytes {
    let reply = cluster.call(
        name,
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
    );
    match ok(&reply) {
        [OpOutput::Data(data)] => data.clone(),
        other => panic!("read returned {other:?}"),
    }
}

fn stat(cluster: &mut Cluster, name: &str) -> Result<(u64, u64, u64), OpError> {
    let reply = cluster.call(name, vec![OpCode::Stat]);
    reply.result.clone()?;
    match reply.outputs.as_slice() {
        [OpOutput::Stat {
            size_bytes,
            mtime_ns,
            version,
        }] => Ok((*size_bytes, *mtime_ns, *version)),
        other => panic!("stat returned {other:?}"),
    }
}

fn write_full(cluster: &mut Cluster, name: &str, data: &[u8]) -> OsdOpReply {
    let reply = cluster.call(name, vec![OpCode::WriteFull { data: bytes(data) }]);
    ok(&reply);
    reply
}

#[test]
fn write_full_is_acknowledged_only_after_every_replica_commits() {
    let mut cluster = Cluster::new(Config::default());
    let op = cluster.op(
        "obj",
        vec![
            OpCode::WriteFull {
                data: bytes(b"hello world"),
            },
            OpCode::SetXattr {
                name: "color".into(),
                value: bytes(b"red"),
            },
            OpCode::OmapSet {
                entries: vec![(bytes(b"k1"), bytes(b"v1")), (bytes(b"k2"), bytes(b"v2"))],
            },
        ],
    );
    let pgid = op.pgid;
    let acting = cluster.acting(pgid);
    assert_eq!(acting.len(), 3);
    let reqid = cluster.send(op);
    assert!(!cluster.has_reply(reqid), "answered before replicating");
    let rep_ops: Vec<OsdId> = cluster
        .pending()
        .iter()
        .filter(|e| e.is_rep_op())
        .map(|e| e.to.0)
        .collect();
    assert_eq!(rep_ops, acting[1..].to_vec());

    cluster.deliver_where(Envelope::is_rep_op);
    assert!(
        !cluster.has_reply(reqid),
        "answered before any replica reply"
    );
    assert_eq!(cluster.deliver_where(|e| e.from.0 == acting[1]), 1);
    assert!(
        !cluster.has_reply(reqid),
        "answered with one replica missing"
    );
    assert_eq!(cluster.deliver_where(|e| e.from.0 == acting[2]), 1);
    let replies = cluster.take_replies_for(reqid);
    assert_eq!(replies.len(), 1);
    assert_eq!(ok(&replies[0]).len(), 3);
    assert_eq!(replies[0].version.version, replies[0].user_version);
    assert_eq!(cluster.pending_count(), 0);

    assert_eq!(&read_all(&mut cluster, "obj")[..], b"hello world");
    cluster.assert_replicas_identical(pgid);
    let reads = vec![
        OpCode::Read {
            offset: 0,
            length: 0,
        },
        OpCode::GetXattrs,
        OpCode::OmapGetVals {
            after: None,
            max_entries: 100,
        },
        OpCode::Stat,
    ];
    let primary = cluster.local_read(acting[0], "obj", reads.clone());
    let outputs = ok(&primary).to_vec();
    assert_eq!(outputs[0], OpOutput::Data(bytes(b"hello world")));
    assert_eq!(
        outputs[1],
        OpOutput::Xattrs(BTreeMap::from([("color".to_string(), bytes(b"red"))]))
    );
    for &osd in &acting[1..] {
        let replica = cluster.local_read(osd, "obj", reads.clone());
        assert_eq!(ok(&replica), outputs.as_slice(), "{osd} differs");
        assert_eq!(replica.user_version, primary.user_version);
    }
}

#[test]
fn sparse_writes_read_holes_as_zeros_and_reads_past_the_end_are_empty() {
    let mut cluster = Cluster::new(Config::default());
    let reply = cluster.call(
        "sparse",
        vec![OpCode::Write {
            offset: 10,
            data: bytes(b"abc"),
        }],
    );
    ok(&reply);
    let mut expected = vec![0u8; 10];
    expected.extend_from_slice(b"abc");
    assert_eq!(&read_all(&mut cluster, "sparse")[..], &expected[..]);
    assert_eq!(stat(&mut cluster, "sparse").unwrap().0, 13);

    let reply = cluster.call(
        "sparse",
        vec![
            OpCode::Read {
                offset: 5,
                length: 4,
            },
            OpCode::Read {
                offset: 13,
                length: 10,
            },
            OpCode::Read {
                offset: 100,
                length: 0,
            },
            OpCode::Read {
                offset: 11,
                length: 100,
            },
        ],
    );
    assert_eq!(
        ok(&reply),
        &[
            OpOutput::Data(bytes(&[0, 0, 0, 0])),
            OpOutput::Data(Bytes::new()),
            OpOutput::Data(Bytes::new()),
            OpOutput::Data(bytes(b"bc")),
        ]
    );
    // Overwrite across the hole's edge.
    ok(&cluster.call(
        "sparse",
        vec![OpCode::Write {
            offset: 8,
            data: bytes(b"XY"),
        }],
    ));
    expected[8..10].copy_from_slice(b"XY");
    assert_eq!(&read_all(&mut cluster, "sparse")[..], &expected[..]);
    cluster.assert_replicas_identical(cluster.pg_of("sparse"));
}

#[test]
fn append_adds_at_the_end_and_creates_missing_objects() {
    let mut cluster = Cluster::new(Config::default());
    for part in [&b"one"[..], b"-two", b"-three"] {
        ok(&cluster.call("log", vec![OpCode::Append { data: bytes(part) }]));
    }
    assert_eq!(&read_all(&mut cluster, "log")[..], b"one-two-three");
    // Two appends in one request land one after the other.
    ok(&cluster.call(
        "log",
        vec![
            OpCode::Append { data: bytes(b"!") },
            OpCode::Append { data: bytes(b"?") },
        ],
    ));
    assert_eq!(&read_all(&mut cluster, "log")[..], b"one-two-three!?");
    cluster.assert_replicas_identical(cluster.pg_of("log"));
}

#[test]
fn truncate_shrinks_and_extends_with_zeros() {
    let mut cluster = Cluster::new(Config::default());
    write_full(&mut cluster, "t", b"0123456789");
    ok(&cluster.call("t", vec![OpCode::Truncate { size_bytes: 4 }]));
    assert_eq!(&read_all(&mut cluster, "t")[..], b"0123");
    ok(&cluster.call("t", vec![OpCode::Truncate { size_bytes: 8 }]));
    assert_eq!(&read_all(&mut cluster, "t")[..], b"0123\0\0\0\0");
    assert_eq!(stat(&mut cluster, "t").unwrap().0, 8);
    // Truncating to zero keeps the object.
    ok(&cluster.call("t", vec![OpCode::Truncate { size_bytes: 0 }]));
    assert_eq!(stat(&mut cluster, "t").unwrap().0, 0);
    cluster.assert_replicas_identical(cluster.pg_of("t"));
}

#[test]
fn zero_punches_inside_the_object_and_never_extends_it() {
    let mut cluster = Cluster::new(Config::default());
    write_full(&mut cluster, "z", b"abcdefghij");
    ok(&cluster.call(
        "z",
        vec![OpCode::Zero {
            offset: 2,
            length: 3,
        }],
    ));
    assert_eq!(&read_all(&mut cluster, "z")[..], b"ab\0\0\0fghij");
    // Overlapping the end: zeroes up to the end only.
    ok(&cluster.call(
        "z",
        vec![OpCode::Zero {
            offset: 8,
            length: 100,
        }],
    ));
    assert_eq!(&read_all(&mut cluster, "z")[..], b"ab\0\0\0fgh\0\0");
    // Entirely past the end: nothing changes in size.
    ok(&cluster.call(
        "z",
        vec![OpCode::Zero {
            offset: 50,
            length: 10,
        }],
    ));
    assert_eq!(stat(&mut cluster, "z").unwrap().0, 10);
    cluster.assert_replicas_identical(cluster.pg_of("z"));
    let stat = cluster.pg_stat(cluster.pg_of("z"));
    assert_eq!(stat.data_bytes, 10);
}

#[test]
fn remove_deletes_the_object_and_a_second_remove_is_not_found() {
    let mut cluster = Cluster::new(Config::default());
    write_full(&mut cluster, "r", b"data");
    ok(&cluster.call(
        "r",
        vec![
            OpCode::SetXattr {
                name: "a".into(),
                value: bytes(b"1"),
            },
            OpCode::OmapSet {
                entries: vec![(bytes(b"k"), bytes(b"v"))],
            },
        ],
    ));
    ok(&cluster.call("r", vec![OpCode::Remove]));
    assert_eq!(stat(&mut cluster, "r"), Err(OpError::NotFound));
    let again = cluster.call("r", vec![OpCode::Remove]);
    assert_eq!(again.result, Err(OpError::NotFound));
    let pgid = cluster.pg_of("r");
    for osd in cluster.acting(pgid) {
        assert!(
            !cluster.dump_pg(osd, pgid).contains_key("r"),
            "{osd} kept it"
        );
    }
    // Recreated, it starts empty: no xattrs or omap from before.
    write_full(&mut cluster, "r", b"new");
    let reply = cluster.call(
        "r",
        vec![
            OpCode::GetXattrs,
            OpCode::OmapGetVals {
                after: None,
                max_entries: 10,
            },
        ],
    );
    assert_eq!(
        ok(&reply),
        &[
            OpOutput::Xattrs(BTreeMap::new()),
            OpOutput::Omap {
                entries: vec![],
                more: false
            }
        ]
    );
    cluster.assert_replicas_identical(pgid);
}

#[test]
fn exclusive_create_fails_on_an_existing_object_and_changes_nothing() {
    let mut cluster = Cluster::new(Config::default());
    let first = cluster.call("c", vec![OpCode::Create { exclusive: true }]);
    ok(&first);
    assert_eq!(stat(&mut cluster, "c").unwrap().0, 0);
    ok(&cluster.call("c", vec![OpCode::Append { data: bytes(b"x") }]));
    let before = stat(&mut cluster, "c").unwrap();
    let pgid = cluster.pg_of("c");
    let dump = objects_of(cluster.dump_pg(cluster.primary_of(pgid), pgid));

    let second = cluster.call(
        "c",
        vec![
            OpCode::Create { exclusive: true },
            OpCode::WriteFull {
                data: bytes(b"clobbered"),
            },
        ],
    );
    assert_eq!(second.result, Err(OpError::Exists));
    assert!(second.outputs.is_empty());
    assert_eq!(stat(&mut cluster, "c").unwrap(), before);
    // Only the PG log changed: the failure is logged, so a resend gets it again.
    for osd in cluster.acting(pgid) {
        assert_eq!(
            objects_of(cluster.dump_pg(osd, pgid)),
            dump,
            "{osd} changed"
        );
    }
    cluster.assert_replicas_identical(pgid);
    // A non-exclusive create of an existing object succeeds and keeps the data.
    ok(&cluster.call("c", vec![OpCode::Create { exclusive: false }]));
    assert_eq!(&read_all(&mut cluster, "c")[..], b"x");
}

#[test]
fn xattrs_set_get_list_and_remove() {
    let mut cluster = Cluster::new(Config::default());
    write_full(&mut cluster, "x", b"");
    ok(&cluster.call(
        "x",
        vec![
            OpCode::SetXattr {
                name: "a".into(),
                value: bytes(b"1"),
            },
            OpCode::SetXattr {
                name: "b".into(),
                value: bytes(b"22"),
            },
        ],
    ));
    let reply = cluster.call(
        "x",
        vec![OpCode::GetXattr { name: "b".into() }, OpCode::GetXattrs],
    );
    assert_eq!(
        ok(&reply),
        &[
            OpOutput::Xattr(bytes(b"22")),
            OpOutput::Xattrs(BTreeMap::from([
                ("a".to_string(), bytes(b"1")),
                ("b".to_string(), bytes(b"22")),
            ])),
        ]
    );
    ok(&cluster.call("x", vec![OpCode::RmXattr { name: "a".into() }]));
    let missing = cluster.call("x", vec![OpCode::GetXattr { name: "a".into() }]);
    assert_eq!(missing.result, Err(OpError::NoSuchXattr));
    let rm_missing = cluster.call("x", vec![OpCode::RmXattr { name: "a".into() }]);
    assert_eq!(rm_missing.result, Err(OpError::NoSuchXattr));
    let reply = cluster.call("x", vec![OpCode::GetXattrs]);
    assert_eq!(
        ok(&reply),
        &[OpOutput::Xattrs(BTreeMap::from([(
            "b".to_string(),
            bytes(b"22")
        )]))]
    );
    // The object info xattr never shows through, and an empty name is refused.
    let empty = cluster.call(
        "x",
        vec![OpCode::SetXattr {
            name: String::new(),
            value: bytes(b"v"),
        }],
    );
    assert!(matches!(empty.result, Err(OpError::Invalid(_))));
    let get_empty = cluster.call("x", vec![OpCode::GetXattr { name: "".into() }]);
    assert!(get_empty.result.is_err());
    let on_missing = cluster.call("nothing", vec![OpCode::GetXattr { name: "a".into() }]);
    assert_eq!(on_missing.result, Err(OpError::NotFound));
    cluster.assert_replicas_identical(cluster.pg_of("x"));
}

#[test]
fn omap_set_get_remove_and_paginate() {
    let mut cluster = Cluster::new(Config::default());
    let entries: Vec<(Bytes, Bytes)> = (0..10u8)
        .map(|i| (bytes(format!("key{i:02}").as_bytes()), bytes(&[i; 3])))
        .collect();
    ok(&cluster.call(
        "m",
        vec![OpCode::OmapSet {
            entries: entries.clone(),
        }],
    ));
    // Pages of 4: 4 + 4 + 2, `more` set on all but the last.
    let mut after: Option<Bytes> = None;
    let mut seen = Vec::new();
    let mut pages = Vec::new();
    loop {
        let reply = cluster.call(
            "m",
            vec![OpCode::OmapGetVals {
                after: after.clone(),
                max_entries: 4,
            }],
        );
        let [OpOutput::Omap { entries, more }] = ok(&reply) else {
            panic!("{reply:?}")
        };
        pages.push((entries.len(), *more));
        seen.extend(entries.iter().cloned());
        after = entries.last().map(|(key, _)| key.clone());
        if !more {
            break;
        }
    }
    assert_eq!(pages, vec![(4, true), (4, true), (2, false)]);
    assert_eq!(seen, entries);

    let reply = cluster.call(
        "m",
        vec![OpCode::OmapGetValsByKeys {
            keys: vec![bytes(b"key07"), bytes(b"nope"), bytes(b"key01")],
        }],
    );
    assert_eq!(
        ok(&reply),
        &[OpOutput::Omap {
            entries: vec![entries[1].clone(), entries[7].clone()],
            more: false
        }]
    );
    ok(&cluster.call(
        "m",
        vec![OpCode::OmapRm {
            keys: vec![bytes(b"key00"), bytes(b"key05"), bytes(b"absent")],
        }],
    ));
    let reply = cluster.call(
        "m",
        vec![OpCode::OmapGetVals {
            after: None,
            max_entries: 100,
        }],
    );
    let [OpOutput::Omap {
        entries: left,
        more,
    }] = ok(&reply)
    else {
        panic!("{reply:?}")
    };
    assert!(!more);
    assert_eq!(left.len(), 8);
    assert!(!left.iter().any(|(k, _)| &k[..] == b"key05"));
    ok(&cluster.call("m", vec![OpCode::OmapClear]));
    let reply = cluster.call(
        "m",
        vec![OpCode::OmapGetVals {
            after: None,
            max_entries: 100,
        }],
    );
    assert_eq!(
        ok(&reply),
        &[OpOutput::Omap {
            entries: vec![],
            more: false
        }]
    );
    let rm_on_missing = cluster.call(
        "no-such",
        vec![OpCode::OmapRm {
            keys: vec![bytes(b"k")],
        }],
    );
    assert_eq!(rm_on_missing.result, Err(OpError::NotFound));
    cluster.assert_replicas_identical(cluster.pg_of("m"));
}

#[test]
fn a_compound_op_whose_last_sub_op_fails_applies_nothing_anywhere() {
    let mut cluster = Cluster::new(Config::default());
    write_full(&mut cluster, "atom", b"original");
    ok(&cluster.call(
        "atom",
        vec![OpCode::SetXattr {
            name: "lock".into(),
            value: bytes(b"mine"),
        }],
    ));
    let pgid = cluster.pg_of("atom");
    let acting = cluster.acting(pgid);
    let before: Vec<_> = acting
        .iter()
        .map(|&o| objects_of(cluster.dump_pg(o, pgid)))
        .collect();
    let stat_before = cluster.pg_stat(pgid);

    let attempts = vec![
        // The guard fails after writes were staged.
        (
            vec![
                OpCode::WriteFull {
                    data: bytes(b"changed"),
                },
                OpCode::OmapSet {
                    entries: vec![(bytes(b"k"), bytes(b"v"))],
                },
                OpCode::CmpXattrEq {
                    name: "lock".into(),
                    value: bytes(b"theirs"),
                },
            ],
            OpError::Canceled,
        ),
        // The last write fails.
        (
            vec![
                OpCode::Append { data: bytes(b"++") },
                OpCode::SetXattr {
                    name: "new".into(),
                    value: bytes(b"1"),
                },
                OpCode::RmXattr {
                    name: "absent".into(),
                },
            ],
            OpError::NoSuchXattr,
        ),
        (
            vec![
                OpCode::Truncate { size_bytes: 1 },
                OpCode::Remove,
                OpCode::Remove,
            ],
            OpError::NotFound,
        ),
        (
            vec![
                OpCode::Append { data: bytes(b"x") },
                OpCode::AssertVersion { version: 999 },
            ],
            OpError::VersionMismatch {
                expected: 999,
                actual: stat_before.last_update.version,
            },
        ),
    ];
    let attempt_count = attempts.len() as u64;
    for (ops, error) in attempts {
        let reply = cluster.call("atom", ops.clone());
        assert_eq!(reply.result, Err(error), "{ops:?}");
        assert!(reply.outputs.is_empty());
    }
    for (osd, dump) in acting.iter().zip(&before) {
        assert_eq!(
            &objects_of(cluster.dump_pg(*osd, pgid)),
            dump,
            "{osd} changed"
        );
    }
    // Each failure took a PG version (its error entry); nothing else changed.
    let mut stat_after = cluster.pg_stat(pgid);
    assert_eq!(
        stat_after.last_update.version,
        stat_before.last_update.version + attempt_count
    );
    stat_after.last_update = stat_before.last_update;
    assert_eq!(stat_after, stat_before);
    cluster.assert_replicas_identical(pgid);
    // The guard that holds lets the op through.
    ok(&cluster.call(
        "atom",
        vec![
            OpCode::CmpXattrEq {
                name: "lock".into(),
                value: bytes(b"mine"),
            },
            OpCode::WriteFull {
                data: bytes(b"guarded"),
            },
        ],
    ));
    assert_eq!(&read_all(&mut cluster, "atom")[..], b"guarded");
    let missing_guard = cluster.call(
        "atom",
        vec![
            OpCode::CmpXattrEq {
                name: "unset".into(),
                value: bytes(b""),
            },
            OpCode::Remove,
        ],
    );
    assert_eq!(missing_guard.result, Err(OpError::Canceled));
    cluster.assert_replicas_identical(pgid);
}

#[test]
fn assert_version_guards_on_the_current_user_version() {
    let mut cluster = Cluster::new(Config::default());
    let written = write_full(&mut cluster, "v", b"1");
    let version = written.user_version;
    assert!(version > 0);
    let good = cluster.call(
        "v",
        vec![
            OpCode::AssertVersion { version },
            OpCode::Append { data: bytes(b"2") },
        ],
    );
    ok(&good);
    assert!(good.user_version > version);
    let stale = cluster.call(
        "v",
        vec![
            OpCode::AssertVersion { version },
            OpCode::Append { data: bytes(b"3") },
        ],
    );
    assert_eq!(
        stale.result,
        Err(OpError::VersionMismatch {
            expected: version,
            actual: good.user_version
        })
    );
    assert_eq!(&read_all(&mut cluster, "v")[..], b"12");
    let missing = cluster.call("nope", vec![OpCode::AssertVersion { version: 0 }]);
    assert_eq!(missing.result, Err(OpError::NotFound));
    let exists = cluster.call("v", vec![OpCode::AssertExists]);
    assert_eq!(ok(&exists), &[OpOutput::None]);
}

#[test]
fn stat_reports_size_mtime_and_version_of_the_last_write() {
    let mut cluster = Cluster::new(Config::default());
    let op = cluster.op(
        "s",
        vec![OpCode::WriteFull {
            data: bytes(b"12345"),
        }],
    );
    let mtime = op.mtime_ns;
    let reqid = cluster.send(op);
    cluster.run();
    let reply = cluster.take_replies_for(reqid).pop().unwrap();
    assert_eq!(
        stat(&mut cluster, "s").unwrap(),
        (5, mtime, reply.user_version)
    );
    // Reads change neither mtime nor version.
    read_all(&mut cluster, "s");
    assert_eq!(
        stat(&mut cluster, "s").unwrap(),
        (5, mtime, reply.user_version)
    );
    let reply = cluster.call("s", vec![OpCode::Stat]);
    assert_eq!(reply.user_version, reply_version(&reply));
}

fn reply_version(reply: &OsdOpReply) -> u64 {
    match reply.outputs.as_slice() {
        [OpOutput::Stat { version, .. }] => *version,
        other => panic!("{other:?}"),
    }
}

#[test]
fn reads_of_a_missing_object_are_not_found() {
    let mut cluster = Cluster::new(Config::default());
    for ops in [
        vec![OpCode::Read {
            offset: 0,
            length: 0,
        }],
        vec![OpCode::Stat],
        vec![OpCode::GetXattrs],
        vec![OpCode::OmapGetVals {
            after: None,
            max_entries: 1,
        }],
        vec![OpCode::AssertExists],
    ] {
        let reply = cluster.call("ghost", ops.clone());
        assert_eq!(reply.result, Err(OpError::NotFound), "{ops:?}");
    }
    let pgid = cluster.pg_of("ghost");
    assert_eq!(cluster.pg_stat(pgid).object_count, 0);
    assert!(!cluster
        .dump_pg(cluster.primary_of(pgid), pgid)
        .contains_key("ghost"));
}

fn list_page(
    cluster: &mut Cluster,
    pgid: PgId,
    after: Option<String>,
    max: u32,
) -> (Vec<String>, Option<String>) {
    let mut op = cluster.op(
        "",
        vec![OpCode::PgList {
            after,
            max_entries: max,
        }],
    );
    op.pgid = pgid;
    let reply = cluster.call_op(op);
    match ok(&reply) {
        [OpOutput::List { names, next }] => (names.clone(), next.clone()),
        other => panic!("list returned {other:?}"),
    }
}

#[test]
fn pg_list_pages_through_every_object_and_never_shows_the_pg_metadata() {
    let mut cluster = Cluster::new(Config {
        pg_num: 1,
        ..Config::default()
    });
    let pgid = cluster.pg_of("anything");
    let (names, next) = list_page(&mut cluster, pgid, None, 10);
    assert!(names.is_empty(), "an empty PG lists {names:?}");
    assert_eq!(next, None);

    let mut expected: Vec<String> = (0..23).map(|i| format!("obj{i:02}")).collect();
    for name in &expected {
        write_full(&mut cluster, name, name.as_bytes());
    }
    ok(&cluster.call("obj05", vec![OpCode::Remove]));
    expected.retain(|n| n != "obj05");
    for page_size in [1, 5, 7, 22, 23, 100] {
        let mut listed = Vec::new();
        let mut after = None;
        let mut pages = 0;
        loop {
            let (names, next) = list_page(&mut cluster, pgid, after.clone(), page_size);
            assert!(names.len() <= page_size as usize);
            assert!(!names.iter().any(String::is_empty), "metadata listed");
            listed.extend(names);
            pages += 1;
            assert!(pages <= 30, "listing does not end");
            match next {
                Some(cursor) => after = Some(cursor),
                None => break,
            }
        }
        assert_eq!(listed, expected, "page size {page_size}");
    }
    // Listing after the last name is empty.
    let (names, next) = list_page(&mut cluster, pgid, Some("obj22".into()), 5);
    assert!(names.is_empty());
    assert_eq!(next, None);
}

#[test]
fn misrouted_and_malformed_requests_are_refused() {
    let mut cluster = Cluster::new(Config {
        osd_count: 4,
        shards_per_osd: 2,
        ..Config::default()
    });
    let op = cluster.op("route", vec![OpCode::WriteFull { data: bytes(b"x") }]);
    let pgid = op.pgid;
    let acting = cluster.acting(pgid);
    let (primary, shard) = cluster.target(&op);

    // The primary OSD's other shard.
    let wrong_shard = (primary, ShardIndex(1 - shard.0));
    cluster.send_to(wrong_shard, CLIENT, op.clone());
    let reply = cluster.take_replies_for(op.reqid).pop().unwrap();
    assert_eq!(reply.result, Err(OpError::WrongShard { shard_count: 2 }));
    assert_eq!(cluster.shard(wrong_shard).counters().wrong_shard_total, 1);

    // A replica, and an OSD outside the acting set.
    let outsider = cluster
        .osds()
        .into_iter()
        .find(|osd| !acting.contains(osd))
        .unwrap();
    for osd in [acting[1], acting[2], outsider] {
        let addr = cluster.addr(osd, pgid);
        cluster.send_to(addr, CLIENT, op.clone());
        let reply = cluster.take_replies_for(op.reqid).pop().unwrap();
        assert_eq!(reply.result, Err(OpError::WrongPrimary), "{osd}");
    }
    assert_eq!(cluster.pending_count(), 0, "a refused op was replicated");

    // An unknown pool.
    let mut bad_pool = cluster.op("route", vec![OpCode::Stat]);
    bad_pool.pgid = PgId::new(99, 0);
    cluster.send_to((primary, shard), CLIENT, bad_pool.clone());
    let reply = cluster.take_replies_for(bad_pool.reqid).pop().unwrap();
    assert!(
        matches!(reply.result, Err(OpError::Invalid(_))),
        "{reply:?}"
    );

    // An empty name for a write, no ops at all, and a list with a name.
    for (name, ops) in [
        ("", vec![OpCode::WriteFull { data: bytes(b"x") }]),
        ("", vec![OpCode::Stat]),
        ("route", vec![]),
        (
            "route",
            vec![OpCode::PgList {
                after: None,
                max_entries: 1,
            }],
        ),
        (
            "",
            vec![
                OpCode::PgList {
                    after: None,
                    max_entries: 1,
                },
                OpCode::Remove,
            ],
        ),
    ] {
        let mut op = cluster.op(name, ops.clone());
        op.pgid = pgid;
        let reply = cluster.call_op(op);
        assert!(
            matches!(reply.result, Err(OpError::Invalid(_))),
            "{name:?} {ops:?}: {reply:?}"
        );
    }
    // The op itself works when sent to the right place.
    assert_eq!(cluster.call_op(op).result, Ok(()));
    assert_eq!(
        cluster.shard((primary, shard)).counters(),
        ShardCounters {
            ops_total: 7,
            write_bytes_total: 2,
            read_bytes_total: 0,
            wrong_shard_total: 0,
            ..ShardCounters::default()
        }
    );
}

#[test]
fn pg_stats_track_object_count_and_data_bytes_exactly() {
    let mut cluster = Cluster::new(Config {
        pg_num: 1,
        ..Config::default()
    });
    let pgid = cluster.pg_of("a");
    let check = |cluster: &Cluster, objects: u64, data: u64| {
        let stat = cluster.pg_stat(pgid);
        assert_eq!((stat.object_count, stat.data_bytes), (objects, data));
        for osd in cluster.acting(pgid) {
            let usage = cluster.store(osd, pgid).usage();
            // The PG metadata object counts in the store's object count.
            assert_eq!(usage.object_count, objects + 1, "{osd}");
            assert_eq!(usage.data_bytes, data, "{osd}");
        }
    };
    check(&cluster, 0, 0);
    write_full(&mut cluster, "a", &[1; 100]);
    check(&cluster, 1, 100);
    write_full(&mut cluster, "b", &[2; 50]);
    check(&cluster, 2, 150);
    write_full(&mut cluster, "a", &[3; 10]);
    check(&cluster, 2, 60);
    ok(&cluster.call(
        "b",
        vec![OpCode::Append {
            data: bytes(&[4; 5]),
        }],
    ));
    check(&cluster, 2, 65);
    ok(&cluster.call(
        "b",
        vec![OpCode::Write {
            offset: 100,
            data: bytes(b"z"),
        }],
    ));
    check(&cluster, 2, 111);
    ok(&cluster.call("b", vec![OpCode::Truncate { size_bytes: 20 }]));
    check(&cluster, 2, 30);
    ok(&cluster.call("a", vec![OpCode::Truncate { size_bytes: 1000 }]));
    check(&cluster, 2, 1020);
    ok(&cluster.call(
        "a",
        vec![OpCode::Zero {
            offset: 500,
            length: 1000,
        }],
    ));
    check(&cluster, 2, 1020);
    ok(&cluster.call("c", vec![OpCode::Create { exclusive: true }]));
    check(&cluster, 3, 1020);
    ok(&cluster.call("a", vec![OpCode::Remove]));
    check(&cluster, 2, 20);
    // Failed ops count nothing.
    let failed = cluster.call(
        "d",
        vec![
            OpCode::Append { data: bytes(b"x") },
            OpCode::Remove,
            OpCode::Remove,
        ],
    );
    assert_eq!(failed.result, Err(OpError::NotFound));
    check(&cluster, 2, 20);
    ok(&cluster.call(
        "b",
        vec![OpCode::Remove, OpCode::WriteFull { data: bytes(b"xy") }],
    ));
    check(&cluster, 2, 2);
    ok(&cluster.call(
        "e",
        vec![OpCode::Create { exclusive: false }, OpCode::Remove],
    ));
    check(&cluster, 2, 2);
    cluster.assert_replicas_identical(pgid);
}

#[test]
fn pg_state_is_clean_with_the_full_acting_set_and_degraded_with_two_of_three() {
    let mut cluster = Cluster::new(Config::default());
    let pgid = cluster.pg_of("state");
    let state = cluster.pg_stat(pgid).state;
    assert_eq!(state.name(), "active+clean");
    assert_eq!(cluster.pg_stat(pgid).acting.len(), 3);
    let victim = cluster.acting(pgid)[2];
    cluster.crash(victim);
    assert!(cluster.pg_stat(pgid).state.contains(PgState::PEERING));
    cluster.run();
    let stat = cluster.pg_stat(pgid);
    assert_eq!(stat.state.name(), "active+degraded+undersized");
    assert!(stat.state.contains(PgState::ACTIVE));
    assert!(!stat.state.contains(PgState::CLEAN));
    assert_eq!(stat.acting.len(), 2);
    // Every primary reports only its own PGs, and replicas report none of theirs.
    let mut reported = 0;
    for osd in cluster.osds() {
        if osd == victim {
            continue;
        }
        for stat in cluster.shard((osd, ShardIndex(0))).pg_stats() {
            assert_eq!(cluster.primary_of(stat.pgid), osd);
            reported += 1;
        }
    }
    assert_eq!(reported, 8);
}

#[test]
fn several_shards_per_osd_route_every_pg_to_its_owner() {
    let mut shards_of = BTreeMap::new();
    shards_of.insert(OsdId(1), 3);
    shards_of.insert(OsdId(3), 1);
    let mut cluster = Cluster::new(Config {
        osd_count: 4,
        shards_per_osd: 2,
        shards_of,
        pg_num: 16,
        ..Config::default()
    });
    let names: Vec<String> = (0..40).map(|i| format!("many{i}")).collect();
    for name in &names {
        write_full(&mut cluster, name, name.as_bytes());
        ok(&cluster.call(
            name,
            vec![OpCode::OmapSet {
                entries: vec![(bytes(b"k"), bytes(name.as_bytes()))],
            }],
        ));
    }
    for name in &names {
        assert_eq!(&read_all(&mut cluster, name)[..], name.as_bytes());
    }
    cluster.assert_all_replicas_identical();
    let in_first_pg = names_in_pg(&cluster, PgId::new(cluster.pool.0, 0), "p", 3);
    assert_eq!(in_first_pg.len(), 3);
}

/// A PG's objects without its metadata object (the log and info), which a failed
/// write changes: it logs the failure.
fn objects_of(mut dump: harness::PgDump) -> harness::PgDump {
    dump.remove("");
    dump
}
