//! `sweep` through the binary: rows equal `simulate`'s, whatever the thread count;
//! resumed and sharded runs write the same files as one uninterrupted run.

use super::cli::bin;
use std::path::Path;

const GRID: &[&str] = &[
    "--tp",
    "2,4",
    "--seq",
    "1k,2k",
    "--batch",
    "4",
    "--strategy",
    "sequential,chunked:2..4*2,flash",
    "--quiet",
];

fn sweep(extra: &[&str]) -> String {
    let out = bin()
        .arg("sweep")
        .args(GRID)
        .args(extra)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn rows_equal_simulate_bit_for_bit_whatever_the_thread_count() {
    let one = sweep(&["--format", "json", "--threads", "1"]);
    let two = sweep(&["--format", "json", "--threads", "2"]);
    assert_eq!(one, two, "thread count changed the output");
    let doc: serde_json::Value = serde_json::from_str(&one).unwrap();
    let rows = doc["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2 * 2 * 4);
    for tp in ["2", "4"] {
        for seq in ["1024", "2048"] {
            let out = bin()
                .args(["simulate", "--tp", tp, "--seq", seq, "--batch", "4"])
                .args(["--strategy", "sequential,chunked:2,chunked:4,flash"])
                .args(["--format", "json"])
                .assert()
                .success()
                .get_output()
                .stdout
                .clone();
            let sim: serde_json::Value = serde_json::from_slice(&out).unwrap();
            for want in sim["results"].as_array().unwrap() {
                let got = rows
                    .iter()
                    .find(|r| {
                        r["inputs"]["tp"] == tp.parse::<u64>().unwrap()
                            && r["inputs"]["seq"] == seq.parse::<u64>().unwrap()
                            && r["strategy"] == want["strategy"]
                    })
                    .expect("row present");
                let m = &got["metrics"];
                // Every figure under the same name in both, with the same JSON number
                // text: the same f64, bit for bit.
                for s in flashoverlap::report::FIGURES {
                    assert_eq!(m[s].to_string(), want[s].to_string(), "{tp} {seq} {s}");
                }
            }
        }
    }
}

/// The sweep into `out`, stopped (exit 1) after `points` points on one thread.
fn halted(out: &std::path::Path, points: u32) {
    bin()
        .arg("sweep")
        .args(GRID)
        .arg("--out")
        .arg(out)
        .args(["--halt-after", &points.to_string(), "--threads", "1"])
        .assert()
        .code(1);
}

#[test]
fn an_interrupted_sweep_resumes_to_the_same_files() {
    let d = tempfile::tempdir().unwrap();
    let full = d.path().join("full");
    let part = d.path().join("part");
    sweep(&["--out", full.to_str().unwrap()]);
    halted(&part, 1);
    let journal = part.join("sweep.partial.jsonl");
    assert!(journal.exists() && !part.join("sweep.csv").exists());
    // A line cut short by the interruption is dropped and its point run again.
    let mut j = read(&journal);
    j.push_str("[{\"point\": 9");
    std::fs::write(&journal, j).unwrap();
    // Without --resume the partial run is not silently discarded.
    let err = bin()
        .arg("sweep")
        .args(GRID)
        .args(["--out", part.to_str().unwrap()])
        .assert()
        .code(3)
        .get_output()
        .stderr
        .clone();
    assert!(String::from_utf8_lossy(&err).contains("--resume"));
    sweep(&["--out", part.to_str().unwrap(), "--resume"]);
    assert!(!journal.exists());
    for f in ["sweep.csv", "sweep.json", "summary.txt"] {
        assert_eq!(read(&full.join(f)), read(&part.join(f)), "{f}");
    }
    // Resuming a finished sweep changes nothing.
    sweep(&["--out", part.to_str().unwrap(), "--resume"]);
    assert_eq!(read(&full.join("sweep.csv")), read(&part.join("sweep.csv")));
}

#[test]
fn merged_shards_equal_one_run() {
    let d = tempfile::tempdir().unwrap();
    let full = d.path().join("full");
    sweep(&["--out", full.to_str().unwrap()]);
    let mut shards = Vec::new();
    for i in 0..3 {
        let s = d.path().join(format!("s{i}"));
        sweep(&["--shard", &format!("{i}/3"), "--out", s.to_str().unwrap()]);
        shards.push(s.to_str().unwrap().to_string());
    }
    let merged = d.path().join("merged");
    bin()
        .args(["sweep", "merge"])
        .args(&shards)
        .args(["--out", merged.to_str().unwrap()])
        .assert()
        .success();
    for f in ["sweep.csv", "sweep.json", "summary.txt"] {
        assert_eq!(read(&full.join(f)), read(&merged.join(f)), "{f}");
    }
    // A missing shard is an error, not a silently short file.
    let err = bin()
        .args(["sweep", "merge", &shards[0], &shards[1]])
        .args(["--out", d.path().join("m2").to_str().unwrap()])
        .assert()
        .code(2)
        .get_output()
        .stderr
        .clone();
    assert!(String::from_utf8_lossy(&err).contains("missing rows"));
}

#[test]
fn csv_and_summary_snapshots() {
    let csv = sweep(&["--format", "csv"]);
    let header = csv.lines().next().unwrap();
    for col in [
        "point",
        "tp",
        "seq",
        "strategy",
        "makespan_us",
        "exposed_comm_us",
        "mfu_ratio",
    ] {
        assert!(header.split(',').any(|c| c == col), "{col} not in {header}");
    }
    assert_eq!(csv.lines().count(), 1 + 16);
    insta::assert_snapshot!("sweep_csv", csv);
    insta::assert_snapshot!("sweep_summary", sweep(&[]));
}

#[test]
fn a_sweep_file_gives_the_grid_and_flags_add_to_it() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("grid.toml");
    std::fs::write(
        &f,
        "scenario = \"default\"\n[grid]\ntp = [2, 4]\nseq = [\"1k\", \"2k\"]\nbatch = 4\nstrategy = [\"sequential\", \"chunked:2..4*2\", \"flash\"]\n",
    )
    .unwrap();
    let from_file = bin()
        .args([
            "sweep",
            "--quiet",
            "--format",
            "csv",
            "--grid",
            f.to_str().unwrap(),
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    // The flag order differs from the file's (batch before tp), so compare by content.
    let mut a: Vec<String> = String::from_utf8(from_file)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| l.split_once(',').unwrap().1.to_string())
        .collect();
    let mut b: Vec<String> = sweep(&["--format", "csv"])
        .lines()
        .skip(1)
        .map(|l| l.split_once(',').unwrap().1.to_string())
        .collect();
    a.sort();
    b.sort();
    assert_eq!(a, b);
}

/// Points of different global batches (dp 1 and 2) are ranked by tokens/s, not by
/// makespan (dp 2 takes longer but processes twice the sequences), and the summary
/// says so; a layout that does not fit is a row saying so, not a failed sweep.
#[test]
fn the_summary_never_ranks_different_global_batches_by_makespan() {
    let out = bin()
        .args([
            "sweep",
            "--quiet",
            "--workload",
            "step",
            "--model",
            "llama-3-8b",
            "--tp",
            "8",
            "--dp",
            "1,2",
            "--seq",
            "2k",
            "--batch",
            "1",
            "--hardware",
            "dgx-h100",
            "--nodes",
            "2",
            "--strategy",
            "flash",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let s = String::from_utf8(out).unwrap();
    assert!(
        s.contains("mixes global batches (1, 2 sequences per step)"),
        "{s}"
    );
    let best = s.lines().find(|l| l.ends_with(" best")).unwrap();
    assert!(best.contains("dp=2"), "{s}");
    let out = bin()
        .args([
            "sweep",
            "--quiet",
            "--workload",
            "step",
            "--model",
            "llama-3-70b",
            "--tp",
            "1,8",
            "--seq",
            "2k",
            "--batch",
            "1",
            "--strategy",
            "sequential",
            "--format",
            "csv",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let csv = String::from_utf8(out).unwrap();
    assert_eq!(csv.matches("does not fit").count(), 2, "{csv}");
}

#[test]
fn the_summary_ranks_by_the_figure_asked_and_says_when_batches_differ() {
    let run = |extra: &[&str]| {
        let out = bin()
            .args(["sweep", "--workload", "layer", "--model", "llama-3-8b"])
            .args(["--hardware", "dgx-h100-rail", "--nodes", "4", "--tp", "8"])
            .args(["--dp", "1,4", "--seq", "4k", "--batch", "1"])
            .args(["--strategy", "bulk,flash", "--quiet"])
            .args(extra)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        String::from_utf8(out).unwrap()
    };
    // Default: the groups mix global batches, so tokens/s ranks them (dp 4 does 4x
    // the work in a step not 4x longer).
    let def = run(&[]);
    assert!(def.contains("ranked by tokens/s, not makespan"), "{def}");
    let best = def.lines().nth(2).unwrap();
    assert!(best.contains("dp=4") && best.ends_with("best"), "{def}");
    // A per-step figure as asked: ranked by it, with the warning.
    let exp = run(&["--rank-by", "exposed_comm_us"]);
    let header = exp.lines().nth(1).unwrap();
    assert!(
        header.contains("exposed_comm_us") && !header.contains("makespan_us"),
        "{exp}"
    );
    assert!(
        exp.contains("ranked by exposed_comm_us as asked, a per-step figure"),
        "{exp}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&run(&["--format", "json", "--rank-by", "exposed_comm_us"])).unwrap();
    let least = doc["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["metrics"]["exposed_comm_us"].as_f64().unwrap())
        .fold(f64::INFINITY, f64::min);
    let shown: f64 = exp
        .lines()
        .nth(2)
        .unwrap()
        .split_whitespace()
        .rev()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!((shown - least).abs() < 0.06, "{shown} vs {least}");
    // A rate: ranked by it; higher is better.
    let mfu = run(&["--rank-by", "mfu_ratio"]);
    assert!(
        mfu.contains("ranked by mfu_ratio\n") || mfu.trim_end().ends_with("ranked by mfu_ratio"),
        "{mfu}"
    );
}

/// `--resume` checks every journal row against the grid, the shard and the build:
/// duplicated, out-of-range, foreign, reordered or short lines and another build's
/// journal are refused (exit 2, naming the line), never merged into the outputs.
#[test]
fn resume_refuses_a_journal_that_does_not_match() {
    let d = tempfile::tempdir().unwrap();
    let part = d.path().join("part");
    halted(&part, 2);
    let journal = part.join("sweep.partial.jsonl");
    let good = read(&journal);
    let lines: Vec<&str> = good.lines().collect();
    assert!(lines.len() >= 3, "{good}");
    let (header, row) = (lines[0], lines[1]);
    let row_json: serde_json::Value = serde_json::from_str(row).unwrap();
    let with = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = row_json.clone();
        f(&mut v);
        v.to_string()
    };
    let cases: Vec<(String, &str)> = vec![
        (format!("{header}\n{row}\n{row}\n"), "repeats point"),
        (
            format!(
                "{header}\n{}\n",
                with(&|v| {
                    for r in v.as_array_mut().unwrap() {
                        let p = r["point"].as_u64().unwrap();
                        r["point"] = (p + 1_000_000).into();
                    }
                })
            ),
            "past the grid",
        ),
        (
            format!(
                "{header}\n{}\n",
                with(&|v| v[0]["axes"]["parallel.tp"] = "16".into())
            ),
            "fields other than the grid's",
        ),
        (
            format!(
                "{header}\n{}\n",
                with(&|v| v[0]["strategy"] = "direct".into())
            ),
            "where point",
        ),
        (
            format!(
                "{header}\n{}\n",
                with(&|v| {
                    v.as_array_mut().unwrap().pop();
                })
            ),
            "rows where the grid has",
        ),
        (
            format!(
                "{}\n{row}\n",
                header.replace(env!("CARGO_PKG_VERSION"), "0.0.1")
            ),
            "was written by flashoverlap 0.0.1",
        ),
    ];
    for (body, says) in cases {
        std::fs::write(&journal, &body).unwrap();
        let out = bin()
            .arg("sweep")
            .args(GRID)
            .args(["--out", part.to_str().unwrap(), "--resume"])
            .assert()
            .code(2)
            .get_output()
            .clone();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "`{says}` not in: {err}");
        assert!(!part.join("sweep.csv").exists());
    }
    // The journal as written still resumes.
    std::fs::write(&journal, &good).unwrap();
    sweep(&["--out", part.to_str().unwrap(), "--resume"]);
    assert!(part.join("sweep.csv").exists());
}
