//! Imports a .pt2 archive or model.json and prints the IR (or the error).
//!
//! `cargo run -p tpuc-frontend-fx --example fx_import -- model.pt2 [--quiet] [--repeat=N]`
//! (`--repeat` imports N times and reports the last, warm, timing)

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quiet = args.iter().any(|a| a == "--quiet");
    let repeat: usize = args.iter().find_map(|a| a.strip_prefix("--repeat=")).and_then(|n| n.parse().ok()).unwrap_or(1);
    let mut failed = false;
    for path in args.iter().filter(|a| !a.starts_with("--")) {
        for _ in 1..repeat {
            let _ = tpuc_frontend_fx::import_file(std::path::Path::new(path));
        }
        let t = std::time::Instant::now();
        match tpuc_frontend_fx::import_file(std::path::Path::new(path)) {
            Ok(imp) => {
                let ms = t.elapsed().as_secs_f64() * 1e3;
                if !quiet {
                    println!("{}", tpuc_ir::print_module(&imp.module));
                }
                eprintln!("{path}: ok ({} ops, {} weights, {ms:.2} ms)", imp.module.num_live_ops(), imp.weights.len());
            }
            Err(e) => {
                eprintln!("{path}: error: {e}");
                failed = true;
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}
