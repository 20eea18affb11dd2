//! Runs seeds from the command line (the same arguments as `carmine sim`):
//! `cargo run -p carmine-sim --example sim_seed -- --seed 3 --faults all`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::process::exit(carmine_sim::main_cli(&args));
}
