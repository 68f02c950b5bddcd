//! Absurd but well-formed inputs: each gives a result with finite numbers or one clear
//! error, quickly; never a panic, an overflow, a NaN or an endless run.

use std::path::Path;

fn profile(dir: &Path, name: &str, from: &str, replace: (&str, &str)) -> String {
    let text = std::fs::read_to_string(format!("hardware-profiles/{from}.toml")).unwrap();
    assert!(text.contains(replace.0), "{from} lacks {}", replace.0);
    let p = dir.join(name);
    std::fs::write(&p, text.replace(replace.0, replace.1)).unwrap();
    p.display().to_string()
}

/// Every number in a JSON document is finite (serde_json writes NaN and ±inf as null, so
/// a null where the schema has a time is the tell).
fn all_times_finite(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(m) => {
            m.iter().all(|(k, x)| {
                if k.ends_with("_us") || k.contains("gbps") || k == "makespan" {
                    x.is_number() || x.is_object() || x.is_array()
                } else {
                    all_times_finite(x)
                }
            }) && m.values().all(all_times_finite)
        }
        serde_json::Value::Array(a) => a.iter().all(all_times_finite),
        serde_json::Value::Number(n) => n.as_f64().is_some_and(f64::is_finite),
        _ => true,
    }
}

enum Want {
    Ok,
    Error(i32, &'static str),
}

#[test]
fn absurd_inputs_give_results_or_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    let ring = profile(
        d.path(),
        "ring.toml",
        "nvlink-ring-1024",
        ("gpus = 1024", "gpus = 100000"),
    );
    let slow = profile(
        d.path(),
        "slow.toml",
        "h100-sxm-8",
        ("link_gbps = 370.0", "link_gbps = 1e-9"),
    );
    let dead = profile(
        d.path(),
        "dead.toml",
        "h100-sxm-8",
        ("link_gbps = 370.0", "link_gbps = 1e-300"),
    );
    let fast = profile(
        d.path(),
        "fast.toml",
        "h100-sxm-8",
        ("link_gbps = 370.0", "link_gbps = 1.7e308"),
    );
    let huge = profile(
        d.path(),
        "huge.toml",
        "h100-sxm-8",
        ("gpus = 8", "gpus = 1000000000000"),
    );
    let deep = d.path().join("deep.toml");
    std::fs::write(
        &deep,
        "name = \"deep\"\nhidden = 4096\nffn = 14336\nheads = 32\nkv_heads = 8\nlayers = 1000000\nvocab = 128256\nactivation = \"swiglu\"\n",
    )
    .unwrap();
    let deep = deep.display().to_string();
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let cases: Vec<(&str, Vec<String>, Want)> = vec![
        (
            "one rank",
            s(&["simulate", "--tp", "1", "--format", "json"]),
            Want::Ok,
        ),
        (
            "one byte",
            s(&["collective", "--sizes", "1", "--format", "json"]),
            Want::Ok,
        ),
        (
            "zero bytes",
            s(&["collective", "--sizes", "0", "--format", "json"]),
            Want::Ok,
        ),
        (
            "10^15 bytes",
            s(&[
                "collective",
                "--sizes",
                "1000000000000000",
                "--format",
                "json",
            ]),
            Want::Ok,
        ),
        (
            "zero-size tensor",
            s(&["simulate", "--seq", "0"]),
            Want::Error(2, "seq"),
        ),
        (
            "100,000 ranks, sendrecv",
            s(&[
                "collective",
                "--hardware",
                &ring,
                "--ranks",
                "100000",
                "--op",
                "sendrecv",
                "--sizes",
                "1MiB",
                "--format",
                "json",
            ]),
            Want::Ok,
        ),
        (
            "100,000 ranks, ring all-gather (10^10 ops) refused before building",
            s(&[
                "collective",
                "--hardware",
                &ring,
                "--ranks",
                "100000",
                "--op",
                "all-gather",
                "--sizes",
                "1MiB",
            ]),
            Want::Error(2, "--max-memory"),
        ),
        (
            "10^12 GPUs refused before allocating",
            s(&["collective", "--hardware", &huge]),
            Want::Error(2, "at most"),
        ),
        (
            "bandwidth 1 B/s: decades, finite",
            s(&["simulate", "--hardware", &slow, "--format", "json"]),
            Want::Ok,
        ),
        (
            "bandwidth near zero",
            s(&["simulate", "--hardware", &dead]),
            Want::Error(1, "simulated time passed"),
        ),
        (
            "bandwidth near infinity",
            s(&[
                "collective",
                "--hardware",
                &fast,
                "--sizes",
                "1GiB",
                "--format",
                "json",
            ]),
            Want::Ok,
        ),
        (
            "a step of 10^6 layers refused before building",
            s(&[
                "simulate",
                "--workload",
                "step",
                "--model",
                &deep,
                "--tp",
                "8",
            ]),
            Want::Error(2, "--max-memory"),
        ),
        (
            "tokens too large for memory",
            s(&["simulate", "--batch", "1000000000", "--seq", "1000000000"]),
            Want::Error(2, "2^60"),
        ),
    ];
    for (name, args, want) in cases {
        let out = super::capped::run(name, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "{name}: {err}");
        match want {
            Want::Ok => {
                assert_eq!(out.code, Some(0), "{name}: {err}");
                let v: serde_json::Value = serde_json::from_slice(&out.stdout)
                    .unwrap_or_else(|e| panic!("{name}: not JSON: {e}"));
                assert!(all_times_finite(&v), "{name}: a non-finite number in {v}");
            }
            Want::Error(code, says) => {
                assert_eq!(out.code, Some(code), "{name}: {err}");
                assert!(err.contains(says), "{name}: `{says}` not in {err}");
            }
        }
    }
}
