//! The `cli_args` fuzz target's body (`flashoverlap::cli::fuzz`) over its seed corpus and
//! a fixed stream of generated inputs, in this test binary's own process (a run sets the
//! process-wide memory limit, which the library's unit tests must not see change).

use flashoverlap::cli::fuzz;

fn xorshift(seed: u64) -> impl FnMut() -> u8 {
    let mut x = seed;
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    }
}

#[test]
fn cli_args_smoke() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/cli_args");
    let mut inputs: Vec<Vec<u8>> = Vec::new();
    let mut seeds: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    seeds.sort();
    for p in &seeds {
        inputs.push(std::fs::read(p).unwrap());
    }
    let mut next = xorshift(0x9E37_79B9_7F4A_7C15);
    for i in 0..150 {
        inputs.push((0..32 + i % 96).map(|_| next()).collect());
    }
    let mut codes = [0usize; 4];
    for data in &inputs {
        if let Some((argv, code)) = fuzz::run(data) {
            // SHOW=1 lists the command lines with their exit codes.
            if std::env::var("SHOW").is_ok() {
                eprintln!("{code} {}", argv[1..].join(" "));
            }
            codes[code as usize] += 1;
        }
    }
    eprintln!("exit codes 0..3 over {} inputs: {codes:?}", inputs.len());
    // The generated command lines reach every outcome a user can see: results, and
    // errors of their input; a run's own failure (exit 1) needs rarer inputs.
    assert!(codes[0] >= 10, "{codes:?}: too few runs got through");
    assert!(codes[2] >= 10, "{codes:?}");
}

/// The command line a saved fuzzer input stands for, and its files:
/// `FUZZ_INPUT=fuzz/artifacts/cli_args/crash-… cargo test --test fuzz_cli show -- --ignored --nocapture`.
#[test]
#[ignore = "triage tool: needs FUZZ_INPUT"]
fn show() {
    let path = std::env::var("FUZZ_INPUT").expect("FUZZ_INPUT=<a saved input>");
    let data = std::fs::read(&path).unwrap();
    let dir = std::env::temp_dir().join("flashoverlap-fuzz-show");
    std::fs::create_dir_all(&dir).unwrap();
    let argv = fuzz::command_line_of(&data, &dir).expect("no invocation in these bytes");
    eprintln!("{}", argv.join(" "));
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        eprintln!(
            "--- {}\n{}",
            p.display(),
            std::fs::read_to_string(&p).unwrap_or_default()
        );
    }
}
