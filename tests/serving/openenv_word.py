"""An OpenEnv environment written as openenv-core's docs show (models, an ``Environment`` subclass,
``create_app``): reset picks a word by seed, the action is a message, the reward is 1.0 when the
message repeats the word exactly (0.5 when it contains it). Served by uvicorn as ``openenv_word:app``."""

from uuid import uuid4

from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from pydantic import Field

WORDS = ["apple", "river", "stone", "cloud", "maple", "tiger", "amber", "lemon"]


class WordAction(Action):
    """The agent's message."""

    message: str = Field(..., description="The word, repeated")


class WordObservation(Observation):
    """What the agent sees: the instruction, and after a step what it said."""

    instruction: str = Field(default="", description="What to do")
    said: str = Field(default="", description="The agent's last message")


class WordEnvironment(Environment):
    """Repeat a word. One step per episode."""

    SUPPORTS_CONCURRENT_SESSIONS: bool = True

    def __init__(self):
        self._state = State(episode_id=str(uuid4()), step_count=0)
        self._word = WORDS[0]

    def reset(self, seed=None, episode_id=None, **kwargs) -> WordObservation:
        self._state = State(episode_id=episode_id or str(uuid4()), step_count=0)
        self._word = WORDS[(seed or 0) % len(WORDS)]
        return WordObservation(instruction=f"Repeat the word: {self._word}", done=False, reward=0.0)

    def step(self, action: WordAction) -> WordObservation:  # type: ignore[override]
        self._state.step_count += 1
        said = action.message.strip()
        reward = 1.0 if said == self._word else 0.5 if self._word in said else 0.0
        return WordObservation(instruction=f"Repeat the word: {self._word}", said=said, done=True, reward=reward)

    @property
    def state(self) -> State:
        return self._state


app = create_app(WordEnvironment, WordAction, WordObservation, env_name="word", max_concurrent_envs=32)
