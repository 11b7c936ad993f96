"""The rollout worker process's protocol: whatever ends the child — any exception, one that does not
pickle or unpickle, ``SystemExit``, a batch that cannot travel, a signal, ``os._exit`` — reaches the
learner as an error within a bounded time, with the child's traceback text where there is one;
never a hang. Real forked processes, no engine needed (the child's ``produce`` raises before any)."""

from __future__ import annotations

import os
import random
import signal
import threading
from typing import Any

import pytest
import torch

from agentrl.rollout.async_rollout import RolloutBatch, VersionedEngine
from agentrl.rollout.worker_process import ProcessRolloutWorker, RolloutProcessError

BOUND_S = 30.0  # generous: a fork and one error take milliseconds, but the machine may be loaded


class RewardServerError(Exception):
    """The reviewer's case: pickles (args = the formatted message) but does not unpickle (two arguments)."""

    def __init__(self, status: int, url: str) -> None:
        super().__init__(f"reward server {url} answered {status}")


class HoldsALock(Exception):
    def __init__(self, msg: str) -> None:
        super().__init__(msg)
        self.lock = threading.Lock()  # does not pickle


class Unloadable:
    """Pickles, but its reconstruction raises in the learner."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_refuse, ())


def _refuse() -> None:
    raise TypeError("cannot be rebuilt here")


def _outcome(produce: Any) -> tuple[BaseException | None, str, ProcessRolloutWorker]:
    """Run ``produce`` in a worker process; (the error ``next`` raised, its full text, the worker)."""
    # max_staleness 4: the child makes its batches without waiting for new weights
    worker = ProcessRolloutWorker(produce, VersionedEngine(object()), 4, weights=torch.nn.Linear(2, 2).named_parameters)
    box: dict[str, BaseException] = {}

    def learner() -> None:
        try:
            for v in range(4):  # good batches first, then the failure
                worker.next(v)
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            box["error"] = e

    t = threading.Thread(target=learner, daemon=True)
    t.start()
    t.join(BOUND_S)
    hung = t.is_alive()
    worker.close()
    assert not hung, f"the learner waited more than {BOUND_S} s for a batch (a hang)"
    err = box.get("error")
    text = "" if err is None else f"{err}\n" + "\n".join(getattr(err, "__notes__", []))
    return err, text, worker


def _failing(after: int, fail: Any) -> Any:
    """A ``produce`` that makes ``after`` good batches, then calls ``fail()``."""
    made = [0]

    def produce() -> RolloutBatch:
        if made[0] >= after:
            fail()
        made[0] += 1
        return RolloutBatch([], ["one sample"], {"made": float(made[0])})

    return produce


def _raise(e: BaseException) -> Any:
    def fail() -> None:
        raise e
    return fail


CASES: dict[str, tuple[Any, type[BaseException], str]] = {
    # name: (fail, the class the learner raises, text the error must hold)
    "plain": (_raise(ValueError("bad task 7")), ValueError, "bad task 7"),
    "does_not_unpickle": (_raise(RewardServerError(503, "http://127.0.0.1:9/score")), RolloutProcessError,
                          "RewardServerError: reward server http://127.0.0.1:9/score answered 503"),
    "unpicklable_attribute": (_raise(HoldsALock("locked out")), RolloutProcessError, "HoldsALock: locked out"),
    "system_exit": (_raise(SystemExit(3)), RolloutProcessError, "SystemExit: 3"),
    "keyboard_interrupt": (_raise(KeyboardInterrupt()), RolloutProcessError, "KeyboardInterrupt"),
    "sigkill": (lambda: os.kill(os.getpid(), signal.SIGKILL), RuntimeError, "killed by SIGKILL"),
    "sigsegv": (lambda: os.kill(os.getpid(), signal.SIGSEGV), RuntimeError, "killed by SIGSEGV"),
    "os_exit": (lambda: os._exit(7), RuntimeError, "exit code 7"),
}


@pytest.mark.parametrize("after", [0, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_way_the_child_ends_reaches_the_learner(case, after):
    fail, cls, needle = CASES[case]
    err, text, worker = _outcome(_failing(after, fail))
    assert isinstance(err, cls), (case, err)
    assert needle in text, text
    if cls is not RuntimeError:  # an exception: the child's traceback, with the file and line
        assert "Traceback" in text and "test_worker_protocol.py" in text and "in fail" in text, text
    assert not worker._proc.is_alive()


@pytest.mark.parametrize("payload", ["unpicklable", "unloadable"])
def test_a_batch_that_cannot_travel_is_an_error(payload):
    """A batch holding something that does not pickle (a lock) fails in the child with its traceback;
    one that pickles but cannot be rebuilt fails in the learner's receiver, naming why."""
    value = threading.Lock() if payload == "unpicklable" else Unloadable()
    made = [0]

    def produce() -> RolloutBatch:
        made[0] += 1
        return RolloutBatch([], [], {"made": float(made[0])} if made[0] == 1 else {"bad": value})

    err, text, _ = _outcome(produce)
    assert isinstance(err, TypeError if payload == "unpicklable" else RolloutProcessError), err
    assert ("cannot pickle" in text and "Traceback" in text) if payload == "unpicklable" else \
        "could not unpickle: TypeError: cannot be rebuilt here" in text, text


def _random_exception(rng: random.Random, k: int) -> BaseException:
    """An exception of a class made up here: 0-3 required arguments, a formatted message, maybe an
    unpicklable attribute, maybe not findable by name (a class pickle cannot look up)."""
    n_args = rng.randint(0, 3)
    base = rng.choice([Exception, ValueError, RuntimeError, OSError, KeyError])
    unpicklable = rng.random() < 0.3

    def __init__(self: Any, *args: Any) -> None:  # noqa: N807
        base.__init__(self, f"case {k}: " + "/".join(map(str, args)))
        if unpicklable:
            self.handle = threading.Lock()

    cls = type(f"Made{k}", (base,), {"__init__": __init__})
    if rng.random() < 0.5:  # findable by pickle under this module's name
        cls.__module__ = __name__
        globals()[cls.__name__] = cls
    return cls(*range(n_args))


@pytest.mark.parametrize("seed", range(6))
def test_random_exception_classes_never_hang_the_learner(seed):
    rng = random.Random(seed)
    e = _random_exception(rng, seed)
    err, text, _ = _outcome(_failing(rng.randint(0, 2), _raise(e)))
    assert isinstance(err, Exception), err
    assert f"case {seed}" in text and "Traceback" in text, text
