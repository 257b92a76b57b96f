//! `stoker`: the composition root. Wires store, transport, storage and engine together.

fn main() {
    eprintln!("stoker: no subcommand is implemented yet");
    std::process::exit(2);
}
