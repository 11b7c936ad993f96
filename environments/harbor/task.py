"""Harbor task directories: find them, read them, and write them.

A task directory holds ``instruction.md`` (what the agent is asked), ``task.toml`` (timeouts,
resources, metadata), ``environment/`` (a ``Dockerfile`` and the files it copies), ``tests/test.sh``
(the verifier: it writes the reward to ``/logs/verifier/reward.txt`` or ``reward.json``) and,
optionally, ``solution/solve.sh`` (the oracle). ``find_tasks(PATH)`` searches as deep as Harbor
does: ``PATH`` is one task when it holds ``task.toml``; otherwise each direct subdirectory that
holds ``task.toml`` or ``instruction.md`` is a task (the task's name is its directory's name).
Other subdirectories are skipped, as Harbor skips them.

What is read from ``task.toml`` (Harbor's field names and defaults; unknown keys are ignored, as
Harbor ignores them): ``[agent] timeout_sec`` (600), ``[verifier] timeout_sec`` (600) and ``env``,
``[solution] env``, ``[environment] build_timeout_sec`` (600), ``cpus`` (1), ``memory_mb`` (2048;
or the older ``memory = "2G"``), ``storage_mb`` (10240; or ``storage = "10G"``), ``allow_internet``,
``docker_image`` (a prebuilt image instead of ``environment/Dockerfile``), ``gpus`` (only 0 runs
here), ``[task] name``/``description`` and ``[metadata]`` (kept as metadata). One key is ours:
``[verifier] reward_range = [LOW, HIGH]``, the rewards the verifier may write (default [-1, 1]; a
reward outside it fails the sample loudly, see :mod:`sandbox.workspace.grading`). A task that cannot
run is reported in one line naming the file and the fix (:class:`TaskError`), never half-loaded.
"""

from __future__ import annotations

import math
import re
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TASK_FILE, INSTRUCTION_FILE = "task.toml", "instruction.md"
DEFAULTS = {"agent_timeout_s": 600.0, "verifier_timeout_s": 600.0, "build_timeout_s": 600.0, "cpus": 1.0,
            "memory_mb": 2048, "storage_mb": 10240}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*$", re.IGNORECASE)


class TaskError(ValueError):
    """A task directory that cannot run (one line: the task, the file, the fix)."""


@dataclass(frozen=True)
class HarborTask:
    """One task directory, read and checked (paths are absolute)."""

    name: str
    path: Path
    instruction: str
    agent_timeout_s: float = DEFAULTS["agent_timeout_s"]
    verifier_timeout_s: float = DEFAULTS["verifier_timeout_s"]
    build_timeout_s: float = DEFAULTS["build_timeout_s"]
    cpus: float = DEFAULTS["cpus"]
    memory_mb: int = DEFAULTS["memory_mb"]
    storage_mb: int = DEFAULTS["storage_mb"]
    allow_internet: bool = True
    """What the task asks for (Harbor's default: on); the env keeps it off unless a user allows it."""
    docker_image: str | None = None
    dockerfile: str = ""
    """The text of ``environment/Dockerfile`` (``FROM docker_image`` when the task names only an image)."""
    verifier_env: dict[str, str] = field(default_factory=dict)
    reward_range: tuple[float, float] = (-1.0, 1.0)
    """``[verifier] reward_range``: a reward outside it is a verifier failure, not a reward."""
    solution_env: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @property
    def has_solution(self) -> bool:
        return (self.solution_dir / "solve.sh").is_file()


def find_tasks(path: str | Path) -> tuple[list[HarborTask], list[tuple[str, str]]]:
    """(the tasks under ``path``, (name, one-line error) of each malformed one); see the module docstring.
    A ``path`` that does not exist or holds no task at all is a :class:`TaskError`."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise TaskError(f"{path}: no such directory (give a Harbor task directory or a folder of them)")
    candidates = [root] if (root / TASK_FILE).is_file() else sorted(
        d for d in root.iterdir() if d.is_dir() and not d.name.startswith(".")
        and ((d / TASK_FILE).is_file() or (d / INSTRUCTION_FILE).is_file()))
    if not candidates and (root / INSTRUCTION_FILE).is_file():
        candidates = [root]  # a task that lacks task.toml: say so below
    if not candidates:
        raise TaskError(f"{path}: no Harbor task here (a task directory holds {TASK_FILE}, {INSTRUCTION_FILE}, "
                        f"environment/ and tests/test.sh; a folder of tasks holds one per subdirectory)")
    tasks, problems = [], []
    for d in candidates:
        try:
            tasks.append(load_task(d))
        except TaskError as e:
            problems.append((d.resolve().name, str(e)))
    return tasks, problems


def load_task(path: str | Path) -> HarborTask:
    """Read and check one task directory (a :class:`TaskError` says what is wrong with it)."""
    d = Path(path).expanduser().resolve()
    name = d.name
    if not (d / TASK_FILE).is_file():
        raise TaskError(f"{name}: no {TASK_FILE} (Harbor needs it, even if it only sets [agent] timeout_sec)")
    try:
        config = tomllib.loads((d / TASK_FILE).read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise TaskError(f"{name}: {TASK_FILE} is not valid TOML ({e})") from None
    instruction = _read(d / INSTRUCTION_FILE, name)
    if not instruction.strip():
        raise TaskError(f"{name}: {INSTRUCTION_FILE} is empty (it is what the agent is asked to do)")
    if not (d / "tests" / "test.sh").is_file():
        raise TaskError(f"{name}: no tests/test.sh (the verifier, which writes /logs/verifier/reward.txt)")
    if config.get("steps"):
        raise TaskError(f"{name}: multi-step tasks ([[steps]] in {TASK_FILE}) are not supported")
    agent, verifier = _table(config, "agent", name), _table(config, "verifier", name)
    env, solution = _table(config, "environment", name), _table(config, "solution", name)
    image = env.get("docker_image") or None
    dockerfile = _dockerfile(d, name, image)
    if _number(env, "gpus", 0, name, allow_zero=True):
        raise TaskError(f"{name}: [environment] gpus = {env['gpus']}: workspaces have no GPUs")
    if str(env.get("os", "linux")).lower() != "linux":
        raise TaskError(f"{name}: [environment] os = {env['os']!r}: only linux tasks run here")
    meta = dict(_table(config, "metadata", name))
    meta.update({k: v for k, v in _table(config, "task", name).items() if k in ("name", "description", "keywords")})
    return HarborTask(
        name=name, path=d, instruction=instruction,
        agent_timeout_s=_number(agent, "timeout_sec", DEFAULTS["agent_timeout_s"], name, "agent"),
        verifier_timeout_s=_number(verifier, "timeout_sec", DEFAULTS["verifier_timeout_s"], name, "verifier"),
        build_timeout_s=_number(env, "build_timeout_sec", DEFAULTS["build_timeout_s"], name),
        cpus=_number(env, "cpus", DEFAULTS["cpus"], name),
        memory_mb=int(_size(env, "memory_mb", "memory", DEFAULTS["memory_mb"], name)),
        storage_mb=int(_size(env, "storage_mb", "storage", DEFAULTS["storage_mb"], name)),
        allow_internet=bool(env.get("allow_internet", True)), docker_image=image, dockerfile=dockerfile,
        verifier_env=_env(verifier, name, "verifier"), reward_range=_range(verifier, name), solution_env=_env(solution, name, "solution"), metadata=meta)


def _read(path: Path, name: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TaskError(f"{name}: no {path.name}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise TaskError(f"{name}: cannot read {path.name} ({e})") from None


def _dockerfile(d: Path, name: str, image: str | None) -> str:
    path = d / "environment" / "Dockerfile"
    if path.is_file():
        return _read(path, name)
    if image:
        return f"FROM {image}\n"
    if (d / "environment" / "docker-compose.yaml").is_file() or (d / "environment" / "docker-compose.yml").is_file():
        raise TaskError(f"{name}: environment/docker-compose.yaml without a Dockerfile: compose environments are "
                        f"not supported (give environment/Dockerfile)")
    raise TaskError(f"{name}: no environment/Dockerfile and no [environment] docker_image in {TASK_FILE}")


def _table(config: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    value = config.get(key, {})
    if not isinstance(value, dict):
        raise TaskError(f"{name}: {TASK_FILE}: {key} must be a table ([{key}])")
    return value


def _number(table: dict[str, Any], key: str, default: float, name: str, section: str = "environment",
            allow_zero: bool = False) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or (value == 0 and not allow_zero):
        raise TaskError(f"{name}: {TASK_FILE}: [{section}] {key} must be a positive number, got {value!r}")
    return float(value)


def _size(table: dict[str, Any], key: str, old_key: str, default: int, name: str) -> float:
    """``memory_mb``/``storage_mb``, or the older ``memory = "2G"``/``storage = "10G"`` in MB."""
    if key in table or old_key not in table:
        return _number(table, key, default, name)
    m = _SIZE.match(str(table[old_key]))
    if not m:
        raise TaskError(f"{name}: {TASK_FILE}: [environment] {old_key} = {table[old_key]!r} is not a size like "
                        f"\"2G\" or \"512M\" (or give {key})")
    scale = {"": 1 / (1 << 20), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20}[m.group(2).upper()]
    return max(1.0, float(m.group(1)) * scale)


def _range(table: dict[str, Any], name: str) -> tuple[float, float]:
    value = table.get("reward_range", [-1.0, 1.0])
    ok = isinstance(value, list) and len(value) == 2 and all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value)
    if not ok or value[0] >= value[1]:
        raise TaskError(f"{name}: {TASK_FILE}: [verifier] reward_range must be [LOW, HIGH], two finite numbers "
                        f"with LOW < HIGH, got {value!r}")
    return float(value[0]), float(value[1])


def _env(table: dict[str, Any], name: str, section: str) -> dict[str, str]:
    env = table.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str | int | float | bool) for v in env.values()):
        raise TaskError(f"{name}: {TASK_FILE}: [{section}] env must be a table of strings")
    return {str(k): str(v) for k, v in env.items()}


def write_task(out: str | Path, instruction: str, task_toml: str, environment: dict[str, str | bytes],
               tests: dict[str, str | bytes], solution: dict[str, str | bytes] | None = None) -> Path:
    """Write a task directory (``environment``, ``tests`` and ``solution`` map relative paths to
    contents; ``.sh`` files are made executable); returns its path. Generators export through this."""
    d = Path(out)
    if d.exists() and any(d.iterdir()):
        raise FileExistsError(f"{d} exists and is not empty")
    parts = {"environment": environment, "tests": tests, "solution": solution or {}}
    files = {INSTRUCTION_FILE: instruction, TASK_FILE: task_toml}
    files.update({f"{part}/{rel}": data for part, tree in parts.items() for rel, data in tree.items()})
    for rel, data in files.items():
        path = d / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        if path.suffix == ".sh":
            path.chmod(0o755)
    return d


def copy_task(task: HarborTask, out: str | Path) -> Path:
    """Copy a task directory to ``out`` (which must not exist yet)."""
    return Path(shutil.copytree(task.path, out, symlinks=True))
