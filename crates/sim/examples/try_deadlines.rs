fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().unwrap())
        .collect();
    let (from, to) = (args[0], args[1]);
    let mut failed = 0;
    for seed in from..to {
        for secs in 1..=4u64 {
            let mut config =
                carmine_sim::SimConfig::from_seed(seed).with_faults(carmine_sim::FaultClasses::ALL);
            config.op_timeout = secs * 1_000_000_000;
            let report = carmine_sim::run_config(config);
            if !report.ok {
                failed += 1;
                println!(
                    "seed {seed} deadline {secs}s FAILED: {:?}",
                    report.violations.first()
                );
            }
        }
    }
    println!("{failed} failed");
}
