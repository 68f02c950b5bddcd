//! `search` through the binary: its rows are `simulate`'s figures for the same layout,
//! whatever the thread count or sharding; screening by extrapolation stays close to the
//! whole step; what it leaves out is counted.

use super::cli::bin;

/// A small search: 8 GPUs, an 8B model, tp × pp with pipelines long enough to screen.
const SPACE: &[&str] = &[
    "search",
    "--model",
    "llama-3-8b",
    "--hardware",
    "h100-sxm-8",
    "--seq",
    "1024",
    "--global-batch",
    "16",
    "--tp",
    "2,4",
    "--pp",
    "1,2",
    "--strategy",
    "sequential,flash",
    "--quiet",
];

fn search(extra: &[&str]) -> String {
    let out = bin()
        .args(SPACE)
        .args(extra)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

fn json(extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["--format", "json"];
    args.extend_from_slice(extra);
    serde_json::from_str(&search(&args)).unwrap()
}

fn rows(doc: &serde_json::Value) -> &Vec<serde_json::Value> {
    doc["rows"].as_array().unwrap()
}

/// `simulate`'s result for row `r`'s layout and strategy (on the search's machine), with
/// `extra` flags.
fn simulate_row(r: &serde_json::Value, extra: &[&str]) -> serde_json::Value {
    let n = |k: &str| r[k].to_string().trim_matches('"').to_string();
    let out = bin()
        .args([
            "simulate",
            "--model",
            "llama-3-8b",
            "--hardware",
            "h100-sxm-8",
        ])
        .args([
            "--seq",
            "1024",
            "--workload",
            "step",
            "--rank-order",
            "tp-pp-dp",
        ])
        .args(["--tp", &n("tp"), "--pp", &n("pp"), "--dp", &n("dp")])
        .args([
            "--pp-schedule",
            &n("schedule"),
            "--recompute",
            &n("recompute"),
        ])
        .args(["--zero", &n("zero"), "--batch", &n("micro_batch")])
        .args(["--micro-batches", &n("micro_batches")])
        .args(["--strategy", &format!("sequential,{}", n("strategy"))])
        .args(["--format", "json"])
        .args(extra)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let sim: serde_json::Value = serde_json::from_slice(&out).unwrap();
    sim["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["strategy"] == r["strategy"])
        .unwrap()
        .clone()
}

#[test]
fn the_best_row_is_what_simulate_gives_for_its_layout() {
    let doc = json(&["--threads", "2"]);
    let rows = rows(&doc);
    let c = &doc["counts"];
    assert_eq!(
        rows.len() as u64,
        c["layouts"].as_u64().unwrap() * 2,
        "one row per layout and strategy"
    );
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["rank"], i as u64 + 1);
        assert!(r["memory_gib"].as_f64().unwrap() < 80.0, "{r}");
    }
    // The exact rows are in descending tokens/s.
    let exact: Vec<f64> = rows
        .iter()
        .filter(|r| !r["exact"].is_null())
        .map(|r| r["exact"]["tokens_per_s"].as_f64().unwrap())
        .collect();
    assert!(exact.windows(2).all(|w| w[0] >= w[1]), "{exact:?}");
    // The best row, simulated by `simulate` with the layout's flags: the same f64s.
    let best = &rows[0];
    let want = simulate_row(best, &[]);
    for f in [
        "makespan_us",
        "tokens_per_s",
        "mfu_ratio",
        "exposed_comm_us",
    ] {
        assert_eq!(best["exact"][f].to_string(), want[f].to_string(), "{f}");
    }
}

#[test]
fn thread_count_and_sharding_do_not_change_the_result() {
    let one = search(&["--format", "json", "--threads", "1"]);
    let two = search(&["--format", "json", "--threads", "2"]);
    assert_eq!(one, two, "thread count changed the output");
    let d = tempfile::tempdir().unwrap();
    for i in 0..2 {
        let out = d.path().join(format!("s{i}"));
        search(&["--shard", &format!("{i}/2"), "--out", out.to_str().unwrap()]);
    }
    let merged = d.path().join("merged");
    bin()
        .args(["search", "merge"])
        .arg(d.path().join("s0"))
        .arg(d.path().join("s1").join("search.json"))
        .arg("--out")
        .arg(&merged)
        .assert()
        .success();
    let whole = d.path().join("whole");
    search(&["--out", whole.to_str().unwrap()]);
    for f in ["search.json", "search.csv", "summary.txt"] {
        let a = std::fs::read_to_string(whole.join(f)).unwrap();
        let b = std::fs::read_to_string(merged.join(f)).unwrap();
        assert_eq!(a, b, "{f}: merged shards differ from one search");
    }
    // The JSON written is the JSON printed.
    let printed: serde_json::Value = serde_json::from_str(&one).unwrap();
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(whole.join("search.json")).unwrap()).unwrap();
    assert_eq!(printed, written);
}

#[test]
fn screened_figures_stay_close_to_the_whole_step() {
    let screened = json(&["--verify", "0", "--no-prune"]);
    let exact = json(&["--exact", "--no-prune"]);
    let key = |r: &serde_json::Value| {
        (
            r["tp"].as_u64().unwrap(),
            r["pp"].as_u64().unwrap(),
            r["micro_batch"].as_u64().unwrap(),
            r["schedule"].as_str().unwrap().to_string(),
            r["recompute"].as_str().unwrap().to_string(),
            r["strategy"].as_str().unwrap().to_string(),
        )
    };
    let mut checked = 0;
    for r in rows(&screened).iter().filter(|r| r["extrapolated"] == true) {
        assert!(r["exact"].is_null(), "--verify 0 simulates nothing whole");
        let e = rows(&exact)
            .iter()
            .find(|x| key(x) == key(r))
            .expect("the same layout in the exact search");
        assert_eq!(e["extrapolated"], false);
        for f in ["makespan_us", "tokens_per_s"] {
            let (a, b) = (
                r["screened"][f].as_f64().unwrap(),
                e["exact"][f].as_f64().unwrap(),
            );
            assert!(
                (a - b).abs() <= 0.01 * b,
                "{:?} {f}: screened {a} vs whole {b}",
                key(r)
            );
        }
        checked += 1;
    }
    assert!(checked >= 4, "only {checked} rows were screened");
}

/// Pruning leaves the table as it was: the layouts it leaves out (by their compute floor,
/// or simulated past the bar) are all slower than the rows shown, and shards prune alike.
#[test]
fn pruning_leaves_the_table_as_it_was() {
    let pruned = json(&["--top", "2"]);
    let all = json(&["--top", "2", "--no-prune"]);
    let n = pruned["counts"]["pruned"].as_u64().unwrap();
    assert!(n > 0, "nothing was pruned");
    assert_eq!(all["counts"]["pruned"], 0);
    assert_eq!(
        pruned["counts"]["layouts"].as_u64().unwrap() + n,
        all["counts"]["layouts"].as_u64().unwrap()
    );
    // Two strategies a layout.
    assert_eq!(
        rows(&pruned).len() as u64 + 2 * n,
        rows(&all).len() as u64,
        "a pruned layout left rows"
    );
    for (a, b) in rows(&pruned).iter().zip(rows(&all)).take(2) {
        assert_eq!(a, b, "pruning changed the table");
    }
    // Every pruned layout's best row is slower than the table's last.
    let shown = rows(&all)[1]["exact"]["makespan_us"].as_f64().unwrap();
    let kept: std::collections::BTreeSet<u64> = rows(&pruned)
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    for r in rows(&all) {
        if !kept.contains(&r["index"].as_u64().unwrap()) {
            let f = if r["exact"].is_null() {
                &r["screened"]
            } else {
                &r["exact"]
            };
            assert!(f["makespan_us"].as_f64().unwrap() > shown, "{r}");
        }
    }
    let out = search(&["--top", "2"]);
    assert!(
        out.contains(&format!("{n} pruned as slower than the best steps")),
        "{out}"
    );
    // Shards prune as one run does.
    let d = tempfile::tempdir().unwrap();
    for i in 0..3 {
        let out = d.path().join(format!("s{i}"));
        search(&[
            "--top",
            "2",
            "--shard",
            &format!("{i}/3"),
            "--out",
            out.to_str().unwrap(),
        ]);
    }
    let merged = d.path().join("merged");
    bin()
        .args(["search", "merge", "--top", "2"])
        .args((0..3).map(|i| d.path().join(format!("s{i}"))))
        .arg("--out")
        .arg(&merged)
        .assert()
        .success();
    let whole: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(merged.join("search.json")).unwrap())
            .unwrap();
    assert_eq!(whole, pruned, "merged shards differ from one pruned search");
}

#[test]
fn a_dry_run_lists_the_layouts_and_simulates_nothing() {
    let out = search(&["--dry-run"]);
    assert!(
        out.starts_with("search (dry run): llama-3-8b on h100-sxm-8 at sustained clocks (8 GPUs)"),
        "{out}"
    );
    let doc = json(&["--dry-run"]);
    assert!(rows(&doc).is_empty());
    let layouts = doc["counts"]["layouts"].as_u64().unwrap();
    assert!(layouts > 0);
    let listed = out.lines().filter(|l| l.contains("GiB)")).count() as u64;
    assert_eq!(listed, layouts, "{out}");
}

#[test]
fn layouts_over_the_event_budget_are_counted_not_ranked() {
    let all = json(&[]);
    let tight = json(&["--max-events", "110000"]);
    let over: Vec<&str> = tight["counts"]["over_budget"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(!over.is_empty(), "the budget left nothing out");
    assert!(
        rows(&tight).len() < rows(&all).len(),
        "layouts over the budget were ranked"
    );
    let out = search(&["--max-events", "110000"]);
    assert!(out.contains("over the simulation budget"), "{out}");
    let none = search(&["--max-events", "10"]);
    assert!(
        none.contains("every layout is over the simulation budget: raise --max-events"),
        "{none}"
    );
}

#[test]
fn csv_columns() {
    let out = search(&["--format", "csv"]);
    let header = out.lines().next().unwrap();
    insta::assert_snapshot!(header);
    let cols = header.split(',').count();
    for l in out.lines().skip(1) {
        assert_eq!(l.split(',').count(), cols, "{l}");
    }
}

#[test]
fn data_parallel_strategies_are_an_axis() {
    // `--tp 2` again is the same axis (values given twice count once).
    // Every layout simulated, so that the counts compare.
    let doc = json(&["--dp-strategy", "bulk,flash", "--tp", "2", "--no-prune"]);
    let plain = json(&["--no-prune"]);
    let rows = rows(&doc);
    let synced = |r: &&serde_json::Value| r["dp"].as_u64().unwrap() > 1;
    let sites: std::collections::BTreeSet<&str> = rows
        .iter()
        .filter(synced)
        .map(|r| r["dp_strategy"].as_str().unwrap())
        .collect();
    assert_eq!(sites, ["bulk", "flash"].into_iter().collect());
    // Layouts without data parallelism have no dp site; the others count twice.
    assert!(
        rows.iter()
            .filter(|r| !synced(r))
            .all(|r| r["dp_strategy"].is_null())
    );
    let count = |d: &serde_json::Value, s: bool| {
        d["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| synced(r) == s)
            .count()
    };
    assert_eq!(count(&doc, true), 2 * count(&plain, true));
    assert_eq!(count(&doc, false), count(&plain, false));
    // A row is `simulate` with `--site dp=...` for its layout.
    let r = rows
        .iter()
        .find(|r| r["dp_strategy"] == "flash" && !r["exact"].is_null())
        .expect("an exact row with dp=flash");
    let want = simulate_row(r, &["--site", "dp=flash"]);
    assert_eq!(
        r["exact"]["makespan_us"].to_string(),
        want["makespan_us"].to_string()
    );
}

/// A MoE model's search ranges over expert parallelism (`--ep`), and its best row is
/// what `simulate` gives for that layout with `--ep`.
#[test]
fn a_moe_search_ranges_over_ep_and_matches_simulate() {
    let out = bin()
        .args([
            "search",
            "--model",
            "mixtral-8x7b",
            "--hardware",
            "dgx-h100",
        ])
        .args(["--nodes", "2", "--seq", "1024", "--global-batch", "8"])
        .args(["--tp", "1,2", "--pp", "2"])
        .args(["--ep", "2,8", "--micro-batch", "1", "--strategy", "flash"])
        .args(["--quiet", "--format", "json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let rows = rows(&doc);
    let eps: std::collections::BTreeSet<u64> =
        rows.iter().map(|r| r["ep"].as_u64().unwrap()).collect();
    assert_eq!(eps.into_iter().collect::<Vec<_>>(), [2, 8]);
    let best = &rows[0];
    let n = |k: &str| best[k].to_string().trim_matches('"').to_string();
    let sim = bin()
        .args([
            "simulate",
            "--model",
            "mixtral-8x7b",
            "--hardware",
            "dgx-h100",
        ])
        .args(["--nodes", "2", "--seq", "1024", "--workload", "step"])
        .args(["--rank-order", "tp-pp-dp", "--pp-schedule", &n("schedule")])
        .args([
            "--tp",
            &n("tp"),
            "--pp",
            &n("pp"),
            "--dp",
            &n("dp"),
            "--ep",
            &n("ep"),
        ])
        .args(["--recompute", &n("recompute"), "--zero", &n("zero")])
        .args([
            "--batch",
            &n("micro_batch"),
            "--micro-batches",
            &n("micro_batches"),
        ])
        .args(["--strategy", "sequential,flash", "--format", "json"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let sim: serde_json::Value = serde_json::from_slice(&sim).unwrap();
    let want = &sim["results"][1];
    assert_eq!(want["strategy"], "flash");
    let got = if best["exact"].is_null() {
        &best["screened"]
    } else {
        &best["exact"]
    };
    assert_eq!(
        got["makespan_us"].to_string(),
        want["makespan_us"].to_string()
    );
}
