//! Object → PG → up/acting/primary conformance with Ceph 16.2.15's `osdmaptool`, over
//! the vectors in `crates/crush/tests/data` (see `README-vectors.md` there): the
//! objects of `objects.tsv` on osdmaps A, B and C, and primary affinity on A and B.
//!
//! The osdmaps were made with `osdmaptool --createsimple … --import-crush crush.bin`
//! and every call used `flags.txt` (`--mark-up-in --mark-out K`). `--mark-up-in` also
//! gives each OSD whose CRUSH weight is 0 a weight of 1.0, so [`ceph_like_map`] does
//! the same.
//!
//! The primary-affinity rows below were printed by `osdmaptool osdmap.bin FLAGS
//! --test-map-pgs-dump-all --pool 1` on copies of `shared/crush-vectors/vectors/
//! osdmap_{A,B}/osdmap.bin` whose (empty) `osd_primary_affinity` vector was filled in
//! with [`AFFINITY_A`] / [`AFFINITY_B`] (the vector sits right after the empty
//! `pg_temp` and `primary_temp` maps, before the CRUSH blob; both envelope lengths and
//! the trailing crc32c were fixed up, and `osdmaptool --print` shows the affinities).
//! Each row is `ps raw up up_primary` (ps in hex, as in `1.ps`); acting equalled up
//! on every row.

use carmine_clustermap::{OsdMap, PoolSpec};
use carmine_crush::parse_text;
use carmine_types::{OsdId, PgId, PoolId};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// One of the vector osdmaps: name, OSD count, pg_num, pgp_num, the OSD marked out.
struct CephOsdMap {
    name: &'static str,
    osd_count: u32,
    pg_num: u32,
    pgp_num: u32,
    out_osd: u32,
}

const OSDMAP_A: CephOsdMap = CephOsdMap {
    name: "A",
    osd_count: 12,
    pg_num: 192,
    pgp_num: 96,
    out_osd: 5,
};
const OSDMAP_B: CephOsdMap = CephOsdMap {
    name: "B",
    osd_count: 16,
    pg_num: 256,
    pgp_num: 256,
    out_osd: 2,
};
const OSDMAP_C: CephOsdMap = CephOsdMap {
    name: "C",
    osd_count: 12,
    pg_num: 192,
    pgp_num: 192,
    out_osd: 5,
};

fn data_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../crush/tests/data")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()))
}

/// The osdmap as osdmaptool saw it with `--mark-up-in --mark-out K`: every OSD up,
/// every OSD in but K, pool 1 `rbd` (size 3, rule 0) with the given pg_num/pgp_num.
fn ceph_like_map(spec: &CephOsdMap) -> OsdMap {
    let crush_text = read(&data_dir().join(format!("osdmap_{}/crush.txt", spec.name)));
    let mut crush = parse_text(&crush_text).unwrap();
    for osd in 0..crush.max_devices() {
        if crush.item_weight(osd) == Some(0) {
            crush.adjust_item_weight(osd, 0x10000);
        }
    }
    let mut map = OsdMap::new(0, crush);
    for id in 0..spec.osd_count {
        let addr: SocketAddr = format!("127.0.0.1:{}", 6800 + id).parse().unwrap();
        map.boot_osd(OsdId(id), vec![addr], format!("host{id}"))
            .unwrap();
    }
    map.set_weight(OsdId(spec.out_osd), 0).unwrap();
    let pool = map
        .create_pool(PoolSpec::replicated("rbd", 3, spec.pg_num))
        .unwrap();
    assert_eq!(pool, PoolId(1));
    map.pools.get_mut(&pool).unwrap().pgp_num = spec.pgp_num;
    map
}

/// `[6,9,3]`, as osdmaptool prints a set.
fn format_set(osds: &[OsdId]) -> String {
    let items: Vec<String> = osds.iter().map(|osd| osd.0.to_string()).collect();
    format!("[{}]", items.join(","))
}

fn format_primary(primary: Option<OsdId>) -> String {
    primary.map_or_else(|| "-1".to_string(), |osd| osd.0.to_string())
}

/// PGs that osdmap C remaps with `pg_upmap_items` (from its `print.txt`). Carmine has
/// no upmap yet, so only their raw set is compared.
fn upmapped_pgs() -> BTreeSet<String> {
    read(&data_dir().join("osdmap_C/print.txt"))
        .lines()
        .filter_map(|line| line.strip_prefix("pg_upmap_items "))
        .map(|rest| rest.split(' ').next().unwrap().to_string())
        .collect()
}

#[test]
fn objects_map_to_up_acting_and_primary_like_osdmaptool() {
    let objects = read(&data_dir().join("objects.tsv"));
    let upmapped = upmapped_pgs();
    assert_eq!(upmapped.len(), 20);
    let (mut full_rows, mut raw_only_rows) = (0, 0);
    for spec in [OSDMAP_A, OSDMAP_B, OSDMAP_C] {
        let map = ceph_like_map(&spec);
        for line in objects.lines().skip(1) {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 11, "bad objects.tsv row: {line}");
            if fields[0] != spec.name {
                continue;
            }
            let name = fields[2];
            let context = format!("osdmap {} object {name:?}", spec.name);
            let pg = map.object_to_pg(PoolId(1), name).unwrap();
            let pgid = format!("1.{:x}", pg.seed);
            assert_eq!(pgid, fields[3], "{context}");
            let mapping = map.pg_mapping(pg).unwrap();
            assert_eq!(format_set(&mapping.raw), fields[5], "{context} raw");
            assert_eq!(format_primary(mapping.raw.first().copied()), fields[6]);
            if spec.name == "C" && upmapped.contains(&pgid) {
                raw_only_rows += 1;
                continue;
            }
            assert_eq!(format_set(&mapping.up), fields[7], "{context} up");
            assert_eq!(
                format_primary(mapping.primary),
                fields[8],
                "{context} up primary"
            );
            assert_eq!(format_set(&mapping.acting), fields[9], "{context} acting");
            assert_eq!(
                format_primary(mapping.primary),
                fields[10],
                "{context} acting primary"
            );
            assert_eq!(
                format_set(&mapping.acting),
                fields[4],
                "{context} test-map-object"
            );
            full_rows += 1;
        }
    }
    println!("{full_rows} rows matched in full, {raw_only_rows} upmapped rows matched raw");
    assert_eq!(full_rows + raw_only_rows, 600);
    assert!(full_rows >= 500, "only {full_rows} rows checked in full");
}

/// Primary affinities (16.16) written into osdmap A, indexed by OSD id.
const AFFINITY_A: [u32; 12] = [
    0x10000, 0x8000, 0, 0x10000, 0x4000, 0x10000, 0xc000, 0x10000, 0x1000, 0x10000, 0x10000,
    0x10000,
];
/// Primary affinities written into osdmap B: mostly 0, so many PGs have no willing
/// OSD and keep their first (declining) one; 0xffff just below 1.0.
const AFFINITY_B: [u32; 16] = [
    0, 0, 0, 0, 0x8000, 0, 0, 0, 0x10000, 0, 0, 0, 0x3333, 0, 0xffff, 0,
];

fn parse_osds(text: &str) -> Vec<OsdId> {
    text.split(',')
        .map(|osd| OsdId(osd.parse().unwrap()))
        .collect()
}

fn check_affinity(spec: &CephOsdMap, affinity: &[u32], rows: &str) -> usize {
    let mut map = ceph_like_map(spec);
    for (id, &value) in affinity.iter().enumerate() {
        map.set_primary_affinity(OsdId(id as u32), value).unwrap();
    }
    let mut moved = 0;
    let rows: Vec<&str> = rows
        .split(';')
        .map(str::trim)
        .filter(|row| !row.is_empty())
        .collect();
    assert_eq!(rows.len(), spec.pg_num as usize);
    for row in rows {
        let fields: Vec<&str> = row.split(' ').collect();
        assert_eq!(fields.len(), 4, "bad row {row:?}");
        let pg = PgId::new(1, u32::from_str_radix(fields[0], 16).unwrap());
        let mapping = map.pg_mapping(pg).unwrap();
        let context = format!("osdmap {} pg 1.{}", spec.name, fields[0]);
        assert_eq!(mapping.raw, parse_osds(fields[1]), "{context} raw");
        assert_eq!(mapping.up, parse_osds(fields[2]), "{context} up");
        assert_eq!(mapping.acting, mapping.up, "{context} acting");
        assert_eq!(
            format_primary(mapping.primary),
            fields[3],
            "{context} primary"
        );
        if mapping.up != mapping.raw {
            moved += 1;
        }
    }
    moved
}

#[test]
fn primary_affinity_picks_primaries_like_osdmaptool() {
    let moved_a = check_affinity(&OSDMAP_A, &AFFINITY_A, AFFINITY_A_ROWS);
    let moved_b = check_affinity(&OSDMAP_B, &AFFINITY_B, AFFINITY_B_ROWS);
    // osdmaptool moved the primary of 45 of A's PGs and 57 of B's.
    assert_eq!((moved_a, moved_b), (45, 57));
}

const AFFINITY_A_ROWS: &str = "\
0 6,9,3 9,6,3 9; 1 3,2,9 3,2,9 3; 2 9,3,0 9,3,0 9; 3 3,9,2 3,9,2 3; 4 8,9,7 9,8,7 9; \
5 9,3,2 9,3,2 9; 6 3,9,8 3,9,8 3; 7 7,9,2 7,9,2 7; 8 7,2,9 7,2,9 7; 9 3,9,4 3,9,4 3; \
a 7,8,9 7,8,9 7; b 4,1,11 11,4,1 11; c 6,3,4 6,3,4 6; d 7,1,8 7,1,8 7; e 7,8,9 7,8,9 7; \
f 6,7,1 6,7,1 6; 10 3,9,6 3,9,6 3; 11 2,3,9 3,2,9 3; 12 9,3,2 9,3,2 9; 13 10,1,7 10,1,7 10; \
14 3,2,9 3,2,9 3; 15 3,6,0 3,6,0 3; 16 3,8,2 3,8,2 3; 17 9,4,11 9,4,11 9; 18 7,8,6 7,8,6 7; \
19 3,6,0 3,6,0 3; 1a 7,10,8 7,10,8 7; 1b 1,4,2 1,4,2 1; 1c 10,3,9 10,3,9 10; \
1d 6,9,8 6,9,8 6; 1e 3,1,0 3,1,0 3; 1f 6,1,3 6,1,3 6; 20 4,3,2 3,4,2 3; 21 3,0,9 3,0,9 3; \
22 7,4,9 7,4,9 7; 23 9,6,7 9,6,7 9; 24 10,7,8 10,7,8 10; 25 8,2,3 3,8,2 3; \
26 6,9,7 6,9,7 6; 27 6,9,8 9,6,8 9; 28 2,9,3 9,2,3 9; 29 9,8,2 9,8,2 9; 2a 8,3,10 3,8,10 3; \
2b 7,9,8 7,9,8 7; 2c 7,0,2 7,0,2 7; 2d 3,8,2 3,8,2 3; 2e 3,8,9 3,8,9 3; 2f 8,3,1 3,8,1 3; \
30 3,0,6 3,0,6 3; 31 0,3,10 0,3,10 0; 32 7,2,1 7,2,1 7; 33 3,4,9 3,4,9 3; 34 3,0,6 3,0,6 3; \
35 9,7,2 9,7,2 9; 36 7,4,6 7,4,6 7; 37 7,1,8 7,1,8 7; 38 6,3,0 6,3,0 6; 39 0,3,6 0,3,6 0; \
3a 2,8,9 9,2,8 9; 3b 0,9,7 0,9,7 0; 3c 0,7,9 0,7,9 0; 3d 2,11,9 11,2,9 11; \
3e 4,7,6 7,4,6 7; 3f 7,2,1 7,2,1 7; 40 7,9,4 7,9,4 7; 41 3,9,0 3,9,0 3; 42 9,2,7 9,2,7 9; \
43 11,9,2 11,9,2 11; 44 7,8,10 7,8,10 7; 45 6,1,8 6,1,8 6; 46 7,8,6 7,8,6 7; \
47 7,2,8 7,2,8 7; 48 6,11,4 6,11,4 6; 49 4,9,3 9,4,3 9; 4a 7,9,2 7,9,2 7; 4b 8,7,2 7,8,2 7; \
4c 10,11,9 10,11,9 10; 4d 7,4,10 7,4,10 7; 4e 10,9,7 10,9,7 10; 4f 9,8,7 9,8,7 9; \
50 2,1,7 7,2,1 7; 51 7,10,8 7,10,8 7; 52 2,8,7 7,2,8 7; 53 8,3,9 3,8,9 3; 54 9,6,3 9,6,3 9; \
55 9,3,2 9,3,2 9; 56 3,4,9 3,4,9 3; 57 2,4,11 11,2,4 11; 58 9,8,3 9,8,3 9; \
59 8,7,2 7,8,2 7; 5a 4,2,3 3,4,2 3; 5b 3,10,4 3,10,4 3; 5c 2,9,7 9,2,7 9; \
5d 6,11,8 6,11,8 6; 5e 7,8,6 7,8,6 7; 5f 8,3,9 3,8,9 3; 60 4,3,2 3,4,2 3; 61 3,0,9 3,0,9 3; \
62 7,4,9 7,4,9 7; 63 9,6,7 9,6,7 9; 64 10,7,8 10,7,8 10; 65 8,2,3 3,8,2 3; \
66 6,9,7 6,9,7 6; 67 6,9,8 9,6,8 9; 68 2,9,3 9,2,3 9; 69 9,8,2 9,8,2 9; 6a 8,3,10 3,8,10 3; \
6b 7,9,8 7,9,8 7; 6c 7,0,2 7,0,2 7; 6d 3,8,2 3,8,2 3; 6e 3,8,9 3,8,9 3; 6f 8,3,1 3,8,1 3; \
70 3,0,6 3,0,6 3; 71 0,3,10 0,3,10 0; 72 7,2,1 7,2,1 7; 73 3,4,9 3,4,9 3; 74 3,0,6 3,0,6 3; \
75 9,7,2 9,7,2 9; 76 7,4,6 7,4,6 7; 77 7,1,8 7,1,8 7; 78 6,3,0 6,3,0 6; 79 0,3,6 0,3,6 0; \
7a 2,8,9 9,2,8 9; 7b 0,9,7 0,9,7 0; 7c 0,7,9 0,7,9 0; 7d 2,11,9 11,2,9 11; \
7e 4,7,6 7,4,6 7; 7f 7,2,1 7,2,1 7; 80 6,9,3 9,6,3 9; 81 3,2,9 3,2,9 3; 82 9,3,0 9,3,0 9; \
83 3,9,2 3,9,2 3; 84 8,9,7 9,8,7 9; 85 9,3,2 9,3,2 9; 86 3,9,8 3,9,8 3; 87 7,9,2 7,9,2 7; \
88 7,2,9 7,2,9 7; 89 3,9,4 3,9,4 3; 8a 7,8,9 7,8,9 7; 8b 4,1,11 11,4,1 11; \
8c 6,3,4 6,3,4 6; 8d 7,1,8 7,1,8 7; 8e 7,8,9 7,8,9 7; 8f 6,7,1 6,7,1 6; 90 3,9,6 3,9,6 3; \
91 2,3,9 3,2,9 3; 92 9,3,2 9,3,2 9; 93 10,1,7 10,1,7 10; 94 3,2,9 3,2,9 3; \
95 3,6,0 3,6,0 3; 96 3,8,2 3,8,2 3; 97 9,4,11 9,4,11 9; 98 7,8,6 7,8,6 7; 99 3,6,0 3,6,0 3; \
9a 7,10,8 7,10,8 7; 9b 1,4,2 1,4,2 1; 9c 10,3,9 10,3,9 10; 9d 6,9,8 6,9,8 6; \
9e 3,1,0 3,1,0 3; 9f 6,1,3 6,1,3 6; a0 4,3,2 3,4,2 3; a1 3,0,9 3,0,9 3; a2 7,4,9 7,4,9 7; \
a3 9,6,7 9,6,7 9; a4 10,7,8 10,7,8 10; a5 8,2,3 3,8,2 3; a6 6,9,7 6,9,7 6; \
a7 6,9,8 9,6,8 9; a8 2,9,3 9,2,3 9; a9 9,8,2 9,8,2 9; aa 8,3,10 3,8,10 3; ab 7,9,8 7,9,8 7; \
ac 7,0,2 7,0,2 7; ad 3,8,2 3,8,2 3; ae 3,8,9 3,8,9 3; af 8,3,1 3,8,1 3; b0 3,0,6 3,0,6 3; \
b1 0,3,10 0,3,10 0; b2 7,2,1 7,2,1 7; b3 3,4,9 3,4,9 3; b4 3,0,6 3,0,6 3; b5 9,7,2 9,7,2 9; \
b6 7,4,6 7,4,6 7; b7 7,1,8 7,1,8 7; b8 6,3,0 6,3,0 6; b9 0,3,6 0,3,6 0; ba 2,8,9 9,2,8 9; \
bb 0,9,7 0,9,7 0; bc 0,7,9 0,7,9 0; bd 2,11,9 11,2,9 11; be 4,7,6 7,4,6 7; \
bf 7,2,1 7,2,1 7;";

const AFFINITY_B_ROWS: &str = "\
0 7,0,9 7,0,9 7; 1 3,15,6 3,15,6 3; 2 0,14,13 14,0,13 14; 3 15,14,3 14,15,3 14; \
4 12,0,14 12,0,14 12; 5 3,7,15 3,7,15 3; 6 15,3,9 15,3,9 15; 7 14,0,13 14,0,13 14; \
8 3,11,14 14,3,11 14; 9 9,0,3 9,0,3 9; a 5,8,6 8,5,6 8; b 0,14,3 14,0,3 14; \
c 6,7,9 6,7,9 6; d 3,7,9 3,7,9 3; e 15,14,12 14,15,12 14; f 11,9,8 8,11,9 8; \
10 6,15,12 6,15,12 6; 11 11,10,7 11,10,7 11; 12 8,14,11 8,14,11 8; 13 1,5,13 1,5,13 1; \
14 11,15,12 11,15,12 11; 15 9,11,5 9,11,5 9; 16 7,15,4 7,15,4 7; 17 0,12,14 14,0,12 14; \
18 14,15,3 14,15,3 14; 19 15,12,9 15,12,9 15; 1a 14,12,15 14,12,15 14; 1b 3,0,11 3,0,11 3; \
1c 14,10,7 14,10,7 14; 1d 1,5,12 1,5,12 1; 1e 9,12,13 9,12,13 9; 1f 5,9,11 5,9,11 5; \
20 10,9,1 10,9,1 10; 21 14,0,1 14,0,1 14; 22 5,11,14 14,5,11 14; 23 0,1,14 14,0,1 14; \
24 11,8,9 8,11,9 8; 25 6,9,0 6,9,0 6; 26 14,10,1 14,10,1 14; 27 14,3,15 14,3,15 14; \
28 14,8,1 14,8,1 14; 29 10,3,11 10,3,11 10; 2a 5,3,11 5,3,11 5; 2b 9,5,6 9,5,6 9; \
2c 15,13,9 15,13,9 15; 2d 3,14,5 14,3,5 14; 2e 15,3,11 15,3,11 15; 2f 9,5,3 9,5,3 9; \
30 12,0,9 12,0,9 12; 31 9,5,11 9,5,11 9; 32 10,13,14 14,10,13 14; 33 15,4,11 15,4,11 15; \
34 5,3,9 5,3,9 5; 35 3,10,9 3,10,9 3; 36 15,12,9 15,12,9 15; 37 9,5,7 9,5,7 9; \
38 4,15,13 4,15,13 4; 39 15,9,12 15,9,12 15; 3a 11,15,13 11,15,13 11; 3b 9,15,3 9,15,3 9; \
3c 5,6,13 5,6,13 5; 3d 11,14,10 14,11,10 14; 3e 5,11,3 5,11,3 5; 3f 9,0,8 8,9,0 8; \
40 11,0,14 14,11,0 14; 41 11,3,12 11,3,12 11; 42 0,11,14 14,0,11 14; 43 9,3,15 9,3,15 9; \
44 7,9,0 7,9,0 7; 45 14,5,11 14,5,11 14; 46 8,12,15 8,12,15 8; 47 0,12,1 0,12,1 0; \
48 11,9,15 11,9,15 11; 49 14,0,13 14,0,13 14; 4a 15,3,4 4,15,3 4; 4b 9,7,11 9,7,11 9; \
4c 9,0,8 8,9,0 8; 4d 11,12,5 11,12,5 11; 4e 9,3,11 9,3,11 9; 4f 8,10,14 8,10,14 8; \
50 11,5,7 11,5,7 11; 51 15,14,6 14,15,6 14; 52 9,0,7 9,0,7 9; 53 15,4,3 4,15,3 4; \
54 0,11,12 0,11,12 0; 55 10,11,9 10,11,9 10; 56 9,15,7 9,15,7 9; 57 11,9,8 8,11,9 8; \
58 15,4,8 4,15,8 4; 59 7,3,0 7,3,0 7; 5a 12,11,15 12,11,15 12; 5b 10,3,14 14,10,3 14; \
5c 15,11,13 15,11,13 15; 5d 0,11,7 0,11,7 0; 5e 14,5,1 14,5,1 14; 5f 15,3,9 15,3,9 15; \
60 11,9,5 11,9,5 11; 61 15,9,3 15,9,3 15; 62 15,9,13 15,9,13 15; 63 15,8,9 8,15,9 8; \
64 15,9,11 15,9,11 15; 65 15,11,12 15,11,12 15; 66 0,9,6 0,9,6 0; 67 3,0,9 3,0,9 3; \
68 15,7,1 15,7,1 15; 69 14,5,1 14,5,1 14; 6a 9,5,13 9,5,13 9; 6b 6,14,3 14,6,3 14; \
6c 15,9,1 15,9,1 15; 6d 15,9,7 15,9,7 15; 6e 15,7,9 15,7,9 15; 6f 10,13,9 10,13,9 10; \
70 5,14,11 14,5,11 14; 71 12,15,9 12,15,9 12; 72 11,0,8 8,11,0 8; 73 15,3,6 15,3,6 15; \
74 9,10,8 8,9,10 8; 75 15,12,14 12,15,14 12; 76 1,7,3 1,7,3 1; 77 12,11,10 12,11,10 12; \
78 9,6,15 9,6,15 9; 79 12,15,11 12,15,11 12; 7a 3,5,7 3,5,7 3; 7b 15,9,3 15,9,3 15; \
7c 11,13,7 11,13,7 11; 7d 11,9,15 11,9,15 11; 7e 9,5,11 9,5,11 9; 7f 5,9,11 5,9,11 5; \
80 7,14,10 14,7,10 14; 81 10,1,3 10,1,3 10; 82 7,14,3 14,7,3 14; 83 9,8,0 8,9,0 8; \
84 0,11,9 0,11,9 0; 85 9,15,3 9,15,3 9; 86 11,15,9 11,15,9 11; 87 6,3,9 6,3,9 6; \
88 15,9,7 15,9,7 15; 89 3,9,7 3,9,7 3; 8a 9,7,3 9,7,3 9; 8b 5,9,12 5,9,12 5; \
8c 4,0,12 4,0,12 4; 8d 15,3,9 15,3,9 15; 8e 9,15,11 9,15,11 9; 8f 9,3,12 9,3,12 9; \
90 15,11,9 15,11,9 15; 91 12,9,3 12,9,3 12; 92 5,3,1 5,3,1 5; 93 15,9,7 15,9,7 15; \
94 5,6,9 5,6,9 5; 95 15,9,12 15,9,12 15; 96 12,4,3 4,12,3 4; 97 5,14,1 14,5,1 14; \
98 12,9,0 12,9,0 12; 99 1,10,9 1,10,9 1; 9a 15,1,13 15,1,13 15; 9b 5,4,8 4,5,8 4; \
9c 3,1,0 3,1,0 3; 9d 3,0,14 14,3,0 14; 9e 9,0,3 9,0,3 9; 9f 11,9,3 11,9,3 11; \
a0 9,11,10 9,11,10 9; a1 15,8,9 8,15,9 8; a2 0,1,12 0,1,12 0; a3 3,0,9 3,0,9 3; \
a4 9,0,11 9,0,11 9; a5 14,0,8 14,0,8 14; a6 5,9,7 5,9,7 5; a7 9,5,1 9,5,1 9; \
a8 11,15,9 11,15,9 11; a9 11,9,15 11,9,15 11; aa 5,11,9 5,11,9 5; ab 15,9,6 15,9,6 15; \
ac 5,9,3 5,9,3 5; ad 9,0,11 9,0,11 9; ae 3,15,7 3,15,7 3; af 0,9,8 8,0,9 8; \
b0 12,5,9 12,5,9 12; b1 15,14,6 14,15,6 14; b2 15,3,11 15,3,11 15; b3 5,6,9 5,6,9 5; \
b4 15,9,12 15,9,12 15; b5 10,12,11 10,12,11 10; b6 13,9,15 13,9,15 13; \
b7 11,3,15 11,3,15 11; b8 10,3,9 10,3,9 10; b9 0,12,1 12,0,1 12; ba 9,0,3 9,0,3 9; \
bb 15,9,3 15,9,3 15; bc 11,3,9 11,3,9 11; bd 0,12,9 0,12,9 0; be 9,3,5 9,3,5 9; \
bf 15,4,3 15,4,3 15; c0 11,9,15 11,9,15 11; c1 6,8,10 8,6,10 8; c2 9,12,5 12,9,5 12; \
c3 3,10,7 3,10,7 3; c4 12,15,9 12,15,9 12; c5 9,0,13 9,0,13 9; c6 0,14,11 14,0,11 14; \
c7 0,12,14 14,0,12 14; c8 11,15,9 11,15,9 11; c9 12,11,15 12,11,15 12; \
ca 13,9,15 13,9,15 13; cb 15,14,12 14,15,12 14; cc 12,9,0 12,9,0 12; cd 6,9,0 6,9,0 6; \
ce 8,5,4 8,5,4 8; cf 12,15,11 12,15,11 12; d0 5,12,9 5,12,9 5; d1 9,15,7 9,15,7 9; \
d2 8,11,7 8,11,7 8; d3 5,14,8 14,5,8 14; d4 0,9,3 0,9,3 0; d5 0,11,9 0,11,9 0; \
d6 4,6,12 4,6,12 4; d7 14,10,11 14,10,11 14; d8 8,0,11 8,0,11 8; d9 9,5,11 9,5,11 9; \
da 5,12,9 5,12,9 5; db 9,15,7 9,15,7 9; dc 6,15,9 6,15,9 6; dd 3,15,14 14,3,15 14; \
de 9,3,15 9,3,15 9; df 11,12,0 11,12,0 11; e0 9,12,0 12,9,0 12; e1 0,1,7 0,1,7 0; \
e2 11,7,9 11,7,9 11; e3 3,9,11 3,9,11 3; e4 9,3,15 9,3,15 9; e5 14,3,0 14,3,0 14; \
e6 13,9,0 13,9,0 13; e7 15,11,14 14,15,11 14; e8 9,12,0 9,12,0 9; e9 11,13,7 11,13,7 11; \
ea 14,3,1 14,3,1 14; eb 15,3,9 15,3,9 15; ec 5,12,9 12,5,9 12; ed 4,12,3 4,12,3 4; \
ee 15,9,12 15,9,12 15; ef 15,9,8 8,15,9 8; f0 10,3,1 10,3,1 10; f1 8,11,14 8,11,14 8; \
f2 11,3,14 14,11,3 14; f3 4,11,5 4,11,5 4; f4 9,10,1 9,10,1 9; f5 11,5,4 4,11,5 4; \
f6 11,4,15 4,11,15 4; f7 15,14,3 14,15,3 14; f8 10,9,3 10,9,3 10; f9 8,5,9 8,5,9 8; \
fa 7,5,9 7,5,9 7; fb 11,4,0 4,11,0 4; fc 14,1,13 14,1,13 14; fd 14,6,7 14,6,7 14; \
fe 14,3,12 14,3,12 14; ff 3,11,12 3,11,12 3;";
