//! An OSiRIS-style site-affine rule: take one datacenter, chooseleaf one
//! host there, emit; then take the root and chooseleaf the rest across the
//! other datacenters. The chosen site then holds every primary.

use carmine_crush::parse_text;

fn two_site_map() -> String {
    let mut text = String::from(
        "tunable choose_local_tries 0\ntunable choose_local_fallback_tries 0\ntunable choose_total_tries 50\n\
         tunable chooseleaf_descend_once 1\ntunable chooseleaf_vary_r 1\ntunable chooseleaf_stable 1\n\
         tunable straw_calc_version 1\ntunable allowed_bucket_algs 54\n\
         type 0 osd\ntype 1 host\ntype 8 datacenter\ntype 11 root\n",
    );
    for osd in 0..12 {
        text.push_str(&format!("device {osd} osd.{osd}\n"));
    }
    for host in 0..6 {
        text.push_str(&format!(
            "host h{host} {{ id -{} alg straw2 hash 0 item osd.{} weight 1.0 item osd.{} weight 1.0 }}\n",
            host + 10,
            2 * host,
            2 * host + 1
        ));
    }
    text.push_str("datacenter um { id -2 alg straw2 hash 0 item h0 item h1 item h2 }\n");
    text.push_str("datacenter msu { id -3 alg straw2 hash 0 item h3 item h4 item h5 }\n");
    text.push_str("root default { id -1 alg straw2 hash 0 item um item msu }\n");
    text.push_str(
        "rule um_primary { id 0 type replicated min_size 1 max_size 10\n\
         step take um\nstep chooseleaf firstn 1 type host\nstep emit\n\
         step take default\nstep chooseleaf firstn -1 type datacenter\nstep emit\n}\n\
         rule plain { id 1 type replicated min_size 1 max_size 10\n\
         step take default\nstep chooseleaf firstn 0 type host\nstep emit\n}\n",
    );
    text
}

#[test]
fn the_affine_site_holds_every_primary() {
    let map = parse_text(&two_site_map()).unwrap();
    let weights = vec![0x10000; 12];
    let in_um = |osd: i32| osd < 6;
    let inputs = 4000;
    let (mut affine_primaries, mut plain_primaries) = (0, 0);
    for x in 0..inputs {
        let osds = map.do_rule(0, x, 2, &weights);
        assert_eq!(osds.len(), 2, "x {x}: {osds:?}");
        // As in Ceph, the second take may land in the same site again (even
        // on the same OSD); the rule only pins the primary.
        affine_primaries += usize::from(in_um(osds[0]));
        plain_primaries += usize::from(in_um(map.do_rule(1, x, 2, &weights)[0]));
    }
    let share = |count: usize| count as f64 / f64::from(inputs);
    println!(
        "primary share at site um: affine rule {:.3}, plain rule {:.3}",
        share(affine_primaries),
        share(plain_primaries)
    );
    assert_eq!(affine_primaries, inputs as usize);
    assert!((0.4..0.6).contains(&share(plain_primaries)));
}
