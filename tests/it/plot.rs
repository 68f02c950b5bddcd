//! Pictures through the binary: well-formed SVG (parsed) with the expected lane, axis and
//! legend labels, decodable PNG of the stated size, and clear errors.

use super::cli::bin;
use std::path::Path;

/// Every text node of an SVG document (parsing it proves it is well-formed XML).
fn svg_texts(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("bad SVG: {e}"));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or("").to_string())
        .collect()
}

fn has(texts: &[String], want: &str) {
    assert!(
        texts.iter().any(|t| t.contains(want)),
        "`{want}` not among the SVG's texts: {texts:?}"
    );
}

/// (width, height, RGB pixels) of a PNG.
fn png_pixels(path: &Path) -> (u32, u32, Vec<u8>) {
    let dec = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut r = dec.read_info().unwrap();
    let mut buf = vec![0; r.output_buffer_size()];
    let info = r.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

#[test]
fn simulate_plot_draws_every_lane_legend_and_axis_in_svg() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("t.svg");
    bin()
        .args(["simulate", "--batch", "2", "--seq", "2k", "--plot"])
        .arg(&p)
        .assert()
        .success();
    let t = svg_texts(&p);
    // The default scenario's 4 ranks run the same program at the same times: rank 0 is
    // drawn, the others are a note.
    has(&t, "rank 0 compute");
    has(&t, "rank 0 comm");
    has(&t, "rank 0 exposed comm");
    has(&t, "+ 3 ranks (1–3) like rank 0");
    assert!(!t.iter().any(|x| x.contains("rank 1 compute")), "{t:?}");
    for legend in [
        "GEMM",
        "activation",
        "send",
        "recv",
        "wait",
        "add",
        "exposed communication",
    ] {
        has(&t, legend);
    }
    has(&t, "time (µs)");
    for s in [
        "sequential predicted",
        "chunked:4 predicted",
        "flash predicted",
    ] {
        has(&t, s);
    }
}

#[test]
fn simulate_plot_png_decodes_and_shows_the_gemm_colour() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("t.png");
    bin()
        .args([
            "simulate",
            "--batch",
            "2",
            "--seq",
            "2k",
            "--strategy",
            "flash",
            "--plot",
        ])
        .arg(&p)
        .assert()
        .success();
    let (w, h, px) = png_pixels(&p);
    assert_eq!(w, 1500);
    assert!(h > 200 && h < 2000, "{h}");
    let gemm = [31u8, 119, 180];
    let count = px.chunks(3).filter(|c| *c == gemm).count();
    assert!(count > 10_000, "GEMM bars cover {count} px");
    let white = px.chunks(3).filter(|c| *c == [255, 255, 255]).count();
    assert!(white < px.len() / 3, "nearly all white");
}

#[test]
fn predicted_over_measured_from_a_run_directory() {
    let dir = "results/h200-2026-12-03/emu-copy-ag-gemm-tp2-b16";
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("o.svg");
    bin()
        .args(["plot", "timeline", dir, "-o"])
        .arg(&p)
        .assert()
        .success();
    let t = svg_texts(&p);
    has(&t, "predicted (outline)");
    has(&t, "flash measured");
    has(&t, "predicted ");
    has(&t, "rank 0 compute");
}

#[test]
fn sweep_charts_and_heatmap() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("sw");
    bin()
        .args([
            "sweep", "--quiet", "--tp", "2,4", "--seq", "1k,2k,4k", "--batch", "4",
        ])
        .args(["--strategy", "sequential,chunked:2..8*2,flash", "--out"])
        .arg(&out)
        .assert()
        .success();
    let chunks = d.path().join("chunks.svg");
    bin()
        .args(["plot", "sweep"])
        .arg(&out)
        .args([
            "--x", "chunks", "--where", "tp=4", "--where", "seq=2k", "-o",
        ])
        .arg(&chunks)
        .assert()
        .success();
    let t = svg_texts(&chunks);
    for want in [
        "chunk count",
        "makespan (µs)",
        "chunked",
        "flash (no chunk count)",
        "tp=4",
    ] {
        has(&t, want);
    }
    let seq = d.path().join("seq.png");
    bin()
        .args(["plot", "sweep"])
        .arg(out.join("sweep.json"))
        .args(["--x", "seq", "--y", "exposed_comm_us", "-o"])
        .arg(&seq)
        .assert()
        .success();
    assert_eq!(png_pixels(&seq).0, 1200);
    let heat = d.path().join("heat.svg");
    bin()
        .args(["plot", "heatmap"])
        .arg(&out)
        .args(["--x", "seq", "--y", "tp", "--by", "family", "-o"])
        .arg(&heat)
        .assert()
        .success();
    let t = svg_texts(&heat);
    has(&t, "best family by makespan (µs)");
    // Each cell names the margin over the runner-up.
    has(&t, "% vs ");
    has(&t, "µs");
    has(&t, "2k");
}

#[test]
fn bad_plot_inputs_are_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    let not_tl = d.path().join("x.json");
    std::fs::write(&not_tl, "{\"format\": \"something-else\"}").unwrap();
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            vec![
                "simulate".into(),
                "--plot".into(),
                d.path().join("t.jpg").display().to_string(),
            ],
            2,
            "use .svg or .png",
        ),
        (
            vec![
                "plot".into(),
                "timeline".into(),
                not_tl.display().to_string(),
                "-o".into(),
                "a.svg".into(),
            ],
            2,
            "not a flashoverlap timeline",
        ),
        (
            vec![
                "plot".into(),
                "timeline".into(),
                "results/h200-2026-12-03/emu-copy-ag-gemm-tp2-b16".into(),
                "--ranks".into(),
                "5".into(),
                "-o".into(),
                "a.svg".into(),
            ],
            2,
            "no timeline has any of ranks",
        ),
        (
            vec![
                "plot".into(),
                "sweep".into(),
                not_tl.display().to_string(),
                "--x".into(),
                "seq".into(),
                "-o".into(),
                "a.svg".into(),
            ],
            2,
            "not a flashoverlap sweep",
        ),
        (
            vec![
                "simulate".into(),
                "--plot".into(),
                "/nonexistent-dir/t.svg".into(),
            ],
            3,
            "/nonexistent-dir/t.svg",
        ),
    ];
    for (args, code, says) in cases {
        let out = bin().args(&args).assert().code(code).get_output().clone();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: `{says}` not in {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn unknown_chart_fields_are_named() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("sw");
    bin()
        .args([
            "sweep", "--quiet", "--tp", "2,4", "--batch", "2", "--seq", "1k", "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    for (args, says) in [
        (vec!["--x", "colour"], "`colour` is neither a metric"),
        (
            vec!["--x", "seq", "--y", "speed"],
            "`speed` is not a metric",
        ),
        (
            vec!["--x", "seq", "--where", "tp=16"],
            "no rows with results match",
        ),
    ] {
        let o = bin()
            .args(["plot", "sweep"])
            .arg(&out)
            .args(&args)
            .args(["-o", d.path().join("c.svg").to_str().unwrap()])
            .assert()
            .code(2)
            .get_output()
            .clone();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// `plot timeline`: every rank with `--all-ranks`; a step's layer bands per rank drawn
/// and `--window layer=…` zooms on those layers; the time axis follows the window.
#[test]
fn timeline_folds_ranks_bands_layers_and_zooms() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("st");
    bin()
        .arg("simulate")
        .args(super::cli::PP2_STEP)
        .args(["--strategy", "flash,sequential", "--out"])
        .arg(&out)
        .assert()
        .success();
    let all = d.path().join("all.svg");
    bin()
        .args(["plot", "timeline"])
        .arg(&out)
        .arg("--all-ranks")
        .arg("-o")
        .arg(&all)
        .assert()
        .success();
    let t = svg_texts(&all);
    for r in 0..4 {
        has(&t, &format!("rank {r} compute"));
        has(&t, &format!("rank {r} layers"));
    }
    has(&t, "scenario default: 4 ranks · flash vs sequential");
    has(&t, "forward");
    has(&t, "backward");
    // Panels in the order the strategies were given, not by file name.
    let flash = t
        .iter()
        .position(|x| x.contains("flash predicted"))
        .unwrap();
    let seq = t
        .iter()
        .position(|x| x.contains("sequential predicted"))
        .unwrap();
    assert!(flash < seq);
    // Folded: stages differ, tensor-parallel peers repeat them.
    let folded = d.path().join("fold.svg");
    bin()
        .args(["plot", "timeline"])
        .arg(&out)
        .arg("-o")
        .arg(&folded)
        .assert()
        .success();
    let t = svg_texts(&folded);
    has(&t, "+ 1 rank (1) like rank 0");
    has(&t, "+ 1 rank (3) like rank 2");
    // Micro-batch runs are labelled where a layer's label does not fit.
    has(&t, "F0");
    has(&t, "B1");
    // Zoomed on two layers of one micro-batch: layer labels fit, the axis is in µs.
    let zoom = d.path().join("zoom.svg");
    bin()
        .args(["plot", "timeline"])
        .arg(&out)
        .args(["--window", "layer=3-4,mb=0,pass=fwd", "--ranks", "0", "-o"])
        .arg(&zoom)
        .assert()
        .success();
    let t = svg_texts(&zoom);
    has(&t, "L3");
    has(&t, "L4");
    let bytes = std::fs::metadata(&zoom).unwrap().len();
    let whole = std::fs::metadata(&folded).unwrap().len();
    assert!(bytes < whole, "{bytes} vs {whole}");
    let bad = bin()
        .args(["plot", "timeline"])
        .arg(&out)
        .args(["--window", "layer=99", "-o"])
        .arg(d.path().join("x.svg"))
        .assert()
        .code(2)
        .get_output()
        .clone();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no op of the timelines"));
}

/// A layer marks where its backward starts and names its sites.
#[test]
fn layer_plot_marks_the_backward_and_sites() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("l.svg");
    bin()
        .args([
            "simulate",
            "--workload",
            "layer",
            "--model",
            "llama-3-8b",
            "--tp",
            "4",
        ])
        .args([
            "--seq",
            "2k",
            "--batch",
            "2",
            "--strategy",
            "flash",
            "--plot",
        ])
        .arg(&p)
        .assert()
        .success();
    let t = svg_texts(&p);
    has(&t, "rank 0 sites");
    has(&t, "bwd →");
    has(&t, "fwd.fc1");
}

/// A data-parallel ring over NCCL channels (16 channels × 8 slots × send and receive
/// streams a rank) is one lane a rank, and the expert-parallel streams of a MoE layer
/// each get theirs.
#[test]
fn nccl_channels_share_a_lane_and_moe_streams_show() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("m.svg");
    bin()
        .args(["simulate", "--workload", "layer", "--model", "mixtral-8x7b"])
        .args([
            "--tp", "1", "--dp", "4", "--ep", "4", "--seq", "1k", "--batch", "1",
        ])
        .args(["--hardware", "dgx-h100", "--strategy", "flash", "--plot"])
        .arg(&p)
        .assert()
        .success();
    let t = svg_texts(&p);
    for lane in [
        "rank 0 dp (NCCL channels)",
        "rank 0 ep-dispatch",
        "rank 0 ep-combine",
    ] {
        has(&t, lane);
    }
    assert!(
        !t.iter().any(|x| x.contains("-ch0-send")),
        "a slot stream drawn alone"
    );
    let lanes = t.iter().filter(|x| x.starts_with("rank 0 ")).count();
    assert!(lanes < 12, "{lanes} lanes for rank 0: {t:?}");
}

/// A control character in a name the picture shows (a timeline file's scenario and
/// strategy) leaves the SVG well-formed: XML 1.0 forbids it, so it is drawn as U+FFFD.
#[test]
fn control_characters_in_labels_keep_the_svg_well_formed() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("sim");
    bin()
        .args(["simulate", "--strategy", "flash", "--out"])
        .arg(&out)
        .assert()
        .success();
    let text = std::fs::read_to_string(out.join("timeline-flash.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["scenario"] = "bad\u{1}name<&>".into();
    v["strategy"] = "fl\u{7}ash".into();
    let tl = d.path().join("ctl.json");
    std::fs::write(&tl, v.to_string()).unwrap();
    let svg = d.path().join("ctl.svg");
    bin()
        .args(["plot", "timeline"])
        .arg(&tl)
        .arg("--out")
        .arg(&svg)
        .assert()
        .success();
    let texts = svg_texts(&svg);
    has(&texts, "bad\u{FFFD}name<&>");
    has(&texts, "fl\u{FFFD}ash");
}
