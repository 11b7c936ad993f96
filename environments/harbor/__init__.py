"""Harbor task directories (``instruction.md``, ``task.toml``, ``environment/``, ``tests/test.sh``,
``solution/solve.sh``): the loader (:mod:`.task`) and the ``harbor:PATH`` env family (:mod:`.env`)."""

from environments.harbor.env import HarborEnv, make_env
from environments.harbor.task import HarborTask, TaskError, find_tasks, load_task, write_task

__all__ = ["HarborEnv", "HarborTask", "TaskError", "find_tasks", "load_task", "make_env", "write_task"]
