//! The API the rest of Carmine codes against: dev-cluster maps, adding
//! OSDs, the tree view, and the binary form's error handling.

use carmine_crush::{parse_text, CrushMap, DecodeError, CRUSH_ITEM_NONE};

#[test]
fn simple_map_has_one_host_per_osd_and_a_host_rule() {
    let map = CrushMap::simple(5);
    assert_eq!(map.max_devices(), 5);
    assert_eq!(map.rule_id_by_name("replicated_rule"), Some(0));
    assert!(map.has_rule(0));
    assert!(!map.has_rule(1));
    assert_eq!(map.device_name(3), Some("osd.3"));
    assert_eq!(map.bucket_name(-1), Some("default"));
    let weights = vec![0x10000; 5];
    for x in 0..200 {
        let osds = map.do_rule(0, x, 3, &weights);
        assert_eq!(osds.len(), 3, "x {x}");
        let mut sorted = osds.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 3, "x {x}: duplicate in {osds:?}");
    }
}

#[test]
fn simple_map_prints_like_crushtool_and_compiles_back() {
    let map = CrushMap::simple(2);
    let text = map.to_text();
    assert!(
        text.contains("host host1 {\n\tid -3\t\t# do not change unnecessarily\n\t# weight 1.000\n"),
        "{text}"
    );
    assert!(text
        .contains("root default {\n\tid -1\t\t# do not change unnecessarily\n\t# weight 2.000\n"));
    assert!(text.contains("\tstep chooseleaf firstn 0 type host\n"));
    let parsed = parse_text(&text).unwrap();
    assert_eq!(parsed.to_text(), text);
    assert_eq!(parsed.encode(), map.encode());
}

#[test]
fn out_osds_are_skipped_and_missing_weights_count_as_out() {
    let map = CrushMap::simple(4);
    let mut weights = vec![0x10000; 4];
    weights[2] = 0;
    for x in 0..100 {
        assert!(!map.do_rule(0, x, 3, &weights).contains(&2));
        // Only osd.0 and osd.1 have weights: at most two results.
        let short = map.do_rule(0, x, 3, &[0x10000, 0x10000]);
        assert!(
            short.len() <= 2 && short.iter().all(|osd| *osd < 2),
            "{short:?}"
        );
    }
}

#[test]
fn add_osd_in_own_host_grows_the_map_and_the_root_weight() {
    let mut map = CrushMap::simple(2);
    map.add_osd_in_own_host(7, 0x20000);
    assert_eq!(map.max_devices(), 8);
    assert_eq!(map.device_name(7), Some("osd.7"));
    let rows = map.tree_rows();
    assert_eq!(rows[0].name, "default");
    assert_eq!(rows[0].depth, 0);
    assert_eq!(rows[0].weight, 4.0);
    let host = rows.iter().find(|row| row.name == "host7").unwrap();
    assert_eq!(
        (host.type_name.as_str(), host.depth, host.weight),
        ("host", 1, 2.0)
    );
    let osd = rows.iter().find(|row| row.id == 7).unwrap();
    assert_eq!(
        (
            osd.type_name.as_str(),
            osd.name.as_str(),
            osd.depth,
            osd.weight
        ),
        ("osd", "osd.7", 2, 2.0)
    );
    // Adding it again changes nothing.
    let before = map.clone();
    map.add_osd_in_own_host(7, 0x10000);
    assert_eq!(map, before);
    let weights = vec![0x10000; 8];
    let hits = (0..1000)
        .filter(|x| map.do_rule(0, *x, 3, &weights).contains(&7))
        .count();
    assert!(
        hits > 500,
        "osd.7 holds half the weight but got {hits} of 1000"
    );
}

#[test]
fn add_osd_builds_a_map_from_nothing() {
    let mut map = CrushMap::new();
    map.add_osd_in_own_host(0, 0x10000);
    assert_eq!(map.bucket_name(-1), Some("default"));
    assert_eq!(map.tree_rows().len(), 3);
}

#[test]
fn indep_rules_leave_holes() {
    let text = "type 0 osd\ntype 1 host\ntype 11 root\n\
        device 0 osd.0\ndevice 1 osd.1\n\
        host a { id -2 alg straw2 hash 0 item osd.0 weight 1.0 }\n\
        host b { id -3 alg straw2 hash 0 item osd.1 weight 1.0 }\n\
        root default { id -1 alg straw2 hash 0 item a item b }\n\
        rule ec { id 0 type erasure step take default step chooseleaf indep 0 type host step emit }\n";
    let map = parse_text(text).unwrap();
    let out = map.do_rule(0, 1, 3, &[0x10000, 0x10000]);
    assert_eq!(out.len(), 3);
    assert_eq!(
        out.iter().filter(|osd| **osd == CRUSH_ITEM_NONE).count(),
        1,
        "{out:?}"
    );
}

#[test]
fn decode_rejects_bad_input_without_panicking() {
    let bytes = CrushMap::simple(3).encode();
    assert_eq!(CrushMap::decode(b"nope"), Err(DecodeError::BadMagic));
    let mut newer = bytes.clone();
    newer[4] = 0xff;
    assert!(matches!(
        CrushMap::decode(&newer),
        Err(DecodeError::UnsupportedVersion { .. })
    ));
    for length in 0..bytes.len() {
        assert!(
            CrushMap::decode(&bytes[..length]).is_err(),
            "prefix of {length} bytes decoded"
        );
    }
    // Flip every byte in turn: any result is fine, a panic is not.
    for index in 0..bytes.len() {
        let mut corrupt = bytes.clone();
        corrupt[index] ^= 0xa5;
        if let Ok(map) = CrushMap::decode(&corrupt) {
            let _ = map.do_rule(0, 1, 3, &[0x10000; 3]);
        }
    }
}

#[test]
fn a_removed_device_leaves_every_bucket_and_only_its_inputs_move() {
    let mut map = CrushMap::simple(5);
    let before = map.clone();
    assert_eq!(map.remove_device(2), 1);
    assert_eq!(map.device_name(2), None);
    assert!(!map.device_in_any_bucket(2));
    // Its host stays, empty; the root loses its weight.
    let rows = map.tree_rows();
    assert_eq!(rows[0].weight, 4.0);
    let host = rows.iter().find(|row| row.name == "host2").unwrap();
    assert_eq!(host.weight, 0.0);
    assert_eq!(map.max_devices(), 5);
    // straw2: only the inputs that chose it move.
    let weights = vec![0x10000; 5];
    for x in 0..2000 {
        let old = before.do_rule(0, x, 1, &weights);
        let new = map.do_rule(0, x, 1, &weights);
        assert!(!new.contains(&2));
        if old[0] != 2 {
            assert_eq!(old, new, "input {x} moved though it did not use osd.2");
        }
    }
    // The result encodes and decodes, and removing it again changes nothing.
    assert_eq!(CrushMap::decode(&map.encode()).unwrap(), map);
    let again = map.clone();
    assert_eq!(map.remove_device(2), 0);
    assert_eq!(map, again);
}

/// Weight sets keep summing up the hierarchy when a device goes, as Ceph's
/// `remove_item` keeps them: the device's column leaves its host's weight set, and
/// the root's entry for that host becomes the sum of what is left.
#[test]
fn a_removed_device_leaves_weight_sets_that_still_sum() {
    let text = "type 0 osd\ntype 1 host\ntype 11 root\n\
        device 0 osd.0\ndevice 1 osd.1\ndevice 2 osd.2\n\
        host h0 { id -2 alg straw2 hash 0\nitem osd.0 weight 1.0\nitem osd.1 weight 1.0\n}\n\
        host h1 { id -3 alg straw2 hash 0\nitem osd.2 weight 1.0\n}\n\
        root default { id -1 alg straw2 hash 0\nitem h0 weight 2.0\nitem h1 weight 1.0\n}\n\
        rule r { id 0 type replicated step take default step chooseleaf firstn 0 type host step emit }\n\
        choose_args 0 {\n\
          { bucket_id -1\n weight_set [ [ 1.5 0.75 ] [ 1.25 1.0 ] ]\n }\n\
          { bucket_id -2\n weight_set [ [ 0.5 1.0 ] [ 0.25 1.0 ] ]\n }\n\
          { bucket_id -3\n weight_set [ [ 0.75 ] [ 1.0 ] ]\n }\n\
        }\n";
    let mut map = carmine_crush::parse_text(text).unwrap();
    assert_eq!(map.remove_device(0), 1);
    let args = &map.choose_args()[&0];
    let h0 = &args[&-2].weight_set;
    assert_eq!(h0, &vec![vec![0x10000], vec![0x10000]]);
    // The root's entry for h0 is what h0's set now sums to; h1's is untouched.
    let root = &args[&-1].weight_set;
    assert_eq!(root, &vec![vec![0x10000, 0xC000], vec![0x10000, 0x10000]]);
    assert_eq!(map.item_weight(-2), Some(0x10000));
}
