//! The GPU-side commands on a machine without GPUs: `validate` over recorded run
//! directories (synthesised here from the simulator's own timelines), `calibrate --from`
//! refitting saved measurements, and the errors `run` and `calibrate` give when CUDA is
//! not compiled in or absent.

use super::cli::bin;
use serde_json::Value;
use std::path::Path;

/// A `run --out` directory whose "measured" timelines are the predicted ones with every
/// time multiplied by `scale`.
fn fake_run_dir(dir: &Path, scale: f64) {
    let sim = dir.join("sim");
    bin()
        .args(["simulate", "--tp", "2", "--batch", "1", "--seq", "2048"])
        .args([
            "--strategy",
            "sequential,flash",
            "--out",
            sim.to_str().unwrap(),
        ])
        .assert()
        .success();
    let run = serde_json::json!({
        "scenario": {
            "version": 1, "name": "default", "description": "", "model": "default-block",
            "hardware": "h100-sxm-8", "workload": "mlp", "batch": 1, "seq": 2048,
            "dtype": "bf16", "parallel": {"tp": 2, "sp": true, "dp": 1, "ulysses": 1},
            "strategies": ["sequential", "flash"]
        },
        "emulate_rank": null,
        "stand_in": null,
        "transport": "nccl"
    });
    std::fs::write(dir.join("run.json"), run.to_string()).unwrap();
    for s in ["sequential", "flash"] {
        let text = std::fs::read_to_string(sim.join(format!("timeline-{s}.json"))).unwrap();
        std::fs::write(dir.join(format!("predicted-{s}.json")), &text).unwrap();
        let mut t: Value = serde_json::from_str(&text).unwrap();
        t["source"] = "measured".into();
        for sp in t["spans"].as_array_mut().unwrap() {
            for k in ["start_us", "end_us"] {
                let v = sp[k].as_f64().unwrap();
                sp[k] = (v * scale).into();
            }
        }
        std::fs::write(dir.join(format!("measured-{s}.json")), t.to_string()).unwrap();
    }
}

#[test]
fn validate_compares_recorded_runs_and_predicts_them_again() {
    let d = tempfile::tempdir().unwrap();
    let run = d.path().join("case-a");
    std::fs::create_dir(&run).unwrap();
    fake_run_dir(&run, 1.25);
    let r = run.to_str().unwrap();
    let json = |extra: &[&str]| -> Value {
        let out = bin()
            .args(["validate", r, "--format", "json"])
            .args(extra)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        serde_json::from_slice(&out).unwrap()
    };
    // Saved predictions: every time is 1/1.25 of the measured one, so -20% everywhere.
    let v = json(&[]);
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    for c in cases {
        let e = c["makespan_error_pct"].as_f64().unwrap();
        assert!((e + 20.0).abs() < 1e-6, "{c}");
    }
    // Predicting again with the same profile gives the same numbers.
    let again = json(&["--hardware", "h100-sxm-8"]);
    for (a, b) in cases.iter().zip(again["cases"].as_array().unwrap()) {
        let (x, y) = (&a["makespan_error_pct"], &b["makespan_error_pct"]);
        assert!((x.as_f64().unwrap() - y.as_f64().unwrap()).abs() < 1e-9);
    }
    // A faster profile predicts a shorter makespan: a larger negative error.
    let h200 = json(&["--hardware", "h200-sxm-8"]);
    let e = h200["cases"][0]["makespan_error_pct"].as_f64().unwrap();
    assert!(e < -20.0, "{e}");
    // The table names the case and strategy; --out writes the JSON.
    let table = bin()
        .args([
            "validate",
            r,
            "--out",
            d.path().join("v.json").to_str().unwrap(),
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let table = String::from_utf8(table).unwrap();
    assert!(
        table.contains("case-a") && table.contains("flash"),
        "{table}"
    );
    assert!(d.path().join("v.json").exists());
}

/// `--timelines` writes the new predictions in the run's schema (needs `--hardware`);
/// a results.json with a back-to-back baseline gives each case its executor overhead.
#[test]
fn validate_writes_new_predictions_and_reads_the_overhead_baseline() {
    let d = tempfile::tempdir().unwrap();
    let run = d.path().join("case-b");
    std::fs::create_dir(&run).unwrap();
    fake_run_dir(&run, 1.25);
    let measured = |s: &str| -> f64 {
        let t: Value = serde_json::from_str(
            &std::fs::read_to_string(run.join(format!("measured-{s}.json"))).unwrap(),
        )
        .unwrap();
        t["spans"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x["end_us"].as_f64().unwrap())
            .fold(0.0, f64::max)
    };
    // Baselines 2% under the measured makespans: +2.04% overhead.
    let results = serde_json::json!({"version": 1, "results": [
        {"strategy": "sequential", "back_to_back_us": measured("sequential") / 1.02},
        {"strategy": "flash", "back_to_back_us": measured("flash") / 1.02},
    ]});
    std::fs::write(run.join("results.json"), results.to_string()).unwrap();
    let out = d.path().join("tl");
    let a = bin()
        .args([
            "validate",
            run.to_str().unwrap(),
            "--hardware",
            "h200-sxm-8",
        ])
        .args(["--format", "json", "--timelines", out.to_str().unwrap()])
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    for c in v["cases"].as_array().unwrap() {
        let o = c["executor_overhead_pct"].as_f64().unwrap();
        assert!((o - 2.0).abs() < 1e-6, "{c}");
    }
    let w = v["summary"]["worst_executor_overhead_pct"]
        .as_f64()
        .unwrap();
    assert!((w - 2.0).abs() < 1e-6, "{}", v["summary"]);
    let table = bin()
        .args(["validate", run.to_str().unwrap()])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let table = String::from_utf8(table).unwrap();
    assert!(
        table.contains("back to back: median 2.00%, worst 2.00%"),
        "{table}"
    );
    for s in ["sequential", "flash"] {
        let p = out.join("case-b").join(format!("predicted-{s}.json"));
        let t: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        assert_eq!(t["source"], "predicted", "{}", p.display());
        assert!(!t["spans"].as_array().unwrap().is_empty());
    }
    // Written files are not overwritten without --force (an output error); --timelines
    // needs --hardware (a usage error).
    let a = bin()
        .args([
            "validate",
            run.to_str().unwrap(),
            "--hardware",
            "h200-sxm-8",
        ])
        .args(["--timelines", out.to_str().unwrap()])
        .assert()
        .code(3);
    let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
    assert!(err.contains("predicted-"), "{err}");
    bin()
        .args(["validate", run.to_str().unwrap()])
        .args(["--timelines", out.to_str().unwrap()])
        .assert()
        .code(2);
}

#[test]
fn validate_skips_runs_whose_ranks_shared_a_gpu_and_names_bad_dirs() {
    let d = tempfile::tempdir().unwrap();
    fake_run_dir(d.path(), 1.0);
    let p = d.path().join("run.json");
    let mut rf: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    rf["comparable"] = false.into();
    std::fs::write(&p, rf.to_string()).unwrap();
    let a = bin()
        .args(["validate", d.path().to_str().unwrap(), "--format", "json"])
        .assert()
        .success();
    let out: Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    assert_eq!(out["cases"].as_array().unwrap().len(), 0);
    let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
    assert!(err.contains("skipped"), "{err}");
    let missing = d.path().join("nope");
    let a = bin()
        .args(["validate", missing.to_str().unwrap()])
        .assert()
        .code(2);
    let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
    assert!(err.contains("nope") && err.contains("run.json"), "{err}");
}

fn calibration_json(dir: &Path) -> std::path::PathBuf {
    // Synthetic measurements: a GPU exactly like the model with efficiency 0.7 and
    // k_half 256 (shapes of at least one full wave, where the model never splits K).
    let mut gemms = Vec::new();
    for &m in &[4096u64, 16384, 32768] {
        for &n in &[2048u64, 8192] {
            for &k in &[2048u64, 8192] {
                gemms.push((m, n, k));
            }
        }
    }
    let sample = |m: u64, n: u64, k: u64| {
        // 128×256 tiles on 132 SMs at 0.7·989.4 TFLOP/s · k/(k+256).
        let tiles = m.div_ceil(128) * n.div_ceil(256);
        let waves = tiles.div_ceil(132) as f64;
        let eff = 0.7 * k as f64 / (k as f64 + 256.0);
        waves * 2.0 * 128.0 * 256.0 * k as f64 / (989.4e12 / 132.0 * eff)
    };
    let rows: Vec<Value> = gemms
        .iter()
        .map(|&(m, n, k)| {
            let secs = sample(m, n, k);
            // The 4096-row shapes also timed warm (again over the same B).
            if m == 4096 {
                serde_json::json!({"m": m, "n": n, "k": k, "secs": secs, "warm_secs": 0.9 * secs})
            } else {
                serde_json::json!({"m": m, "n": n, "k": k, "secs": secs})
            }
        })
        .collect();
    let c = serde_json::json!({
        "device": "Test GPU", "sm_count": 132, "gemms": rows,
        "copy_bytes_per_s": 4.0e12, "add_bytes_per_s": 3.9e12, "launch_s": 4e-6,
        "gemm_alone_s": 1e-3, "gemm_with_copy_s": 1.01e-3,
        "copy_alone_s": 5e-4, "copy_with_gemm_s": 1.5e-3
    });
    let p = dir.join("t.calibration.json");
    std::fs::write(&p, c.to_string()).unwrap();
    p
}

#[test]
fn calibrate_refits_saved_measurements_into_a_profile_the_simulator_reads() {
    let d = tempfile::tempdir().unwrap();
    let cal = calibration_json(d.path());
    let prof = d.path().join("t.toml");
    let out = bin()
        .args(["calibrate", "--from", cal.to_str().unwrap(), "--name", "t"])
        .args(["--out", prof.to_str().unwrap()])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("refit from"), "{out}");
    let text = std::fs::read_to_string(&prof).unwrap();
    assert!(
        text.starts_with("# Measured by `flashoverlap calibrate"),
        "{text}"
    );
    let toml: toml::Value = toml::from_str(&text).unwrap();
    let g = &toml["gpu"]["gemm"];
    // The pattern search comes close to the generating parameters (stream-K and the
    // per-SM load bound, absent from the data, fitted out of the way) and says how close.
    assert!(
        (g["efficiency"].as_float().unwrap() - 0.7).abs() < 0.02,
        "{g}"
    );
    assert!(
        (g["k_half"].as_float().unwrap() - 256.0).abs() < 32.0,
        "{g}"
    );
    let line = text
        .lines()
        .find(|l| l.contains("median error"))
        .unwrap_or_default();
    let pct = |key: &str| -> f64 {
        let at = line.find(key).unwrap() + key.len();
        line[at..]
            .split('%')
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    assert!(pct("median error") < 0.5 && pct("worst") < 2.0, "{line}");
    assert_eq!(g["measured"].as_array().unwrap().len(), 12);
    // Warm times go beside the cold ones, where measured, and the header says so.
    for p in g["measured"].as_array().unwrap() {
        let (us, warm) = (p["us"].as_float().unwrap(), p.get("warm_us"));
        match p["m"].as_integer() {
            Some(4096) => {
                let w = warm.and_then(|w| w.as_float()).unwrap();
                assert!((w / us - 0.9).abs() < 1e-9, "{p}");
            }
            _ => assert!(warm.is_none(), "{p}"),
        }
    }
    assert!(
        text.contains("for 4 shapes:\n#   warm/cold min 0.900"),
        "{text}"
    );
    assert_eq!(toml["gpu"]["name"].as_str(), Some("Test GPU"));
    // The copy (0.5 ms alone) ended 0.5 ms after the 1 ms GEMM beside it: it waited for
    // the GEMM's SMs.
    let i = &toml["interference"];
    assert_eq!(
        i["memory_ops_wait_for_gemm_sms"].as_bool(),
        Some(true),
        "{i}"
    );
    assert!(text.contains("it waited for"), "{text}");
    // A copy that ran beside the GEMM (0.6 ms) does not turn SM admission on.
    let mut c: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&cal).unwrap()).unwrap();
    c["copy_with_gemm_s"] = 6e-4.into();
    let cal2 = d.path().join("u.calibration.json");
    std::fs::write(&cal2, c.to_string()).unwrap();
    let prof2 = d.path().join("u.toml");
    bin()
        .args(["calibrate", "--from", cal2.to_str().unwrap(), "--name", "u"])
        .args(["--out", prof2.to_str().unwrap()])
        .assert()
        .success();
    let toml2: toml::Value = toml::from_str(&std::fs::read_to_string(&prof2).unwrap()).unwrap();
    let i = &toml2["interference"];
    assert_eq!(
        i["memory_ops_wait_for_gemm_sms"].as_bool(),
        Some(false),
        "{i}"
    );
    // The simulator reads it like any other profile.
    bin()
        .args([
            "simulate",
            "--hardware",
            prof.to_str().unwrap(),
            "--tp",
            "2",
        ])
        .assert()
        .success();
    // Refitting next to the existing files needs --force.
    bin()
        .args(["calibrate", "--from", cal.to_str().unwrap(), "--name", "t"])
        .args(["--out", prof.to_str().unwrap()])
        .assert()
        .code(3);
}

#[test]
fn gpu_commands_say_what_is_missing() {
    // Without the feature: CUDA was not compiled in. With it, on a machine without a GPU
    // or libraries: the library or GPU that is missing. Either way one clear error, exit
    // 4 (the machine cannot run it; 1 is a run that failed), no panic.
    for args in [
        &["run", "--tp", "2", "--batch", "1", "--seq", "1024"][..],
        &["calibrate", "--out", "/nonexistent-dir/x.toml"][..],
    ] {
        let a = bin().args(args).assert().failure();
        let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
        let ok = err.contains("without the `cuda` feature")
            || err.contains("was not found")
            || err.contains("no CUDA GPU");
        if ok {
            assert_eq!(a.get_output().status.code(), Some(4), "{args:?}: {err}");
        } else {
            // A GPU is present (a device machine): the command may fail for other
            // reasons (the out path), but it must not have panicked.
            assert!(!err.contains("panicked"), "{err}");
        }
    }
}

#[test]
fn run_refuses_bad_transport_and_multi_process_flags() {
    let cases: [(&[&str], &str); 3] = [
        (&["--transport", "smoke"], "--transport"),
        (&["--world", "2"], "--rank"),
        (
            &["--stand-in", "teleport", "--emulate-rank", "0"],
            "--stand-in",
        ),
    ];
    for (extra, needle) in cases {
        let a = bin()
            .args(["run", "--tp", "2", "--batch", "1", "--seq", "1024"])
            .args(extra)
            .assert()
            .code(2);
        let err = String::from_utf8(a.get_output().stderr.clone()).unwrap();
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
}

/// `scripts/borrow-warm.py` gives a profile without warm times another's, each saving
/// scaled by kappa, says so in the header, and writes a profile the simulator reads.
#[test]
fn borrow_warm_lends_scaled_warm_times_that_the_simulator_reads() {
    let py = std::process::Command::new("python3")
        .args(["-c", "import tomllib"])
        .output();
    if !py.is_ok_and(|o| o.status.success()) {
        eprintln!("SKIP borrow_warm: no python3 with tomllib (3.11+) on this machine");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let cal = calibration_json(d.path());
    // The donor: the refit of measurements whose 4096-row shapes were timed warm at 0.9.
    let donor = d.path().join("donor.toml");
    bin()
        .args([
            "calibrate",
            "--from",
            cal.to_str().unwrap(),
            "--name",
            "donor",
        ])
        .args(["--out", donor.to_str().unwrap()])
        .assert()
        .success();
    // The borrower: the same profile without its warm times.
    let text = std::fs::read_to_string(&donor).unwrap();
    let cold: String = text
        .lines()
        .filter(|l| !l.starts_with("warm_us"))
        .map(|l| format!("{l}\n"))
        .collect();
    let borrower = d.path().join("cold.toml");
    std::fs::write(&borrower, cold).unwrap();
    let out = d.path().join("borrowed.toml");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/borrow-warm.py");
    let run = std::process::Command::new("python3")
        .arg(&script)
        .args([&borrower, &donor, &out])
        .arg("0.5")
        .output()
        .unwrap();
    assert!(run.status.success(), "{run:?}");
    let said = String::from_utf8(run.stdout).unwrap();
    assert!(
        said.contains("warm_us on 4 of 12 shapes, kappa 0.500"),
        "{said}"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.starts_with("# Warm GEMM times (warm_us) BORROWED"),
        "{text}"
    );
    let toml: toml::Value = toml::from_str(&text).unwrap();
    let points = toml["gpu"]["gemm"]["measured"].as_array().unwrap();
    assert_eq!(points.len(), 12);
    for p in points {
        let us = p["us"].as_float().unwrap();
        match p["m"].as_integer() {
            // A saving of 10% at kappa 0.5: 5%.
            Some(4096) => {
                let w = p["warm_us"].as_float().unwrap();
                assert!((w / us - 0.95).abs() < 1e-12, "{p}");
            }
            _ => assert!(p.get("warm_us").is_none(), "{p}"),
        }
    }
    bin()
        .args(["simulate", "--workload", "mlp", "--tp", "2", "--batch", "1"])
        .args(["--hardware", out.to_str().unwrap()])
        .assert()
        .success();
    // Usage errors exit 2 and say how to call it.
    let bad = std::process::Command::new("python3")
        .arg(&script)
        .arg("only-one")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8(bad.stderr)
            .unwrap()
            .contains("usage: borrow-warm.py")
    );
}
