"""The Python API against the library's own behaviour and the command line's."""

import json
import os
import subprocess

import pytest

import flashoverlap as fo


def test_default_scenario_runs_every_strategy_with_every_figure():
    r = fo.simulate()
    assert r.strategies == ["sequential", "chunked:4", "flash"]
    for row in r:
        for k in fo.FIGURES:
            assert k in row, k
        assert row["makespan_us"] > 0
    # Flash hides more communication than sequential on the default block.
    assert r["flash"]["exposed_comm_us"] < r["sequential"]["exposed_comm_us"]
    assert r.scenario["gpus"] == {"used": 4, "available": 8}


def test_keyword_arguments_are_the_commands_flags():
    r = fo.simulate(tp=8, model="llama-3-8b", strategies="sequential,flash", seq=2048, batch=2)
    assert r.strategies == ["sequential", "flash"]
    assert r.scenario["tp"] == 8 and r.scenario["model"] == "llama-3-8b"
    assert r.scenario["tokens"] == 4096


def test_clocks_follow_the_workload_unless_given():
    hw = os.path.join(os.path.dirname(__file__), "..", "..", "hardware-profiles", "measured", "h200-measured.toml")
    args = dict(hardware=hw, model="llama-3-8b", tp=8, batch=2, seq=4096, strategies="flash")
    assert fo.simulate(workload="layer", **args).scenario["clocks"] == "sustained"
    assert fo.simulate(workload="layer", clocks="burst", **args).scenario["clocks"] == "burst"
    assert fo.simulate(workload="mlp", **args).scenario["clocks"] == "burst"
    with pytest.raises(ValueError, match=r"argument \(clocks\): key `clocks` = fast"):
        fo.simulate(clocks="fast")


def test_attention_blocks_and_forward_passes():
    args = dict(model="llama-3-8b", tp=8, batch=2, seq=4096, strategies="flash")
    layer = fo.simulate(workload="layer", **args)["flash"]["makespan_us"]
    attn = fo.simulate(workload="attention", **args)["flash"]["makespan_us"]
    fwd = fo.simulate(workload="attention", passes="fwd", **args)["flash"]["makespan_us"]
    full = fo.simulate(workload="attention", causal=False, **args)["flash"]["makespan_us"]
    assert fwd < attn < layer and attn < full


def test_a_moe_block_with_expert_parallelism_and_skew():
    args = dict(workload="moe", model="mixtral-8x7b", tp=1, ep=4, batch=1, seq=4096)
    r = fo.simulate(strategies="sequential,flash-ep", **args)
    assert r.strategies == ["sequential", "flash-ep"]
    assert r.scenario["moe"]["experts_per_rank"] == 2
    assert r.scenario["moe"]["imbalance_x"] == 1.0
    assert r["flash-ep"]["exposed_comm_us"] < r["sequential"]["exposed_comm_us"]
    skewed = fo.simulate(strategies="flash-ep", routing="3,1,1,1", **args)
    assert skewed.scenario["moe"]["imbalance_x"] == 2.0
    assert skewed["flash-ep"]["makespan_us"] > r["flash-ep"]["makespan_us"]
    with pytest.raises(ValueError, match=r"argument \(routing\)"):
        fo.simulate(strategies="flash-ep", routing="3,1", **args)


def test_a_plan_file_is_the_commands(tmp_path):
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    plan = os.path.join(root, "plans", "gemms-beside-copies.toml")
    hw = os.path.join(root, "hardware-profiles", "measured", "h200-measured.toml")
    r = fo.simulate_plan(plan, hardware=hw)
    assert len(r.timeline) == 20
    assert {s["stream"] for s in r.streams} == {"compute", "copy"}
    bad = tmp_path / "bad.toml"
    bad.write_text('version = 1\n[[op]]\nkind = "conv"\n')
    with pytest.raises(ValueError, match=r"op\[0\]\.kind"):
        fo.simulate_plan(str(bad))
    with pytest.raises(OSError):
        fo.simulate_plan(str(tmp_path / "missing.toml"))
    exe = os.environ.get("FLASHOVERLAP_BIN")
    if not exe:
        pytest.skip("FLASHOVERLAP_BIN is not set (scripts/test sets it to the built binary)")
    cli = subprocess.run(
        [exe, "simulate", "--plan", plan, "--hardware", hw, "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert r.results == json.loads(cli.stdout)


def test_errors_carry_the_commands_messages():
    with pytest.raises(ValueError) as e:
        fo.simulate(tp=0)
    assert str(e.value) == "argument (tp): key `parallel.tp` = 0: must be a positive integer"
    with pytest.raises(ValueError, match="unknown model preset `nosuch`"):
        fo.simulate(model="nosuch")
    with pytest.raises(TypeError, match=r"argument \(tp\): expected an integer"):
        fo.simulate(tp="eight")
    with pytest.raises(TypeError, match=r"argument \(tp\): expected an integer"):
        fo.simulate(tp=True)
    with pytest.raises(TypeError):
        fo.simulate(tensor_parallel=8)  # not an argument


def test_presets_and_arguments_are_listed():
    names = {p["name"] for p in fo.presets("model")}
    assert {"llama-3-8b", "llama-3-70b"} <= names
    assert all(p["kind"] == "hardware" for p in fo.presets("hardware"))
    assert "tp" in fo.arguments() and "strategies" in fo.arguments()


def test_timelines_round_trip_through_a_file(tmp_path):
    r = fo.simulate(timelines=True)
    t = r.timelines["flash"]
    assert len(t) > 0 and t.source == "predicted" and t.strategy == "flash"
    p = tmp_path / "timeline-flash.json"
    p.write_text(json.dumps(t.document))
    back = fo.load_timeline(p)
    assert back.spans == t.spans
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "something-else"}')
    with pytest.raises(ValueError):
        fo.load_timeline(bad)
    with pytest.raises(OSError):
        fo.load_timeline(tmp_path / "missing.json")


def test_to_pandas_gives_one_row_per_strategy():
    pd = pytest.importorskip("pandas", reason="pandas is not installed")
    r = fo.simulate(strategies=["sequential", "flash"])
    df = r.to_pandas()
    assert list(df.columns) == ["strategy"] + fo.FIGURES
    assert list(df["strategy"]) == ["sequential", "flash"]
    spans = fo.simulate(timelines=True).timelines["flash"].to_pandas()
    assert {"start_us", "end_us", "rank", "stream", "kind"} <= set(spans.columns)
    assert isinstance(r.sites_to_pandas(), pd.DataFrame)


def test_figures_equal_the_command_lines_bit_for_bit():
    exe = os.environ.get("FLASHOVERLAP_BIN")
    if not exe:
        pytest.skip("FLASHOVERLAP_BIN is not set (scripts/test sets it to the built binary)")
    out = subprocess.run(
        [exe, "simulate", "--format", "json", "--tp", "8", "--model", "llama-3-8b"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    cli = json.loads(out)
    py = fo.simulate(tp=8, model="llama-3-8b").document
    assert py == cli


def test_collective_is_the_commands():
    c = fo.collective("dgx-h100", sizes="1GiB,8GiB", nodes=2)
    assert [r["size_bytes"] for r in c] == [1 << 30, 8 << 30]
    assert all(r["busbw_GB/s"] > 300 for r in c), c.rows
    assert "# Avg bus bandwidth" in c.table
    with pytest.raises(ValueError, match=r"argument \(channels\): 0 is not in 1..64"):
        fo.collective(channels=0, sizes="1MiB")
    with pytest.raises(ValueError, match=r"argument \(op\): `x` is not one of"):
        fo.collective(op="x")
    # A slow link: every rank simulated, from generated ops, and the ring slower.
    ring = dict(hardware="ring-50gib", gpus=64, sizes="64MiB", chunks=4)
    fast, slow = fo.collective(**ring), fo.collective(**ring, stragglers=["link:gpu5->gpu6=3"])
    assert (fast.rows[0]["plan"], slow.rows[0]["plan"]) == ("symmetric", "generated")
    assert slow.rows[0]["time_us"] > fast.rows[0]["time_us"]
    with pytest.raises(ValueError, match=r"argument \(stragglers\): straggler `x`"):
        fo.collective(stragglers=["x"], sizes="1MiB")
    # Jittered samples: a spread per size, fixed by the seed.
    a = fo.collective(**ring, samples=8, comm_jitter=0.1, seed=3)
    b = fo.collective(**ring, samples=8, comm_jitter=0.1, seed=3)
    spread = a.rows[0]["time_us_jittered"]
    assert spread == b.rows[0]["time_us_jittered"] and spread["samples"] == 8
    assert spread["min"] <= spread["p50"] <= spread["p90"] <= spread["p99"] <= spread["max"]
    exe = os.environ.get("FLASHOVERLAP_BIN")
    if exe:
        out = subprocess.run(
            [exe, "collective", "--hardware", "dgx-h100", "--nodes", "2", "--sizes", "1GiB,8GiB", "--format", "json"],
            check=True, capture_output=True, text=True,
        ).stdout
        assert json.loads(out) == c.document
        table = subprocess.run(
            [exe, "collective", "--hardware", "dgx-h100", "--nodes", "2", "--sizes", "1GiB,8GiB"],
            check=True, capture_output=True, text=True,
        ).stdout
        assert table == c.table


def test_sweep_is_the_commands(tmp_path):
    s = fo.sweep(tp=[2, 4], seq="1k,4k", strategy=["sequential", "flash"])
    assert len(s) == 2 * 2 * 2
    assert all(r["error"] is None for r in s)
    assert "flash" in s.summary
    exe = os.environ.get("FLASHOVERLAP_BIN")
    if exe:
        out = subprocess.run(
            [exe, "sweep", "--quiet", "--tp", "2,4", "--seq", "1k,4k", "--strategy", "sequential,flash", "--format", "csv"],
            check=True, capture_output=True, text=True,
        ).stdout
        assert out == s.csv
    d = tmp_path / "sw"
    fo.sweep(tp=[2, 4], out=d)
    assert (d / "sweep.csv").exists() and (d / "summary.txt").exists()
    with pytest.raises(OSError, match="exists"):
        fo.sweep(tp=[2, 4], out=d)
    # An invalid point fails the sweep as a run, as the command's exit status 1 says
    # (skip_invalid=True records it as a row instead).
    with pytest.raises(RuntimeError, match="parallel.tp"):
        fo.sweep(tp=[0])
    assert fo.sweep(tp=[0, 2], skip_invalid=True).rows[0]["error"]
    pd = pytest.importorskip("pandas", reason="pandas is not installed")
    df = s.to_pandas()
    assert {"tp", "seq", "strategy", "makespan_us"} <= set(df.columns)


def test_a_moe_search_ranges_over_ep():
    s = fo.search(8, model="mixtral-8x7b", hardware="dgx-h100", nodes=2, seq=1024,
                  tp=[1, 2], pp=[2], ep=[2, 8], micro_batch=[1], strategies="flash")
    assert sorted({r["ep"] for r in s}) == [2, 8]
    assert all(r["tp"] * r["dp"] % r["ep"] == 0 for r in s)
    with pytest.raises(ValueError, match="no experts"):
        fo.search(8, model="llama-3-8b", hardware="h100-sxm-8", seq=1024, ep=[2], dry_run=True)


def test_search_is_the_commands(tmp_path):
    args = dict(model="llama-3-8b", hardware="h100-sxm-8", seq=1024, tp=[2, 4], pp=[1, 2])
    s = fo.search(16, strategies="sequential,flash", threads=1, **args)
    assert len(s) == 2 * s.counts["layouts"]
    assert [r["rank"] for r in s] == list(range(1, len(s) + 1))
    assert s.best is s.rows[0] and s.best["exact"] is not None
    assert "llama-3-8b on h100-sxm-8 at sustained clocks (8 GPUs)" in s.summary
    exe = os.environ.get("FLASHOVERLAP_BIN")
    if exe:
        out = subprocess.run(
            [exe, "search", "--quiet", "--global-batch", "16", "--model", "llama-3-8b",
             "--hardware", "h100-sxm-8", "--seq", "1024", "--tp", "2,4", "--pp", "1,2",
             "--strategy", "sequential,flash", "--format", "csv"],
            check=True, capture_output=True, text=True,
        ).stdout
        assert out == s.csv
    d = tmp_path / "search"
    fo.search(16, strategies="flash", out=d, **args)
    assert {p.name for p in d.iterdir()} == {"search.json", "search.csv", "summary.txt"}
    with pytest.raises(OSError, match="exists"):
        fo.search(16, out=d, **args)
    dry = fo.search(16, dry_run=True, **args)
    assert len(dry) == 0 and "search (dry run)" in dry.summary
    with pytest.raises(ValueError, match="pp_schedule `zigzag`"):
        fo.search(16, pp_schedule=["zigzag"])
    with pytest.raises(ValueError, match="no layout to simulate"):
        fo.search(16, tp=[3])
    with pytest.raises(TypeError, match="one value"):
        fo.search(16, model=["llama-3-8b", "llama-3-70b"])
    pytest.importorskip("pandas", reason="pandas is not installed")
    df = s.to_pandas()
    assert {"tp", "pp", "dp", "strategy", "tokens_per_s", "memory_gib"} <= set(df.columns)


RUN = os.path.join(os.path.dirname(__file__), "..", "..", "results", "h200-2026-12-04", "emu-none-llama-ag-gemm-tp8-b3")


def test_validate_is_the_commands():
    v = fo.validate(RUN)
    assert len(v) > 0 and not v.predictions
    assert all(c["measured_makespan_us"] > 0 for c in v)
    assert v.summary and "strategy" in v.table
    again = fo.validate([RUN], hardware="h200-sxm-8")
    assert len(again) == len(v)
    assert len(again.predictions) == len(v)
    assert all(isinstance(t, fo.Timeline) and len(t) > 0 for t in again.predictions.values())
    with pytest.raises(OSError, match="run.json"):
        fo.validate("no/such/run")
    with pytest.raises(ValueError, match="needs hardware"):
        fo.validate(RUN, interference=False)
    exe = os.environ.get("FLASHOVERLAP_BIN")
    if exe:
        out = subprocess.run(
            [exe, "validate", RUN, "--hardware", "h200-sxm-8", "--format", "json"],
            check=True, capture_output=True, text=True,
        ).stdout
        assert json.loads(out) == again.document
    pytest.importorskip("pandas", reason="pandas is not installed")
    assert len(again.to_pandas()) == len(again)


def test_readme_python_block_runs_as_written(tmp_path, monkeypatch):
    """The README's Python examples, run as written in a folder where the files they
    name exist (`run/` from `simulate --out`, the checked-in `results/`)."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    text = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    assert blocks, "the README has no Python example"
    exe = os.environ.get("FLASHOVERLAP_BIN")
    if not exe:
        pytest.skip("FLASHOVERLAP_BIN is not set (scripts/test sets it to the built binary)")
    subprocess.run([exe, "simulate", "--out", str(tmp_path / "run")], check=True, capture_output=True)
    os.symlink(os.path.abspath(os.path.join(root, "results")), tmp_path / "results")
    monkeypatch.chdir(tmp_path)
    pytest.importorskip("pandas", reason="pandas is not installed (the examples call to_pandas)")
    for b in blocks:
        exec(compile(b, "README.md", "exec"), {})


def test_a_layout_that_does_not_fit_is_refused_unless_allowed():
    kw = dict(workload="step", model="llama-3-70b", tp=8, hardware="h100-sxm-8", seq=4096, batch=1, strategies="sequential")
    with pytest.raises(ValueError, match="does not fit"):
        fo.simulate(**kw)
    r = fo.simulate(allow_oom=True, **kw)
    m = r.scenario["memory"]
    assert m["fits"] is False and m["peak_gib"] > m["capacity_gib"]
    ok = fo.simulate(workload="step", model="llama-3-8b", tp=8, hardware="h100-sxm-8", seq=4096, batch=1, strategies="sequential", recompute="full")
    assert ok.scenario["memory"]["fits"] and ok.scenario["memory"]["recompute"] == "full"
