//! Each bad input gives one clear message naming the file, key and value, a non-zero exit
//! code, and no panic.

use std::path::Path;

struct Case {
    name: &'static str,
    args: Vec<String>,
    code: i32,
    /// Every string must appear in stderr.
    says: Vec<String>,
}

const SCENARIO: &str = r#"
model = "default-block"
hardware = "HW"
batch = 32
seq = 4096
strategies = ["flash"]
[parallel]
tp = 4
"#;

const HW: &str = r#"
name = "custom"
[gpu]
name = "g"
sm_count = 132
hbm_gbps = 3350.0
[gpu.peak_tflops]
bf16 = 989.0
[gpu.gemm]
tile_m = 128
tile_n = 256
efficiency = 0.75
memory_efficiency = 0.85
launch_us = 4.0
[gpu.elementwise]
efficiency = 0.85
launch_us = 3.0
[comm]
message_latency_us = 5.0
[topology]
"#;

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

fn sim(extra: &[&str]) -> Vec<String> {
    let mut v = vec!["simulate".to_string()];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn coll(extra: &[&str]) -> Vec<String> {
    let mut v = vec!["collective".to_string()];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn swp(extra: &[&str]) -> Vec<String> {
    let mut v = vec!["sweep".to_string(), "--quiet".to_string()];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn srch(extra: &[&str]) -> Vec<String> {
    let mut v = vec!["search".to_string(), "--quiet".to_string()];
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn cases(d: &Path) -> Vec<Case> {
    let s = |x: &str| x.to_string();
    let hw_zero = write(
        d,
        "zero.toml",
        &format!("{HW}kind = \"nvswitch\"\ngpus = 8\nlink_gbps = 0.0\n"),
    );
    let hw_neg = write(
        d,
        "neg.toml",
        &format!("{HW}kind = \"nvswitch\"\ngpus = 8\nlink_gbps = -5.0\n"),
    );
    let hw_split = write(
        d,
        "split.toml",
        &format!(
            "{HW}kind = \"custom\"\n\
             devices = [{{name = \"g0\", kind = \"gpu\"}}, {{name = \"g1\", kind = \"gpu\"}},\n\
                        {{name = \"g2\", kind = \"gpu\"}}, {{name = \"g3\", kind = \"gpu\"}}]\n\
             links = [{{from = \"g0\", to = \"g1\", gbps = 100.0}}, {{from = \"g2\", to = \"g3\", gbps = 100.0}}]\n"
        ),
    );
    let custom = |name: &str, links: &str| {
        write(
            d,
            name,
            &format!(
                "{HW}kind = \"custom\"\n\
                 devices = [{{name = \"g0\", kind = \"gpu\"}}, {{name = \"g1\", kind = \"gpu\"}}]\n\
                 links = [{links}]\n"
            ),
        )
    };
    let hw_unknown_dev = custom(
        "unknown-dev.toml",
        "{from = \"g0\", to = \"g9\", gbps = 100.0}",
    );
    let hw_self = custom("self.toml", "{from = \"g1\", to = \"g1\", gbps = 100.0}");
    let hw_interf = write(
        d,
        "interf.toml",
        &HW.replace(
            "[topology]",
            "[interference]\ncomm_ctas_per_op = 8\nmax_comm_ctas = 32\n\
             memory_op_slowdown_beside_gemm = 0.5\n[topology]\nkind = \"nvswitch\"\ngpus = 8\n\
             link_gbps = 100.0\n",
        ),
    );
    let hw_reduction = write(
        d,
        "reduction.toml",
        &HW.replace(
            "[topology]",
            "[interference]\ncomm_ctas_per_op = 8\nmax_comm_ctas = 32\n\
             gemm_slowdown_beside_reduction = 0.8\n[topology]\nkind = \"nvswitch\"\ngpus = 8\n\
             link_gbps = 100.0\n",
        ),
    );
    let hw_sustained = write(
        d,
        "sustained.toml",
        &HW.replace(
            "hbm_gbps = 3350.0\n",
            "hbm_gbps = 3350.0\nsustained_gemm_slowdown = 0.9\n",
        )
        .replace(
            "[topology]\n",
            "[topology]\nkind = \"nvswitch\"\ngpus = 8\nlink_gbps = 100.0\n",
        ),
    );
    let hw_xml_missing = write(
        d,
        "xml-missing.toml",
        &format!("{HW}kind = \"nccl-xml\"\nfile = \"no-such-dump.xml\"\n"),
    );
    write(
        d,
        "bad-dump.xml",
        "<system version=\"1\">\n<cpu numaid=\"0\">\n<pci busid=\"0:1\" link_speed=\"warp\" link_width=\"16\"/>\n</cpu></system>\n",
    );
    let hw_xml_bad = write(
        d,
        "xml-bad.toml",
        &format!("{HW}kind = \"nccl-xml\"\nfile = \"bad-dump.xml\"\n"),
    );
    write(
        d,
        "loose-gpu.xml",
        "<system version=\"1\">\n<cpu numaid=\"0\">\n<gpu dev=\"0\" sm=\"90\" rank=\"0\"/>\n</cpu></system>\n",
    );
    let hw_xml_loose = write(
        d,
        "xml-loose.toml",
        &format!("{HW}kind = \"nccl-xml\"\nfile = \"loose-gpu.xml\"\n"),
    );
    write(
        d,
        "no-speed.xml",
        "<system version=\"1\">\n<cpu numaid=\"0\">\n<pci busid=\"0:1\"><gpu dev=\"0\" sm=\"90\"/></pci>\n<pci busid=\"0:2\"><nic><net name=\"mlx5_0\" dev=\"0\" port=\"1\"/></nic></pci>\n</cpu></system>\n",
    );
    let hw_xml_nospeed = write(
        d,
        "xml-nospeed.toml",
        &format!("{HW}kind = \"nccl-xml\"\nfile = \"no-speed.xml\"\n"),
    );
    let hw_channels = write(
        d,
        "channels.toml",
        &HW.replace(
            "[topology]",
            "[comm.nccl]\nchannels = 0\n[topology]\nkind = \"nvswitch\"\ngpus = 8\nlink_gbps = 100.0\n",
        ),
    );
    let gqa = write(
        d,
        "gqa.toml",
        "name = \"gqa\"\nhidden = 3072\nffn = 8192\nheads = 24\nkv_heads = 6\nlayers = 2\nvocab = 32000\nactivation = \"swiglu\"\n",
    );
    let hf_missing = write(
        d,
        "config.json",
        "{\"model_type\": \"llama\", \"hidden_size\": 4096, \"num_attention_heads\": 32, \"num_hidden_layers\": 2, \"vocab_size\": 32000, \"hidden_act\": \"silu\"}",
    );
    let syntax = write(d, "syntax.toml", "model = \"default-block\"\nbatch = = 3\n");
    let typo = write(d, "typo.toml", &SCENARIO.replace("batch", "bacth"));
    let split_sc = write(d, "split-sc.toml", &SCENARIO.replace("HW", &hw_split));
    let plan_bad_key = write(
        d,
        "plan-key.toml",
        "version = 1\n[[op]]\nkind = \"copy\"\nbytes = \"1GiB\"\nm = 8\n",
    );
    let plan_after = write(
        d,
        "plan-after.toml",
        "version = 1\n[[op]]\nkind = \"gemm\"\nm = 64\nn = 64\nk = 64\nafter = [\"g\"]\n",
    );
    let plan_big = write(
        d,
        "plan-big.toml",
        "version = 1\n[[op]]\nrank = 99\nkind = \"copy\"\nbytes = 64\n",
    );
    write(
        d,
        "deep-dump.xml",
        &format!(
            "<system version=\"1\">{}{}</system>\n",
            "<pci busid=\"0:1\">".repeat(100_000),
            "</pci>".repeat(100_000)
        ),
    );
    let hw_xml_deep = write(
        d,
        "xml-deep.toml",
        &format!("{HW}kind = \"nccl-xml\"\nfile = \"deep-dump.xml\"\n"),
    );
    let fifo = d.join("fifo.toml");
    let made_fifo = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    assert!(made_fifo, "mkfifo failed: the FIFO case needs it");
    let fifo = fifo.display().to_string();
    let huge_line = write(
        d,
        "huge-line.toml",
        &format!("model = \"{}\"\n", "x".repeat(17 << 20)),
    );
    let hw_stray_nodes = write(
        d,
        "stray-nodes.toml",
        &format!("{HW}kind = \"nvswitch\"\ngpus = 8\nlink_gbps = 100.0\nnodes = 4\n"),
    );
    let timeline_huge = write(
        d,
        "timeline-huge.json",
        r#"{"format":"flashoverlap-timeline","version":1,"source":"predicted","scenario":"s","strategy":"flash","ranks":4000000000,"peak_flops":1.0,"model_flops":1.0,"streams":[],"links":[],"spans":[]}"#,
    );
    vec![
        Case {
            name: "missing file",
            args: sim(&["--scenario", "does/not/exist.toml"]),
            code: 2,
            says: vec![s("does/not/exist.toml"), s("cannot read")],
        },
        Case {
            name: "TOML syntax error",
            args: sim(&["--scenario", &syntax]),
            code: 2,
            says: vec![syntax.clone(), s("line 2")],
        },
        Case {
            name: "unknown key",
            args: sim(&["--scenario", &typo]),
            code: 2,
            says: vec![typo.clone(), s("bacth")],
        },
        Case {
            name: "unknown hardware preset",
            args: sim(&["--hardware", "h900-sxm-8"]),
            code: 2,
            says: vec![s("h900-sxm-8"), s("hardware"), s("h100-sxm-8")],
        },
        Case {
            name: "unknown model preset",
            args: sim(&["--model", "llama-9"]),
            code: 2,
            says: vec![s("llama-9"), s("--model")],
        },
        Case {
            name: "zero bandwidth",
            args: sim(&["--hardware", &hw_zero]),
            code: 2,
            says: vec![hw_zero.clone(), s("topology.link_gbps"), s("= 0")],
        },
        Case {
            name: "negative bandwidth",
            args: sim(&["--hardware", &hw_neg]),
            code: 2,
            says: vec![hw_neg.clone(), s("topology.link_gbps"), s("-5")],
        },
        Case {
            name: "disconnected topology",
            args: sim(&["--scenario", &split_sc]),
            code: 2,
            says: vec![hw_split.clone(), s("disconnected"), s("g0")],
        },
        Case {
            name: "tp does not divide the heads",
            args: sim(&["--tp", "3"]),
            code: 2,
            says: vec![
                s("--tp"),
                s("parallel.tp"),
                s("= 3"),
                s("32 attention heads"),
            ],
        },
        Case {
            name: "tp does not divide the tokens",
            args: sim(&["--tp", "8", "--batch", "1", "--seq", "4"]),
            code: 2,
            says: vec![s("parallel.tp"), s("= 8"), s("tokens")],
        },
        Case {
            name: "tp larger than the machine",
            args: sim(&["--tp", "16"]),
            code: 2,
            says: vec![s("parallel.tp"), s("16"), s("has 8")],
        },
        Case {
            name: "unknown strategy",
            args: sim(&["--strategy", "sequential,flsh"]),
            code: 2,
            says: vec![s("strategies[1]"), s("flsh"), s("unknown strategy")],
        },
        Case {
            name: "chunk count that does not divide the tokens",
            args: sim(&["--strategy", "chunked:3"]),
            code: 2,
            says: vec![s("chunked:3"), s("not divisible by 3")],
        },
        Case {
            name: "zero batch",
            args: sim(&["--batch", "0"]),
            code: 2,
            says: vec![s("batch"), s("= 0"), s("positive")],
        },
        Case {
            name: "tokens so many the tensors overflow",
            args: sim(&["--seq", "1g", "--batch", "1g"]),
            code: 2,
            says: vec![s("seq"), s("2^60 bytes")],
        },
        Case {
            name: "unknown dtype",
            args: sim(&["--dtype", "int4"]),
            code: 2,
            says: vec![s("dtype"), s("int4")],
        },
        Case {
            name: "a link to a device the topology does not define",
            args: sim(&["--hardware", &hw_unknown_dev]),
            code: 2,
            says: vec![hw_unknown_dev.clone(), s("g9"), s("does not define")],
        },
        Case {
            name: "a link from a device to itself",
            args: sim(&["--hardware", &hw_self]),
            code: 2,
            says: vec![hw_self.clone(), s("g1"), s("to itself")],
        },
        Case {
            name: "an interference slowdown below 1",
            args: sim(&["--hardware", &hw_interf]),
            code: 2,
            says: vec![
                hw_interf.clone(),
                s("interference.memory_op_slowdown_beside_gemm"),
                s("0.5"),
            ],
        },
        Case {
            name: "a GEMM slowdown beside reductions below 1",
            args: sim(&["--hardware", &hw_reduction]),
            code: 2,
            says: vec![
                hw_reduction.clone(),
                s("interference.gemm_slowdown_beside_reduction"),
                s("0.8"),
            ],
        },
        Case {
            name: "the same site twice",
            args: sim(&[
                "--workload",
                "layer",
                "--model",
                "llama-3-8b",
                "--site",
                "fc2=flash",
                "--site",
                "fc2=chunked:4",
            ]),
            code: 2,
            says: vec![s("--site `fc2` is given twice")],
        },
        Case {
            name: "the same straggler twice",
            args: sim(&["--straggler", "rank:2=1.3", "--straggler", "rank:2=2"]),
            code: 2,
            says: vec![s("--straggler"), s("rank:2=1.3"), s("rank:2=2"), s("twice")],
        },
        Case {
            name: "--force onto a device node",
            args: sim(&["--trace", "/dev/null", "--force"]),
            code: 3,
            says: vec![s("/dev/null"), s("not a regular file")],
        },
        Case {
            name: "a device as a model file",
            args: sim(&["--model", "/dev/zero"]),
            code: 2,
            says: vec![s("--model"), s("/dev/zero"), s("not a regular file")],
        },
        Case {
            name: "degrees whose product wraps around",
            args: sim(&[
                "--workload",
                "layer",
                "--tp",
                "4294967296",
                "--ulysses",
                "4294967296",
            ]),
            code: 2,
            says: vec![s("--ulysses"), s("parallel.ulysses"), s("is beyond 2^32")],
        },
        Case {
            name: "expert parallelism wider than a layer's stage",
            args: sim(&[
                "--model",
                "mixtral-8x7b",
                "--workload",
                "layer",
                "--tp",
                "2",
                "--ep",
                "4",
            ]),
            code: 2,
            says: vec![s("--ep"), s("= 4"), s("tp × ulysses × dp = 2 × 1 × 1 = 2")],
        },
        Case {
            name: "a MoE site on a dense model",
            args: sim(&["--workload", "layer", "--site", "moe=flash-ep"]),
            code: 2,
            says: vec![s("--site"), s("sites.moe"), s("default-block")],
        },
        Case {
            name: "Flash-fused data parallelism in MoE layers",
            args: sim(&[
                "--model",
                "mixtral-8x7b",
                "--workload",
                "layer",
                "--tp",
                "2",
                "--dp",
                "2",
                "--ep",
                "4",
                "--site",
                "dp=flash",
            ]),
            code: 2,
            says: vec![s("--site"), s("sites.dp"), s("dp = bulk or sequential")],
        },
        Case {
            name: "a tensor-parallel strategy at the MoE site",
            args: sim(&[
                "--model",
                "mixtral-8x7b",
                "--workload",
                "layer",
                "--tp",
                "2",
                "--ep",
                "2",
                "--site",
                "moe=direct",
            ]),
            code: 2,
            says: vec![s("sites.moe"), s("sequential, chunked:K or flash-ep")],
        },
        Case {
            name: "the moe workload on a dense model",
            args: sim(&["--workload", "moe", "--tp", "1", "--ep", "4"]),
            code: 2,
            says: vec![
                s("default-block"),
                s("mixture-of-experts"),
                s("mixtral-8x7b"),
            ],
        },
        Case {
            name: "expert parallelism that does not divide the experts",
            args: sim(&[
                "--workload",
                "moe",
                "--model",
                "mixtral-8x7b",
                "--tp",
                "1",
                "--ep",
                "3",
            ]),
            code: 2,
            says: vec![s("--ep"), s("= 3"), s("8 routed experts")],
        },
        Case {
            name: "expert parallelism on a dense model",
            args: sim(&["--ep", "2"]),
            code: 2,
            says: vec![s("--ep"), s("default-block"), s("no experts")],
        },
        Case {
            name: "routing loads for the wrong number of ranks",
            args: sim(&[
                "--workload",
                "moe",
                "--model",
                "mixtral-8x7b",
                "--tp",
                "1",
                "--ep",
                "4",
                "--routing-skew",
                "2,1,1",
            ]),
            code: 2,
            says: vec![s("--routing-skew"), s("3 loads"), s("ep = 4")],
        },
        Case {
            name: "a Zipf exponent that is not a number",
            args: sim(&[
                "--workload",
                "moe",
                "--model",
                "mixtral-8x7b",
                "--tp",
                "1",
                "--ep",
                "4",
                "--routing-skew",
                "zipf:x",
            ]),
            code: 2,
            says: vec![s("--routing-skew"), s("Zipf exponent")],
        },
        Case {
            name: "flash-ep outside the moe workload",
            args: sim(&["--strategy", "flash-ep"]),
            code: 2,
            says: vec![s("--strategy"), s("flash-ep"), s("--site moe=flash-ep")],
        },
        Case {
            name: "a tensor-parallel strategy in the moe workload",
            args: sim(&[
                "--workload",
                "moe",
                "--model",
                "mixtral-8x7b",
                "--tp",
                "1",
                "--ep",
                "4",
                "--strategy",
                "direct",
            ]),
            code: 2,
            says: vec![s("--strategy"), s("sequential, chunked:K or flash-ep")],
        },
        Case {
            name: "sustained clocks on a profile that has not measured them",
            args: sim(&["--hardware", "a100-sxm-8", "--clocks", "sustained"]),
            code: 2,
            says: vec![
                s("--clocks"),
                s("= sustained"),
                s("a100-sxm-8"),
                s("gpu.sustained_gemm_slowdown"),
            ],
        },
        Case {
            name: "a sustained-load slowdown below 1",
            args: sim(&["--hardware", &hw_sustained]),
            code: 2,
            says: vec![
                hw_sustained.clone(),
                s("gpu.sustained_gemm_slowdown"),
                s("0.9"),
            ],
        },
        Case {
            name: "unknown transport",
            args: sim(&["--transport", "pigeon"]),
            code: 2,
            says: vec![s("--transport"), s("pigeon"), s("nccl, copy")],
        },
        Case {
            name: "collective: unknown op",
            args: coll(&["--op", "all-shuffle"]),
            code: 2,
            says: vec![s("--op"), s("all-shuffle"), s("all-reduce")],
        },
        Case {
            name: "collective: an algorithm the op does not have",
            args: coll(&["--op", "all-to-all", "--algorithm", "ring"]),
            code: 2,
            says: vec![s("all-to-all"), s("ring"), s("pairwise, direct")],
        },
        Case {
            name: "collective: more ranks than the topology holds",
            args: coll(&["--ranks", "16"]),
            code: 2,
            says: vec![s("--ranks"), s("8 GPUs"), s("16 ranks")],
        },
        Case {
            name: "collective: a GPU count for a multi-node profile",
            args: coll(&["--hardware", "dgx-h100", "--gpus", "16"]),
            code: 2,
            says: vec![s("topology.gpus"), s("no GPU count"), s("node count")],
        },
        Case {
            name: "collective: a size with an unknown unit",
            args: coll(&["--sizes", "1KiB:1XB"]),
            code: 2,
            says: vec![s("--sizes"), s("1XB"), s("unknown unit")],
        },
        Case {
            name: "straggler without a factor",
            args: sim(&["--straggler", "rank:1"]),
            code: 2,
            says: vec![s("--straggler"), s("rank:1"), s("rank:R=FACTOR")],
        },
        Case {
            name: "straggler of a negative factor",
            args: sim(&["--straggler", "rank:1=-2"]),
            code: 2,
            says: vec![s("rank:1=-2"), s("> 0")],
        },
        Case {
            name: "straggler rank outside the plan",
            args: sim(&["--straggler", "rank:99=2"]),
            code: 1,
            says: vec![s("rank 99"), s("4 ranks")],
        },
        Case {
            name: "straggler on a link the topology lacks",
            args: sim(&["--straggler", "link:gpu0->gpu9=2"]),
            code: 1,
            says: vec![s("gpu0->gpu9"), s("no link")],
        },
        Case {
            name: "jitter without samples",
            args: sim(&["--compute-jitter", "0.1"]),
            code: 2,
            says: vec![s("--samples")],
        },
        Case {
            name: "uniform jitter too wide",
            args: sim(&[
                "--samples",
                "3",
                "--jitter-distribution",
                "uniform",
                "--compute-jitter",
                "0.9",
            ]),
            code: 2,
            says: vec![s("jitter.compute_cv"), s("0.9"), s("1/√3")],
        },
        Case {
            name: "unknown jitter distribution",
            args: sim(&["--samples", "3", "--jitter-distribution", "cauchy"]),
            code: 2,
            says: vec![s("jitter.distribution"), s("cauchy"), s("lognormal")],
        },
        Case {
            name: "NCCL XML dump missing",
            args: coll(&["--hardware", &hw_xml_missing]),
            code: 2,
            says: vec![
                s("xml-missing.toml"),
                s("topology.file"),
                s("no-such-dump.xml"),
            ],
        },
        Case {
            name: "malformed NCCL XML",
            args: coll(&["--hardware", &hw_xml_bad]),
            code: 2,
            says: vec![s("bad-dump.xml"), s("line 3"), s("link_speed=\"warp\"")],
        },
        Case {
            name: "NCCL XML: a GPU outside any PCI device",
            args: coll(&["--hardware", &hw_xml_loose]),
            code: 2,
            says: vec![s("loose-gpu.xml"), s("line 3"), s("<pci>")],
        },
        Case {
            name: "NCCL XML: a NIC with no speed",
            args: coll(&["--hardware", &hw_xml_nospeed]),
            code: 2,
            says: vec![s("no-speed.xml"), s("<net>"), s("`speed`")],
        },
        Case {
            name: "profile: zero NCCL channels",
            args: coll(&["--hardware", &hw_channels]),
            code: 2,
            says: vec![s("channels.toml"), s("comm.nccl.channels"), s("1..64")],
        },
        Case {
            name: "collective: zero channels",
            args: coll(&["--channels", "0"]),
            code: 2,
            says: vec![s("--channels"), s("0"), s("1..64")],
        },
        Case {
            name: "collective: a billion channels",
            args: coll(&["--channels", "1000000000"]),
            code: 2,
            says: vec![s("--channels"), s("1000000000"), s("MAXCHANNELS")],
        },
        Case {
            name: "collective: unknown protocol",
            args: coll(&["--protocol", "LL256"]),
            code: 2,
            says: vec![s("--protocol"), s("LL256"), s("ll128")],
        },
        Case {
            name: "collective: a protocol for point-to-point messages",
            args: coll(&["--op", "all-to-all", "--protocol", "ll"]),
            code: 2,
            says: vec![s("--protocol"), s("all-to-all"), s("point-to-point")],
        },
        Case {
            name: "layer: heads not divisible by tp",
            args: sim(&["--workload", "layer", "--tp", "3", "--seq", "3072"]),
            code: 2,
            says: vec![s("parallel.tp"), s("heads")],
        },
        Case {
            name: "layer: kv heads incompatible with tp",
            args: sim(&["--workload", "layer", "--model", &gqa, "--tp", "4"]),
            code: 2,
            says: vec![s("parallel.tp"), s("6 kv heads")],
        },
        Case {
            name: "layer: tp × dp more ranks than the machine",
            args: sim(&["--workload", "layer", "--tp", "4", "--dp", "4"]),
            code: 2,
            says: vec![s("tp × dp × ulysses = 4 × 4 × 1 = 16 ranks"), s("8 GPUs")],
        },
        Case {
            name: "layer: a data-parallel strategy the dp site does not have",
            args: sim(&[
                "--workload",
                "layer",
                "--tp",
                "4",
                "--dp",
                "2",
                "--site",
                "dp=chunked:2",
            ]),
            code: 2,
            says: vec![
                s("sites.dp"),
                s("chunked:2"),
                s("sequential, bulk or flash"),
            ],
        },
        Case {
            name: "data parallelism on a one-block workload",
            args: sim(&["--workload", "mlp", "--tp", "4", "--dp", "2"]),
            code: 2,
            says: vec![s("parallel.dp"), s("one tensor-parallel group")],
        },
        Case {
            name: "layer: heads not divisible by tp × ulysses",
            args: sim(&["--workload", "layer", "--tp", "4", "--ulysses", "3"]),
            code: 2,
            says: vec![
                s("parallel.ulysses"),
                s("tp × ulysses = 12"),
                s("32 attention heads"),
            ],
        },
        Case {
            name: "layer: ulysses that does not divide the sequence",
            args: sim(&[
                "--workload",
                "layer",
                "--tp",
                "2",
                "--ulysses",
                "4",
                "--seq",
                "1002",
            ]),
            code: 2,
            says: vec![s("parallel.ulysses"), s("sequence length (1002)")],
        },
        Case {
            name: "layer: a strategy the all-to-all site does not have",
            args: sim(&[
                "--workload",
                "layer",
                "--tp",
                "2",
                "--ulysses",
                "2",
                "--site",
                "a2a=flash",
            ]),
            code: 2,
            says: vec![s("sites.a2a"), s("sequential or flash-a2a")],
        },
        Case {
            name: "layer: query-split with Ulysses",
            args: sim(&[
                "--workload",
                "layer",
                "--tp",
                "4",
                "--ulysses",
                "2",
                "--strategy",
                "query-split",
            ]),
            code: 2,
            says: vec![s("query-split"), s("ulysses > 1"), s("flash-a2a")],
        },
        Case {
            name: "unknown rank order",
            args: sim(&["--workload", "layer", "--rank-order", "zigzag"]),
            code: 2,
            says: vec![s("parallel.order"), s("zigzag"), s("tp-inner, dp-inner")],
        },
        Case {
            name: "step: micro-batches zero",
            args: sim(&["--workload", "step", "--micro-batches", "0"]),
            code: 2,
            says: vec![s("--micro-batches"), s("micro_batches")],
        },
        Case {
            name: "layer: unknown site in a per-site strategy",
            args: sim(&["--workload", "layer", "--site", "mlp=flash"]),
            code: 2,
            says: vec![s("sites.mlp"), s("unknown site"), s("fc2")],
        },
        Case {
            name: "per-site strategy on a block workload",
            args: sim(&["--site", "fc2=flash"]),
            code: 2,
            says: vec![s("sites.fc2"), s("layer and step")],
        },
        Case {
            name: "Hugging Face config.json missing a required field",
            args: sim(&["--model", &hf_missing]),
            code: 2,
            says: vec![s("config.json"), s("intermediate_size"), s("(missing)")],
        },
        Case {
            name: "sweep: empty grid",
            args: swp(&["--tp", ","]),
            code: 2,
            says: vec![s("sweep field `parallel.tp`"), s("empty")],
        },
        Case {
            name: "sweep: a field set by a flag and by --set",
            args: swp(&["--tp", "2", "--set", "parallel.tp=4"]),
            code: 2,
            says: vec![
                s("`parallel.tp` is given twice"),
                s("--tp 2"),
                s("--set parallel.tp=4"),
            ],
        },
        Case {
            name: "sweep: a field set twice by --set",
            args: swp(&["--set", "seq=1k", "--set", "seq=2k"]),
            code: 2,
            says: vec![s("`seq` is given twice"), s("--set seq=2k")],
        },
        Case {
            name: "sweep: field that does not exist",
            args: swp(&["--set", "colour=red,blue"]),
            code: 2,
            says: vec![s("sweep field `colour`"), s("unknown field `colour`")],
        },
        Case {
            name: "sweep: value of the wrong type",
            args: swp(&["--batch", "8,lots"]),
            code: 2,
            says: vec![
                s("sweep field `parallel.tp`").replace("parallel.tp", "batch"),
                s("`lots` is not an integer"),
            ],
        },
        Case {
            name: "sweep: invalid point",
            args: swp(&["--tp", "2,3"]),
            code: 1,
            says: vec![s("point 1 (parallel.tp=3)"), s("parallel.tp")],
        },
        Case {
            name: "sweep: output path that cannot be written",
            args: swp(&["--tp", "2", "--out", "/proc/version/sweep"]),
            code: 3,
            says: vec![s("/proc/version/sweep")],
        },
        Case {
            name: "sweep: a figure to rank by that does not exist",
            args: swp(&["--tp", "2", "--rank-by", "speed"]),
            code: 2,
            says: vec![s("--rank-by"), s("`speed`"), s("tokens_per_s")],
        },
        Case {
            name: "sweep: grouping by a field it does not vary",
            args: swp(&["--tp", "2,4", "--group-by", "colour"]),
            code: 2,
            says: vec![s("--group-by `colour`"), s("parallel.tp")],
        },
        Case {
            name: "micro-batches on a workload that is not a step",
            args: sim(&["--micro-batches", "4"]),
            code: 2,
            says: vec![
                s("--micro-batches"),
                s("micro_batches"),
                s("workload `mlp`"),
            ],
        },
        Case {
            name: "trace window backwards",
            args: sim(&[
                "--trace",
                &d.join("t.json").display().to_string(),
                "--trace-window",
                "5:1",
            ]),
            code: 2,
            says: vec![s("--trace-window `5:1`"), s("START:END")],
        },
        Case {
            name: "trace window by layer on a workload without layers",
            args: sim(&[
                "--trace",
                &d.join("t.json").display().to_string(),
                "--trace-window",
                "layer=5",
            ]),
            code: 2,
            says: vec![s("workload `mlp` records no layers"), s("START:END")],
        },
        Case {
            name: "trace ranks without a trace",
            args: sim(&["--trace-ranks", "0-3"]),
            code: 2,
            says: vec![s("--trace-ranks"), s("give --trace too")],
        },
        Case {
            name: "sweep: bad shard",
            args: swp(&["--shard", "3/3"]),
            code: 2,
            says: vec![s("--shard"), s("3/3")],
        },
        Case {
            name: "sweep merge: not a sweep",
            args: vec![
                s("sweep"),
                s("merge"),
                hw_zero.clone(),
                s("--out"),
                d.join("m").display().to_string(),
            ],
            code: 2,
            says: vec![s("zero.toml"), s("not JSON")],
        },
        Case {
            name: "search: no global batch",
            args: srch(&[]),
            code: 2,
            says: vec![s("--global-batch is required")],
        },
        Case {
            name: "search: degrees that divide nothing",
            args: srch(&["--global-batch", "16", "--tp", "3"]),
            code: 2,
            says: vec![s("no layout to simulate"), s("27 indivisible")],
        },
        Case {
            name: "search: no layout fits in memory",
            args: srch(&[
                "--global-batch",
                "16",
                "--model",
                "llama-3-70b",
                "--tp",
                "1",
                "--pp",
                "1",
                "--zero",
                "1",
                "--recompute",
                "none",
            ]),
            code: 2,
            says: vec![s("out of memory"), s("--zero 3 or --recompute full")],
        },
        Case {
            name: "search: a figure that does not exist",
            args: srch(&["--global-batch", "16", "--rank-by", "colour"]),
            code: 2,
            says: vec![s("--rank-by"), s("`colour`"), s("tokens_per_s")],
        },
        Case {
            name: "search: ZeRO stage that does not exist",
            args: srch(&["--global-batch", "16", "--zero", "7"]),
            code: 2,
            says: vec![s("--zero"), s("stage 7")],
        },
        Case {
            name: "search: unknown pipeline schedule",
            args: srch(&["--global-batch", "16", "--pp-schedule", "zigzag"]),
            code: 2,
            says: vec![s("--pp-schedule `zigzag`")],
        },
        Case {
            name: "search merge: not a search",
            args: vec![
                s("search"),
                s("merge"),
                hw_zero.clone(),
                s("--out"),
                d.join("sm").display().to_string(),
            ],
            code: 2,
            says: vec![s("zero.toml"), s("not JSON")],
        },
        Case {
            name: "run: back-to-back baseline of several ranks",
            args: vec![s("run"), s("--tp"), s("2"), s("--back-to-back")],
            code: 2,
            says: vec![s("--back-to-back"), s("2 ranks"), s("--emulate-rank")],
        },
        Case {
            name: "plan: a key that means nothing for the op's kind",
            args: sim(&["--plan", &plan_bad_key]),
            code: 2,
            says: vec![plan_bad_key.clone(), s("op[0].m"), s("copy op")],
        },
        Case {
            name: "plan: a dependency on no op",
            args: sim(&["--plan", &plan_after]),
            code: 2,
            says: vec![
                plan_after.clone(),
                s("op[0].after"),
                s("\"g\""),
                s("names no op"),
            ],
        },
        Case {
            name: "plan: more ranks than the hardware has GPUs",
            args: sim(&["--plan", &plan_big]),
            code: 2,
            says: vec![s("100 ranks"), s("h100-sxm-8"), s("8 GPUs")],
        },
        Case {
            name: "plan: a scenario flag beside --plan",
            args: sim(&["--plan", &plan_big, "--tp", "2"]),
            code: 2,
            says: vec![s("--plan"), s("--tp")],
        },
        Case {
            name: "plan: a layer window on a plan",
            args: sim(&[
                "--plan",
                "plans/gemms-beside-copies.toml",
                "--trace",
                "/tmp/never.json",
                "--trace-window",
                "layer=0-1",
            ]),
            code: 2,
            says: vec![s("--trace-window"), s("plan file")],
        },
        Case {
            name: "a forward pass alone of a workload without one",
            args: sim(&["--forward-only"]),
            code: 2,
            says: vec![s("--forward-only"), s("passes"), s("mlp")],
        },
        Case {
            name: "no causal mask on a workload without attention",
            args: sim(&["--non-causal", "--workload", "ag-gemm"]),
            code: 2,
            says: vec![s("--non-causal"), s("causal"), s("ag-gemm")],
        },
        Case {
            name: "sweep: more threads than any machine has cores",
            args: swp(&[
                "--threads",
                "100000",
                "--set",
                "batch=1,2",
                "--out",
                &d.join("threads").display().to_string(),
            ]),
            code: 2,
            says: vec![s("--threads"), s("100000"), s("1..1024")],
        },
        Case {
            name: "jittered samples over the event budget",
            args: sim(&["--samples", "1000000000", "--compute-jitter", "0.1"]),
            code: 2,
            says: vec![s("--samples 1000000000"), s("events"), s("--max-events")],
        },
        Case {
            name: "collective: a straggler on a rank the run lacks",
            args: coll(&[
                "--hardware",
                "ring-50gib",
                "--gpus",
                "64",
                "--sizes",
                "1MiB",
                "--straggler",
                "rank:64=2",
            ]),
            code: 2,
            says: vec![s("--straggler"), s("rank 64"), s("64 ranks")],
        },
        Case {
            // Parts the ranks do not divide: every op is built (an equal split runs
            // from generated ops in megabytes).
            name: "collective: a plan over the memory limit",
            args: coll(&[
                "--hardware",
                "ring-50gib",
                "--gpus",
                "4096",
                "--op",
                "all-reduce",
                "--sizes",
                "1073741820",
                "--chunks",
                "4",
                "--symmetry",
                "off",
            ]),
            code: 2,
            says: vec![s("268369920 ops"), s("32.0 GiB"), s("--max-memory")],
        },
        Case {
            // The full plan (tp-inner leaves no symmetry) of a 1024-GPU pipeline step:
            // 89.6 M ops at a layer's 384 B each; at a collective's 128 B it passed and
            // the kernel killed the run at 24 GB.
            name: "simulate: a step plan over the memory limit at a layer's bytes per op",
            args: sim(&[
                "--workload",
                "step",
                "--model",
                "llama-3-70b",
                "--tp",
                "8",
                "--pp",
                "8",
                "--dp",
                "16",
                "--batch",
                "1",
                "--micro-batches",
                "64",
                "--seq",
                "4k",
                "--hardware",
                "dgx-h100-rail",
                "--nodes",
                "128",
                "--zero",
                "1",
                "--strategy",
                "flash",
            ]),
            code: 2,
            says: vec![s("136622080 ops"), s("384 B per op"), s("--max-memory")],
        },
        Case {
            name: "a memory limit that is not a size",
            args: sim(&["--max-memory", "0"]),
            code: 2,
            says: vec![s("--max-memory"), s("0")],
        },
        Case {
            name: "timeline whose header claims billions of ranks",
            args: vec![
                s("plot"),
                s("timeline"),
                timeline_huge.clone(),
                s("--out"),
                d.join("huge.svg").display().to_string(),
            ],
            code: 2,
            says: vec![timeline_huge.clone(), s("`ranks`"), s("4000000000")],
        },
        Case {
            name: "NCCL XML nested 100,000 levels deep",
            args: coll(&["--hardware", &hw_xml_deep]),
            code: 2,
            says: vec![s("deep-dump.xml"), s("64")],
        },
        Case {
            name: "a FIFO as a scenario file",
            args: sim(&["--scenario", &fifo]),
            code: 2,
            says: vec![fifo.clone(), s("not a regular file")],
        },
        Case {
            name: "a scenario file of one 17 MiB line",
            args: sim(&["--scenario", &huge_line]),
            code: 2,
            says: vec![huge_line.clone(), s("16777216")],
        },
        Case {
            name: "a node count in a one-node profile",
            args: sim(&["--hardware", &hw_stray_nodes]),
            code: 2,
            says: vec![hw_stray_nodes.clone(), s("topology.nodes"), s("`nvswitch`")],
        },
        Case {
            name: "unwritable trace path",
            args: sim(&["--trace", "/nonexistent-dir/t.json"]),
            code: 3,
            says: vec![s("/nonexistent-dir/t.json")],
        },
    ]
}

/// The catalogue of bad inputs in the docs, rendered from the cases and what the binary
/// printed for each, so it cannot drift from the code: the test fails when
/// docs/bad-inputs.md differs; `UPDATE_CATALOGUE=1` rewrites it.
fn catalogue(rows: &[(String, String, i32, String)]) -> String {
    let mut s = String::from(
        "# Bad inputs and what flashoverlap says\n\n\
         Generated by `tests/it/bad_input.rs` from the cases it runs (rerun with\n\
         `UPDATE_CATALOGUE=1 cargo test --test it every_bad_input` after changing a message);\n\
         the test fails when this file and the binary disagree. `$DIR` is a scratch directory\n\
         holding the files a case writes. Exit codes: 1 a run failed, 2 bad input, 3 an output\n\
         could not be written.\n",
    );
    for (name, cmd, code, err) in rows {
        s.push_str(&format!(
            "\n## {name}\n\n```sh\n$ flashoverlap {cmd}\n```\n\nexit {code}\n\n```text\n{}\n```\n",
            err.trim_end()
        ));
    }
    s
}

#[test]
fn every_bad_input_is_one_clear_error() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().display().to_string();
    let mut rows = Vec::new();
    for c in cases(d.path()) {
        // Under the memory and time caps: a case that regresses into an unbounded
        // allocation or an endless run fails here by name.
        let out = super::capped::run(c.name, &c.args);
        assert_eq!(
            out.code,
            Some(c.code),
            "{}: exit {:?}\n{}",
            c.name,
            out.code,
            String::from_utf8_lossy(&out.stderr)
        );
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(!err.contains("panicked"), "{}: panicked\n{err}", c.name);
        assert!(err.starts_with("error: "), "{}: {err}", c.name);
        for want in &c.says {
            assert!(
                err.contains(want.as_str()),
                "{}: `{want}` not in\n{err}",
                c.name
            );
        }
        assert!(
            out.stdout.is_empty(),
            "{}: printed results despite the error",
            c.name
        );
        let quote = |a: &String| {
            if a.is_empty() || a.contains([' ', '>', '<', '*']) {
                format!("'{a}'")
            } else {
                a.clone()
            }
        };
        let cmd = c.args.iter().map(quote).collect::<Vec<_>>().join(" ");
        rows.push((
            c.name.to_string(),
            cmd.replace(&dir, "$DIR"),
            c.code,
            err.replace(&dir, "$DIR"),
        ));
    }
    let doc = catalogue(&rows);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/bad-inputs.md");
    if std::env::var("UPDATE_CATALOGUE").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &doc).unwrap();
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == doc,
        "docs/bad-inputs.md is out of date; rerun with UPDATE_CATALOGUE=1"
    );
}
