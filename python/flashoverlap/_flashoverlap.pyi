"""Type stubs of the compiled module (JSON text in, JSON text out; see __init__.py)."""

from typing import Any, Dict, List, Optional, Tuple

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
) -> str: ...
def presets() -> List[Tuple[str, str]]: ...
def figures() -> List[str]: ...
def arguments() -> List[str]: ...
