"""flashoverlap for Python: the simulator's use cases, returning plain Python objects.

>>> import flashoverlap as fo
>>> r = fo.simulate(tp=8, model="llama-3-8b", strategies=["sequential", "flash"])
>>> r["flash"]["makespan_us"] < r["sequential"]["makespan_us"]
True
>>> r.to_pandas()          # one row per strategy (needs pandas)

Every function runs the same code as the ``flashoverlap`` command (same validation, same
error messages): a bad value raises ``ValueError`` with the message the command prints,
a wrong type ``TypeError``, a failed run ``RuntimeError``.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from . import _flashoverlap as _core

__all__ = [
    "FIGURES",
    "Collective",
    "Results",
    "Timeline",
    "Validation",
    "arguments",
    "collective",
    "sweep",
    "Sweep",
    "search",
    "Search",
    "load_timeline",
    "presets",
    "simulate",
    "validate",
]

__version__: str = _core.__version__

#: The names of a run's figures, as results.json, the sweep's files and the charts name
#: them (each carries its unit: ``_us``, ``_ratio``, ``_x``).
FIGURES: List[str] = list(_core.figures())


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "to_pandas() needs pandas: pip install pandas (or pip install flashoverlap[pandas])"
        ) from e
    return pandas


class Timeline:
    """A timeline (predicted or measured) in the schema of ``timeline-<strategy>.json``.

    ``spans`` is a list of dicts (``lane``, ``index``, ``op``, ``kind``, ``label``,
    ``start_us``, ``end_us``, ``bytes``, ``flops``); ``streams`` names each stream's rank,
    name and kind; ``document`` is the whole file as a dict.
    """

    def __init__(self, document: Dict[str, Any]):
        self.document = document
        self.strategy: str = document["strategy"]
        self.source: str = document["source"]
        self.ranks: int = document["ranks"]
        self.streams: List[Dict[str, Any]] = document["streams"]
        self.links: List[str] = document["links"]
        self.spans: List[Dict[str, Any]] = document["spans"]

    def __len__(self) -> int:
        return len(self.spans)

    def __repr__(self) -> str:
        return f"<Timeline {self.source} {self.strategy}: {self.ranks} ranks, {len(self.spans)} spans>"

    def to_pandas(self) -> Any:
        """The spans as a DataFrame, with each span's ``dur_us`` and each stream span's
        ``rank``, ``stream`` and ``stream_kind`` (link spans: rank -1, the link's name in
        ``stream``, kind ``link``)."""
        pd = _pandas()
        rows = []
        for s in self.spans:
            row = dict(s)
            row["dur_us"] = s["end_us"] - s["start_us"]
            if s["lane"] == "stream":
                st = self.streams[s["index"]]
                row.update(rank=st["rank"], stream=st["name"], stream_kind=st["kind"])
            else:
                row.update(rank=-1, stream=self.links[s["index"]], stream_kind="link")
            rows.append(row)
        return pd.DataFrame(rows)

    def save(self, path: Any) -> None:
        """Write the timeline file (what ``plot timeline`` and ``validate`` read)."""
        with open(path, "w") as f:
            json.dump(self.document, f)


class Results:
    """What ``simulate`` returns: the scenario as it ran and one row of figures per
    strategy (``FIGURES``, plus per-site and per-phase figures), as in ``results.json``.

    ``results["flash"]`` is the row of a strategy; iterating gives the rows in order;
    ``document`` is results.json as a dict; ``timelines`` maps each strategy to its
    :class:`Timeline` when ``simulate(..., timelines=True)``.
    """

    def __init__(self, document: Dict[str, Any], timelines: Optional[Dict[str, Timeline]] = None):
        self.document = document
        self.scenario: Dict[str, Any] = document["scenario"]
        self.rows: List[Dict[str, Any]] = document["results"]
        self.timelines: Dict[str, Timeline] = timelines or {}

    @property
    def strategies(self) -> List[str]:
        return [r["strategy"] for r in self.rows]

    def __getitem__(self, strategy: str) -> Dict[str, Any]:
        for r in self.rows:
            if r["strategy"] == strategy:
                return r
        raise KeyError(f"no strategy `{strategy}` (ran: {', '.join(self.strategies)})")

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        s = self.scenario
        return f"<Results {s['workload']} of {s['model']} on {s['hardware']}: {', '.join(self.strategies)}>"

    def to_pandas(self) -> Any:
        """One row per strategy: ``strategy`` and every figure of ``FIGURES``."""
        pd = _pandas()
        return pd.DataFrame(
            [{"strategy": r["strategy"], **{k: r.get(k) for k in FIGURES}} for r in self.rows]
        )

    def sites_to_pandas(self) -> Any:
        """One row per (strategy, site) on the critical rank: compute, communication and
        exposed communication in µs."""
        pd = _pandas()
        return pd.DataFrame(
            [{"strategy": r["strategy"], **s} for r in self.rows for s in r.get("sites", [])]
        )


def simulate(
    scenario: str = "default",
    *,
    timelines: bool = False,
    clocks: Optional[str] = None,
    allow_oom: bool = False,
    model: Optional[str] = None,
    hardware: Optional[str] = None,
    workload: Optional[str] = None,
    tp: Optional[int] = None,
    dp: Optional[int] = None,
    ulysses: Optional[int] = None,
    pp: Optional[int] = None,
    pp_schedule: Optional[str] = None,
    rank_order: Optional[str] = None,
    ep: Optional[int] = None,
    batch: Optional[int] = None,
    seq: Optional[int] = None,
    micro_batches: Optional[int] = None,
    dtype: Optional[str] = None,
    transport: Optional[str] = None,
    nodes: Optional[int] = None,
    interference: Optional[bool] = None,
    recompute: Optional[str] = None,
    zero: Optional[int] = None,
    causal: Optional[bool] = None,
    passes: Optional[str] = None,
    routing: Optional[str] = None,
    sites: Optional[Dict[str, str]] = None,
    strategies: Optional[Union[str, Sequence[str]]] = None,
) -> Results:
    """Simulate ``scenario`` (a preset name or a path to a scenario TOML) under each of
    its strategies, with the keyword arguments replacing the scenario's fields as the
    command's flags do (``tp`` is ``--tp``, ``strategies`` is ``--strategy``, ``sites``
    is ``--site`` as a dict, ``interference=False`` is ``--no-interference``). Paths in
    the scenario file resolve against its folder, paths given here against the working
    directory. ``timelines=True`` also returns each strategy's timeline; ``clocks``:
    ``"burst"`` (a rested GPU), ``"sustained"`` (at the power limit, as in training) or
    ``"auto"`` (the default: sustained for ``layer`` and ``step`` where the profile gives
    the figure, else burst), as ``--clocks``. A layer or
    step layout that does not fit in its GPUs' memory raises ``ValueError`` unless
    ``allow_oom=True`` (``--allow-oom``); ``Results.scenario["memory"]`` holds the
    memory per GPU. ``causal=False`` is ``--non-causal``, ``passes="fwd"``
    ``--forward-only``; ``ep`` is ``--ep`` and ``routing`` ``--routing-skew`` (a MoE
    model's ``moe`` workload, layers and steps: ``Results.scenario["moe"]`` holds the
    experts per rank, the imbalance and, in layers and steps, the expert data-parallel
    size)."""
    kwargs = dict(
        model=model,
        hardware=hardware,
        workload=workload,
        tp=tp,
        dp=dp,
        ulysses=ulysses,
        pp=pp,
        pp_schedule=pp_schedule,
        rank_order=rank_order,
        ep=ep,
        batch=batch,
        seq=seq,
        micro_batches=micro_batches,
        dtype=dtype,
        transport=transport,
        nodes=nodes,
        interference=interference,
        recompute=recompute,
        zero=zero,
        clocks=clocks,
        causal=causal,
        routing=routing,
        passes=passes,
        sites=sites,
        strategies=list(strategies) if isinstance(strategies, (list, tuple)) else strategies,
    )
    doc = json.loads(
        _core.simulate(scenario, timelines, allow_oom, {k: v for k, v in kwargs.items() if v is not None})
    )
    tl = {k: Timeline(v) for k, v in doc.get("timelines", {}).items()}
    return Results(doc["results"], tl)


class Collective:
    """What ``collective`` returns: one row per size (``size_bytes``, ``count``,
    ``time_us``, ``algbw_GB/s``, ``busbw_GB/s``, ``algorithm``, ``protocol``,
    ``channels``, ``nccl_model_us``, ...) as the command's JSON has them, the mean busbw,
    and ``table``, the nccl-tests table the command prints."""

    def __init__(self, document: Dict[str, Any], table: str):
        self.document = document
        self.rows: List[Dict[str, Any]] = document["rows"]
        self.avg_busbw: float = document["avg_busbw_GB/s"]
        self.table = table

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        d = self.document
        return f"<Collective {d['op']} on {d['ranks']} ranks of {d['hardware']}: {len(self.rows)} sizes, avg busbw {self.avg_busbw} GB/s>"

    def to_pandas(self) -> Any:
        """One row per size."""
        return _pandas().DataFrame(self.rows)


def collective(
    hardware: str = "h100-sxm-8",
    op: str = "all-reduce",
    sizes: str = "1KiB:8GiB",
    *,
    factor: int = 2,
    algorithm: str = "auto",
    protocol: str = "auto",
    channels: Optional[int] = None,
    ranks: Optional[int] = None,
    nodes: Optional[int] = None,
    gpus: Optional[int] = None,
    chunks: Optional[int] = None,
    dtype: str = "fp32",
    symmetry: bool = True,
    stragglers: Sequence[str] = (),
    samples: int = 0,
    seed: int = 0,
    compute_jitter: Optional[float] = None,
    comm_jitter: Optional[float] = None,
    jitter_distribution: Optional[str] = None,
) -> Collective:
    """Simulate one collective over a range of sizes, as ``flashoverlap collective`` does
    (same arguments as its flags; ``sizes`` as nccl-tests takes them, ``MIN:MAX`` or a
    comma-separated list; ``stragglers`` as ``--straggler``, e.g. ``["link:gpu5->gpu6=3"]``;
    ``samples`` jittered runs per size, every rank simulated, give each row a
    ``time_us_jittered`` spread)."""
    doc = json.loads(
        _core.collective(
            hardware, op, sizes, factor, algorithm, protocol, channels, ranks, nodes, gpus, chunks, dtype, symmetry,
            list(stragglers), samples, seed, compute_jitter, comm_jitter, jitter_distribution,
        )
    )
    return Collective(doc["output"], doc["table"])


class Sweep:
    """What ``sweep`` returns: one row per (point, strategy) as the command's
    ``sweep.json`` has them (``point``, ``axes``, ``inputs``, ``strategy``, ``metrics``
    under ``FIGURES``' names, ``error``), the summary it prints, and ``csv``, its
    ``sweep.csv``."""

    def __init__(self, document: Dict[str, Any], csv: str, summary: str):
        self.document = document
        self.rows: List[Dict[str, Any]] = document["rows"]
        self.csv = csv
        self.summary = summary

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return f"<Sweep: {len(self.rows)} rows>"

    def to_pandas(self) -> Any:
        """The rows as ``sweep.csv`` has them (one column per swept field, input and
        figure)."""
        import io

        return _pandas().read_csv(io.StringIO(self.csv))


def sweep(
    scenario: str = "default",
    *,
    grid: Optional[str] = None,
    out: Optional[str] = None,
    threads: int = 0,
    resume: bool = False,
    force: bool = False,
    skip_invalid: bool = False,
    allow_oom: bool = False,
    shard: Optional[str] = None,
    group_by: Optional[Sequence[str]] = None,
    rank_by: Optional[str] = None,
    **axes: Any,
) -> Sweep:
    """Simulate a grid of scenario points, as ``flashoverlap sweep`` does: each keyword
    in ``axes`` is a field (``tp``, ``seq``, ``strategy``, ``hardware``, or any scenario
    key as ``parallel__sp`` for ``parallel.sp``) with a value or a list of values, in
    the command's forms (``seq=["1k", "4k..16k*2"]``, ``strategy="sequential,chunked:2..8*2"``).
    ``grid`` reads a sweep file; ``out`` writes the command's files there (and
    ``resume`` continues an interrupted sweep in it). ``rank_by`` names the figure the
    summary ranks by (default makespan, or tokens/s where a group mixes global
    batches)."""
    fields = {k.replace("__", "."): v for k, v in axes.items()}
    doc = json.loads(
        _core.sweep(
            scenario,
            None if grid is None else str(grid),
            None if out is None else str(out),
            threads,
            resume,
            force,
            skip_invalid,
            allow_oom,
            shard,
            None if group_by is None else list(group_by),
            fields,
            rank_by,
        )
    )
    return Sweep(doc["sweep"], doc["csv"], doc["summary"])


class Search:
    """What ``search`` returns: the layouts it simulated, best first, as the command's
    ``search.json`` has them (``rank``, ``tp``, ``pp``, ``dp``, ``ulysses``, ``ep``,
    ``micro_batch``, ``micro_batches``, ``schedule``, ``recompute``, ``zero``,
    ``strategy``, ``memory_gib``, ``extrapolated``, ``screened`` and ``exact`` figures
    under ``FIGURES``' names); ``counts``, what it considered and left out and why;
    ``summary``, the table it prints; ``csv``, its ``search.csv``."""

    def __init__(self, document: Dict[str, Any], csv: str, summary: str):
        self.document = document
        self.rows: List[Dict[str, Any]] = document["rows"]
        self.counts: Dict[str, Any] = document["counts"]
        self.csv = csv
        self.summary = summary

    @property
    def best(self) -> Optional[Dict[str, Any]]:
        """The first row (``None`` when nothing could be ranked)."""
        return self.rows[0] if self.rows else None

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __repr__(self) -> str:
        return f"<Search: {len(self.rows)} rows of {self.counts['layouts']} layouts>"

    def to_pandas(self) -> Any:
        """The rows as ``search.csv`` has them (the layout, then each figure: exact
        where simulated whole, else screened)."""
        import io

        return _pandas().read_csv(io.StringIO(self.csv))


def search(
    global_batch: int,
    scenario: str = "default",
    *,
    tp: Optional[Sequence[int]] = None,
    pp: Optional[Sequence[int]] = None,
    max_pp: int = 16,
    ulysses: Sequence[int] = (1,),
    ep: Optional[Sequence[int]] = None,
    micro_batch: Sequence[int] = (1, 2, 4),
    pp_schedule: Optional[Sequence[str]] = None,
    recompute: Optional[Sequence[str]] = None,
    zero: Sequence[int] = (1, 3),
    rank_order: str = "tp-pp-dp",
    strategies: Optional[Union[str, Sequence[str]]] = None,
    rank_by: str = "tokens_per_s",
    dp_strategy: Optional[Sequence[str]] = None,
    exact: bool = False,
    verify: int = 5,
    prune: bool = True,
    top: int = 10,
    threads: int = 0,
    shard: Optional[str] = None,
    max_events: Optional[int] = None,
    out: Optional[str] = None,
    force: bool = False,
    dry_run: bool = False,
    **fields: Any,
) -> Search:
    """Rank the layouts of a model on a machine for ``global_batch`` sequences per step,
    as ``flashoverlap search`` does: ``fields`` set the base scenario (``model``,
    ``hardware``, ``nodes``, ``seq``, any scenario key as ``parallel__sp``), one value
    each; ``tp``, ``pp``, ``ulysses``, ``ep`` (a MoE model's expert-parallel degrees;
    default the powers of two dividing its experts), ``micro_batch``, ``pp_schedule`` (``"1f1b"``,
    ``"interleaved:V"``, ``"gpipe"``; default 1f1b and interleaved:2), ``recompute``
    (default none and full), ``zero`` and ``dp_strategy`` (the data-parallel site's
    strategies: ``sequential``, ``bulk``, ``flash``) bound the layouts tried;
    ``prune=False`` simulates every layout, even those whose compute alone is slower
    than the best rows' steps. ``out`` writes the command's files there; ``dry_run``
    lists the layouts without simulating them (in ``summary``)."""
    kwargs: Dict[str, Any] = {}
    if max_events is not None:
        kwargs["max_events"] = max_events
    doc = json.loads(
        _core.search(
            global_batch,
            scenario,
            fields=fields,
            tp=None if tp is None else list(tp),
            pp=None if pp is None else list(pp),
            max_pp=max_pp,
            ulysses=list(ulysses),
            ep=None if ep is None else list(ep),
            micro_batch=list(micro_batch),
            pp_schedule=None if pp_schedule is None else list(pp_schedule),
            recompute=None if recompute is None else list(recompute),
            zero=list(zero),
            rank_order=rank_order,
            strategies=strategies,
            rank_by=rank_by,
            dp_strategy=None if dp_strategy is None else list(dp_strategy),
            exact=exact,
            verify=verify,
            prune=prune,
            top=top,
            threads=threads,
            shard=shard,
            out=None if out is None else str(out),
            force=force,
            dry_run=dry_run,
            **kwargs,
        )
    )
    return Search(doc["search"], doc["csv"], doc["summary"])


class PlanResults:
    """What ``simulate_plan`` returns: ``results`` (the command's JSON as a dict:
    ``makespan_us``, ``compute_us``, ``streams`` with each stream's span and busy time,
    ...), and the plan's ``timeline``."""

    def __init__(self, results: Dict[str, Any], timeline: Timeline):
        self.results = results
        self.timeline = timeline
        self.makespan_us: float = results["makespan_us"]
        self.streams: List[Dict[str, Any]] = results["streams"]

    def __repr__(self) -> str:
        return f"<PlanResults {self.results['plan']}: {self.makespan_us:.1f} us>"

    def to_pandas(self) -> Any:
        """Each stream's row (rank, stream, ops, first start, last end, busy time)."""
        import pandas as pd

        return pd.DataFrame(self.streams)


def simulate_plan(
    path: str,
    scenario: str = "default",
    *,
    hardware: Optional[str] = None,
    nodes: Optional[int] = None,
    transport: Optional[str] = None,
    interference: Optional[bool] = None,
    clocks: Optional[str] = None,
) -> PlanResults:
    """Simulate a plan file of your own (``simulate --plan``: TOML or JSON, see the
    README's "Plans of your own") on the hardware of ``scenario``, with the keyword
    arguments as the command's flags."""
    kwargs = dict(hardware=hardware, nodes=nodes, transport=transport, interference=interference, clocks=clocks)
    doc = json.loads(_core.simulate_plan(str(path), scenario, {k: v for k, v in kwargs.items() if v is not None}))
    return PlanResults(doc["results"], Timeline(doc["timeline"]))


def load_timeline(path: str) -> Timeline:
    """Read a timeline file (``timeline-<strategy>.json`` of ``simulate --out``, or the
    ``measured-<strategy>.json`` and ``predicted-<strategy>.json`` of ``run --out``),
    checked as ``plot`` and ``validate`` read it."""
    return Timeline(json.loads(_core.load_timeline(str(path))))


class Validation:
    """What ``validate`` returns: ``cases``, one comparison per (run directory, strategy)
    as the command's JSON has them (``case``, ``strategy``, ``predicted_makespan_us``,
    ``measured_makespan_us``, ``makespan_error_pct``, ``classes`` per op class, ...),
    ``summary``, ``table`` (what the command prints), ``skipped`` (directories whose
    ranks shared GPUs, with why) and, when predicted again on another profile,
    ``predictions``: ``{"<case>/predicted-<strategy>.json": Timeline}``."""

    def __init__(self, doc: Dict[str, Any]):
        self.document: Dict[str, Any] = doc["validation"]
        self.cases: List[Dict[str, Any]] = self.document["cases"]
        self.summary: Dict[str, Any] = self.document["summary"]
        self.table: str = doc["table"]
        self.skipped: List[List[str]] = doc["skipped"]
        self.predictions: Dict[str, Timeline] = {k: Timeline(v) for k, v in doc["predictions"].items()}

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        return iter(self.cases)

    def __len__(self) -> int:
        return len(self.cases)

    def __repr__(self) -> str:
        return f"<Validation: {len(self.cases)} comparisons>"

    def to_pandas(self) -> Any:
        """One row per comparison: its scalar fields (the per-class rows left out)."""
        rows = [{k: v for k, v in c.items() if not isinstance(v, (list, dict))} for c in self.cases]
        return _pandas().DataFrame(rows)


def validate(dirs: Union[str, Sequence[str]], hardware: Optional[str] = None, interference: bool = True) -> Validation:
    """Compare predicted with measured timelines of ``flashoverlap run --out`` directories,
    as ``flashoverlap validate`` does (no GPU needed). With ``hardware`` (a preset or a
    profile file) the plans are rebuilt from each ``run.json`` and predicted again on it,
    with or without the ``interference`` model; otherwise the predictions saved beside
    the measurements are compared."""
    if isinstance(dirs, (str, bytes)) or hasattr(dirs, "__fspath__"):
        dirs = [dirs]  # type: ignore[list-item]
    return Validation(json.loads(_core.validate([str(d) for d in dirs], hardware, interference)))


def presets(kind: Optional[str] = None) -> List[Dict[str, str]]:
    """The embedded presets as ``{"kind": ..., "name": ...}`` (kind: model, hardware,
    scenario); only those of ``kind`` when given."""
    out = [{"kind": k, "name": n} for k, n in _core.presets()]
    return [p for p in out if kind is None or p["kind"] == kind]


def arguments() -> List[str]:
    """The keyword arguments ``simulate`` accepts besides ``scenario`` and ``timelines``."""
    return list(_core.arguments())
