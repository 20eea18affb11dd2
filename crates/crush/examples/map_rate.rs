//! Mappings per second for a 3-replica host rule over 1,000 OSDs
//! (one OSD per host, straw2): `cargo run --release --example map_rate`.

use std::time::Instant;

use carmine_crush::CrushMap;

fn main() {
    let osd_count = 1000;
    let map = CrushMap::simple(osd_count);
    let weights = vec![0x10000; osd_count as usize];
    let inputs = 50_000u32;
    let start = Instant::now();
    let mut checksum = 0i64;
    for x in 0..inputs {
        checksum += i64::from(map.do_rule(0, x, 3, &weights)[0]);
    }
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "{osd_count} OSDs, 3 replicas: {inputs} mappings in {seconds:.3} s = {:.0} mappings/s (checksum {checksum})",
        f64::from(inputs) / seconds
    );
}
