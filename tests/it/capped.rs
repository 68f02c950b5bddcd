//! The binary under a memory cap and a time cap: a case that starts to allocate without
//! bound or to run without end fails the suite by its name, instead of taking the machine
//! (the regressions issue 25 found: a timeline header sizing a 96 GB vector, a sample
//! count running for hours).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Address space a case may take: far above what any case needs (the largest take tens
/// of MiB), far below the 24 GiB of the CI machine.
pub const MEMORY_CAP_KIB: u64 = 4 << 20;

/// Wall time a case may take: every case finishes in well under a second on 2 cores.
pub const TIME_CAP: Duration = Duration::from_secs(60);

/// What a capped run printed and how it ended.
#[derive(Debug)]
pub struct Capped {
    pub code: Option<i32>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

/// Run the binary with `args` under [`MEMORY_CAP_KIB`] (`ulimit -v`; glibc held to two
/// malloc arenas so that reserved but untouched arenas do not count against it) and
/// [`TIME_CAP`]; panics naming `name` when a cap is hit.
pub fn run(name: &str, args: &[String]) -> Capped {
    run_within(name, args, MEMORY_CAP_KIB, TIME_CAP)
}

fn run_within(name: &str, args: &[String], memory_kib: u64, time_cap: Duration) -> Capped {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("stdout");
    let err = dir.path().join("stderr");
    let bin = assert_cmd::cargo::cargo_bin("flashoverlap");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {memory_kib} && exec \"$0\" \"$@\""))
        .arg(&bin)
        .args(args)
        .env("MALLOC_ARENA_MAX", "2")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > time_cap {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name}: still running after {time_cap:?} (the time cap); killed");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stderr = std::fs::read(&err).unwrap();
    let text = String::from_utf8_lossy(&stderr);
    if text.contains("memory allocation of") {
        panic!(
            "{name}: over the memory cap of {} MiB\n{text}",
            memory_kib >> 10
        );
    }
    if status.code().is_none() {
        panic!("{name}: killed by a signal ({status})\n{text}");
    }
    Capped {
        code: status.code(),
        stdout: std::fs::read(&out).unwrap(),
        stderr,
    }
}

#[test]
fn the_caps_catch_what_they_are_for() {
    // A bounded input passes; a run that allocates past the memory cap, or runs past a
    // (here shortened) time cap, is caught and named.
    let huge = tempfile::tempdir().unwrap();
    let f = huge.path().join("t.json");
    // Without its bound, this header sizes a 96 GB vector (the regression it guards).
    std::fs::write(&f, r#"{"format":"flashoverlap-timeline","version":1,"source":"predicted","scenario":"s","strategy":"flash","ranks":4000000000,"peak_flops":1.0,"model_flops":1.0,"streams":[],"links":[],"spans":[]}"#).unwrap();
    let r = run(
        "bounded header",
        &[
            "plot".into(),
            "timeline".into(),
            f.display().to_string(),
            "--out".into(),
            huge.path().join("t.svg").display().to_string(),
        ],
    );
    assert_eq!(r.code, Some(2));
    let caught = std::panic::catch_unwind(|| {
        run_within(
            "over the cap",
            &[
                "collective".into(),
                "--hardware".into(),
                "ring-50gib".into(),
                "--gpus".into(),
                "4096".into(),
                "--op".into(),
                "all-reduce".into(),
                // Unequal parts: a stored plan (an equal split is generated).
                "--sizes".into(),
                "1073741820".into(),
                "--chunks".into(),
                "4".into(),
                "--symmetry".into(),
                "off".into(),
                "--max-memory".into(),
                "64".into(),
            ],
            256 << 10,
            TIME_CAP,
        )
    });
    let msg = caught.expect_err("a 32 GiB plan ran under a 256 MiB cap");
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("over the memory cap"), "{msg}");
    let caught = std::panic::catch_unwind(|| {
        run_within(
            "too long",
            &[
                "simulate".into(),
                "--samples".into(),
                "1000000".into(),
                "--compute-jitter".into(),
                "0.1".into(),
            ],
            MEMORY_CAP_KIB,
            Duration::from_millis(500),
        )
    });
    let msg = caught.expect_err("a million samples finished in 0.5 s");
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("too long: still running"), "{msg}");
}
