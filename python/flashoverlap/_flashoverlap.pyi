"""Type stubs of the compiled module (JSON text in, JSON text out; see __init__.py)."""

from typing import Any, Dict, List, Optional, Tuple, Union

__version__: str

def simulate(
    scenario: str = ...,
    timelines: bool = ...,
    clocks: str = ...,
    allow_oom: bool = ...,
    kwargs: Optional[Dict[str, Any]] = ...,
) -> str: ...
def load_timeline(path: str) -> str: ...
def validate(dirs: List[str], hardware: Optional[str] = ..., interference: bool = ...) -> str: ...
def collective(
    hardware: str = ...,
    op: str = ...,
    sizes: str = ...,
    factor: int = ...,
    algorithm: str = ...,
    protocol: str = ...,
    channels: Optional[int] = ...,
    ranks: Optional[int] = ...,
    nodes: Optional[int] = ...,
    gpus: Optional[int] = ...,
    chunks: Optional[int] = ...,
    dtype: str = ...,
    symmetry: bool = ...,
) -> str: ...
def sweep(
    scenario: str = ...,
    grid: Optional[str] = ...,
    out: Optional[str] = ...,
    threads: int = ...,
    resume: bool = ...,
    force: bool = ...,
    skip_invalid: bool = ...,
    allow_oom: bool = ...,
    shard: Optional[str] = ...,
    group_by: Optional[List[str]] = ...,
    axes: Optional[Dict[str, Any]] = ...,
    rank_by: Optional[str] = ...,
) -> str: ...
def search(
    global_batch: int,
    scenario: str = ...,
    fields: Optional[Dict[str, Any]] = ...,
    tp: Optional[List[int]] = ...,
    pp: Optional[List[int]] = ...,
    max_pp: int = ...,
    ulysses: List[int] = ...,
    micro_batch: List[int] = ...,
    pp_schedule: Optional[List[str]] = ...,
    recompute: Optional[List[str]] = ...,
    zero: List[int] = ...,
    rank_order: str = ...,
    strategies: Optional[Union[str, List[str]]] = ...,
    rank_by: str = ...,
    dp_strategy: Optional[List[str]] = ...,
    exact: bool = ...,
    verify: int = ...,
    top: int = ...,
    threads: int = ...,
    shard: Optional[str] = ...,
    max_events: int = ...,
    out: Optional[str] = ...,
    force: bool = ...,
    dry_run: bool = ...,
) -> str: ...
def presets() -> List[Tuple[str, str]]: ...
def figures() -> List[str]: ...
def arguments() -> List[str]: ...
