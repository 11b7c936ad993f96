"""Where dataset environments get their records: shipped files, local files, or the Hugging Face hub.

``load_records(source, split)`` returns a list of dicts:

- ``source=None`` is handled by each env (its shipped file under ``environments/data/``, see
  :func:`shipped`);
- a local path (``.jsonl``, ``.jsonl.gz``, ``.json`` — a list or ``{"data": [...]}`` — or
  ``.parquet``); ``{split}`` in the path is replaced by the split name
  (``data/{split}.jsonl``);
- anything else is a hub dataset name read with ``datasets.load_dataset(name, subset,
  split=split)``. ``datasets`` is optional and imported only here; ``.parquet`` needs ``pyarrow``.

A malformed JSONL row (not JSON, not an object, not UTF-8) or a truncated ``.jsonl.gz`` tail is
skipped with a warning that counts them; ``strict=True`` makes it an error naming the line.
"""

from __future__ import annotations

import gzip
import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from agentrl.env import EnvError, TextEnv
from agentrl.types import Task

log = logging.getLogger(__name__)
DATA_DIR = Path(__file__).resolve().parent / "data"
FILE_SUFFIXES = (".jsonl", ".jsonl.gz", ".json", ".parquet")


def shipped(name: str) -> Path:
    """Path of a data file shipped with the package (``environments/data/<name>``)."""
    path = DATA_DIR / name
    if not path.exists():
        raise FileNotFoundError(f"shipped data file {name!r} is missing from {DATA_DIR}; "
                                "reinstall agentrl (package-data environments/data/*)")
    return path


def _lines(f: Iterable[bytes]) -> Iterator[bytes | None]:
    """Lines of a binary file; a truncated gzip stream ends with one ``None`` instead of raising."""
    try:
        yield from f
    except EOFError:  # "Compressed file ended before the end-of-stream marker was reached"
        yield None


def jsonl_records(lines: Iterable[bytes | None], where: str, strict: bool = False) -> list[dict[str, Any]]:
    """JSON objects, one a line; malformed lines are skipped with a counted warning (or raise if strict)."""
    rows: list[dict[str, Any]] = []
    bad: list[int] = []
    for n, raw in enumerate(lines, 1):
        try:
            if raw is None:
                raise ValueError("the compressed file is truncated")
            if not raw.strip():
                continue
            row = json.loads(raw.decode("utf-8"))
            if not isinstance(row, dict):
                raise ValueError(f"expected a JSON object, got {type(row).__name__}")
        except ValueError as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            if strict:
                raise ValueError(f"{where}, line {n}: malformed row: {e}") from None
            bad.append(n)
            continue
        rows.append(row)
    if bad:
        log.warning("%s: skipped %d malformed row(s) of %d (lines %s)", where, len(bad), len(rows) + len(bad),
                    ", ".join(map(str, bad[:10])) + (", ..." if len(bad) > 10 else ""))
    return rows


def read_records(path: str | Path, strict: bool = False) -> list[dict[str, Any]]:
    """Records of a local ``.jsonl``/``.jsonl.gz``/``.json``/``.parquet`` file (see the module docstring)."""
    p = Path(path)
    name = p.name.lower()
    if not p.exists():
        raise FileNotFoundError(f"dataset file {str(p)!r} does not exist")
    if name.endswith(".jsonl.gz"):
        with gzip.open(p, "rb") as f:
            return jsonl_records(_lines(f), str(p), strict)
    if name.endswith(".jsonl"):
        with open(p, "rb") as f:
            return jsonl_records(f, str(p), strict)
    if name.endswith(".json"):
        data = json.loads(p.read_text(encoding="utf-8"))
        data = data.get("data", data) if isinstance(data, dict) else data
        if not isinstance(data, list):
            raise ValueError(f"{p}: expected a JSON list of records (or {{'data': [...]}})")
        return data
    if name.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq
        except ImportError as e:
            raise ImportError(f"reading {p} needs pyarrow (pip install pyarrow), or convert it to .jsonl") from e
        return pq.read_table(p).to_pylist()
    raise ValueError(f"unsupported dataset file {str(p)!r}; expected one of {', '.join(FILE_SUFFIXES)}")


def is_local(source: str) -> bool:
    """True when ``source`` names a local file (it exists, or ends like a data file)."""
    return Path(source).exists() or source.lower().endswith(FILE_SUFFIXES)


def load_records(source: str, split: str, subset: str | None = None, strict: bool = False
                 ) -> list[dict[str, Any]]:
    """Records of ``split`` from a local file or a hub dataset (see the module docstring)."""
    path = source.replace("{split}", split)
    if is_local(path):
        return read_records(path, strict)
    try:
        import datasets
    except ImportError as e:
        raise ImportError(f"dataset {source!r} is not a local file, and loading it from the Hugging Face hub "
                          "needs the 'datasets' package (pip install datasets)") from e
    ds = datasets.load_dataset(source, subset, split=split)
    return [dict(r) for r in ds]


class DatasetEnv(TextEnv):
    """A ``TextEnv`` over a fixed list of tasks (``self.tasks``).

    The trainer walks ``self.tasks`` in shuffled epochs and evaluation takes a fixed subset of it;
    :meth:`sample_task` draws one uniformly with the env's ``np_random`` (same seed, same task).
    Subclasses fill ``self.tasks`` in ``__init__`` (``limit`` keeps the first N).
    """

    tasks: list[Task]

    def set_tasks(self, tasks: list[Task], limit: int | None = None) -> None:
        """Install the dataset (the first ``limit`` tasks when given); an empty one is an error."""
        tasks = tasks[:limit] if limit is not None else tasks
        if not tasks:
            raise ValueError(f"{type(self).__name__}: the dataset is empty")
        self.tasks = tasks

    def sample_task(self, rng: np.random.Generator) -> Task:
        return self.tasks[int(rng.integers(len(self.tasks)))]


def check_split(env_name: str, split: str, valid: tuple[str, ...]) -> None:
    """Raise a clear error for a split the env does not have."""
    if split not in valid:
        hint = ""
        if valid == ("test",):
            hint = (f"; {env_name} is a test-only benchmark: train on another env (e.g. agentrl/GSM8K-v0, or "
                    f"dataset=<your train file>) and evaluate here")
        raise ValueError(f"{env_name} has no split {split!r}; valid: {', '.join(valid)}{hint}")


def load_user_object(spec: str, family: str) -> Any:
    """The class or function ``module:attr`` / ``FILE.py:attr`` an adapter's env id names; a missing
    file, module or attribute is an :class:`~agentrl.env.EnvError` in one line."""
    from rewards.registry import load_object

    try:
        return load_object(spec)
    except (ImportError, AttributeError, ValueError) as e:
        raise EnvError(f"{family}:{spec}: {e}") from None


def reward_by_name(name: str, family: str) -> Any:
    """The reward function ``env.kwargs.reward`` names, resolved when the env is made (an unknown name is
    an :class:`~agentrl.env.EnvError` at load time, not a failure of every episode)."""
    from rewards.registry import get_reward

    try:
        return get_reward(name)
    except (KeyError, TypeError) as e:
        raise EnvError(f"{family} env: env.kwargs.reward: {e.args[0] if e.args else e}") from None
