"""An OpenAI-compatible endpoint that serves the policy to black-box agents during rollouts.

``PolicyServer(engine, tokenizer, params)`` listens on ``127.0.0.1`` (a free port) in a uvicorn
thread. Each episode has its own base URL, ``http://127.0.0.1:PORT/ep/<id>/v1``, which an agent
passes to ``openai.OpenAI(base_url=...)``; ``POST .../chat/completions`` and ``.../completions``
answer as OpenAI's API does (``choices[0].message.content`` / ``choices[0].text``, ``usage``); with
``"stream": true`` as server-sent events (the whole completion in one chunk, then ``[DONE]``).

**Token-exact recording.** Every completion of an episode continues the episode's context: the
exact ids of its first prompt, of every generation (``Segment(is_action=True)`` with the engine's
log-probs) and of what the agent added since (``Segment(is_action=False)``, masked: its tool
results, its own messages). What the agent added is the new request minus what it already sent:
for chat requests, the new messages after the assistant reply, rendered by the chat template (the
template's text for them after the conversation so far; without a template, their contents on lines
of their own); for completions, the new prompt minus the previous prompt and completion. Nothing
generated is re-tokenized. A request that does not extend the episode's conversation (the agent
rewrote its history) is counted in ``Episode.rewritten`` and, by default (``rollout.samples:
episode``), appended whole, as feedback: the policy continues the recorded context, so the
trajectory is one sequence of what was sampled. With ``stepwise`` (``rollout.samples: turn``) the
policy continues exactly what the agent sent, and that context starts a new sample of the episode
(``Episode.resets``, reason ``rewrite``): every sample is what the policy saw.

**Concurrency.** Agents run concurrently; their requests are batched: one generator thread waits
(at most ``batch_wait_s``) until every live episode has a request pending and runs them in one
``engine.generate`` call. The sampling parameters are
the run's (an agent's ``temperature`` is ignored: the samples must come from the policy being
trained); a request's ``max_tokens`` cuts its completion shorter. An episode opened with a ``seed``
samples its ``k``-th completion from its own stream (``SamplingParams.row_seeds``: the seed and ``k``),
whichever other agents' requests share the engine call. FastAPI and uvicorn are
imported only when a server starts.
"""

import asyncio
import itertools
import queue
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from agentrl.rollout.chat_turns import closing_left, turn_closing
from agentrl.rollout.context import extension
from agentrl.rollout.engines.base import InferenceEngine, SamplingParams, derive_seed
from agentrl.types import ContextReset, Segment


@dataclass
class Episode:
    """What one agent episode asked for, token-exact."""

    prompt_ids: list[int] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    text: str = ""
    completions: int = 0
    rewritten: int = 0
    last_finish: str | None = None
    seed: int | None = None  # its completions' row seeds derive from it (None: the engine's RNG)
    resets: list[ContextReset] = field(default_factory=list)  # stepwise: contexts the agent rewrote

    def window(self) -> tuple[list[int], list[Segment]]:
        """The current context's start and the segments appended to it."""
        return (self.resets[-1].prompt_ids, self.resets[-1].segments) if self.resets else (self.prompt_ids,
                                                                                           self.segments)

    def context(self) -> list[int]:
        prompt, segments = self.window()
        return prompt + [t for s in segments for t in s.token_ids]

    def last_action(self) -> list[int]:
        """The token ids of the latest completion."""
        segments = [s for r in [self.segments] + [r.segments for r in self.resets] for s in r if s.is_action]
        return segments[-1].token_ids if segments else []


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _content(m: dict[str, Any]) -> str:
    c = m.get("content") or ""
    if isinstance(c, list):  # OpenAI content parts
        return "".join(str(p.get("text", "")) for p in c if isinstance(p, dict))
    return str(c)


def _sse(head: dict[str, Any], kind: str, usage: dict[str, int], body: dict[str, Any],
         content: list[dict[str, Any]], end: list[dict[str, Any]]) -> Any:
    """A ``stream: true`` answer as OpenAI's server-sent events: the whole completion in one chunk, a
    closing chunk with the finish reason, a usage chunk when ``stream_options.include_usage``, ``[DONE]``."""
    import json

    from fastapi.responses import StreamingResponse

    chunks = [{**head, "object": kind, "choices": content}, {**head, "object": kind, "choices": end}]
    if (body.get("stream_options") or {}).get("include_usage"):
        chunks.append({**head, "object": kind, "choices": [], "usage": usage})
    events = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return StreamingResponse(iter([events.encode()]), media_type="text/event-stream")


class PolicyServer:
    """The endpoint (see the module docstring). ``start()`` once; ``new_episode()`` per agent run."""

    def __init__(self, engine: InferenceEngine, tokenizer: Any, params: SamplingParams, *,
                 chat_template: bool = False, model_name: str = "agentrl-policy", batch_wait_s: float = 0.05,
                 stepwise: bool = False) -> None:
        self.engine, self.tokenizer, self.params = engine, tokenizer, params
        self.stepwise = stepwise
        self.use_template = bool(chat_template and getattr(tokenizer, "chat_template", None))
        self.model_name = model_name
        self.episodes: dict[str, Episode] = {}
        self._ids = itertools.count()
        self._pending: queue.Queue = queue.Queue()
        self._server: Any = None
        self.port = 0
        self.batch_wait_s = batch_wait_s
        self._turn_closing: str | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "PolicyServer":
        """Serve on 127.0.0.1 (a free port) in background threads; returns when it accepts requests."""
        import uvicorn

        self.port = _free_port()
        config = uvicorn.Config(self._app(), host="127.0.0.1", port=self.port, log_level="warning",
                                access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        threading.Thread(target=self._server.run, name="agentrl-openai-server", daemon=True).start()
        threading.Thread(target=self._generate_loop, name="agentrl-openai-generate", daemon=True).start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the OpenAI-compatible endpoint did not start within 30 s")
            time.sleep(0.01)
        return self

    def close(self) -> None:
        """Stop serving and end the generator thread."""
        if self._server is not None:
            self._server.should_exit = True
            self._pending.put(None)
            self._server = None

    def new_episode(self, seed: int | None = None) -> tuple[str, str]:
        """(episode id, base URL for ``openai.OpenAI(base_url=...)``); ``seed``: see the module docstring."""
        eid = str(next(self._ids))
        self.episodes[eid] = Episode(seed=seed)
        return eid, f"http://127.0.0.1:{self.port}/ep/{eid}/v1"

    def pop_episode(self, eid: str) -> Episode:
        return self.episodes.pop(eid)

    # ------------------------------------------------------------------ prompts
    def _render(self, messages: list[dict[str, Any]], generation_prompt: bool) -> str:
        if self.use_template:
            return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                      add_generation_prompt=generation_prompt)
        return "\n".join(_content(m) for m in messages)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _chat_ids(self, messages: list[dict[str, Any]]) -> list[int]:
        """The ids of a whole conversation as the agent sent it, ready for the assistant's reply."""
        ids = (self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
               if self.use_template else self._encode(self._render(messages, True)))
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def _rewritten(self, ep: Episode, whole: list[int], appended: list[int]) -> list[int] | None:
        """A request that does not extend the episode: a new sample of exactly ``whole`` (stepwise), or
        ``appended`` as feedback."""
        if self.stepwise:
            delta = extension(ep.context(), whole)  # re-sent in other words but the same tokens: it extends
            if delta is not None:
                return delta
            ep.rewritten += 1
            ep.resets.append(ContextReset("rewrite", whole))
            return None
        ep.rewritten += 1
        return appended

    def _chat_delta(self, ep: Episode, messages: list[dict[str, Any]]) -> list[int] | None:
        """Ids of what the agent added to the episode's conversation (None: a first request, or a new sample)."""
        if not ep.completions:
            ep.prompt_ids = self._chat_ids(messages)
            return None
        k = len(ep.messages)
        if [(_content(m), m.get("role")) for m in messages[:k]] != [(_content(m), m.get("role")) for m in ep.messages]:
            return self._rewritten(ep, self._chat_ids(messages), self._encode("\n" + self._render(messages, True)))
        new = messages[k:]
        if not self.use_template:
            return self._encode("\n" + "\n".join(_content(m) for m in new) + "\n")
        before = self._render(ep.messages, False)
        after = self._render(messages, True)
        if not after.startswith(before):
            return self._rewritten(ep, self._chat_ids(messages), self._encode(after))
        last = ep.last_action()[-1:]
        tail = self.tokenizer.decode(last) if last else ""
        closing = closing_left(self._closing(), tail, ep.last_finish)  # what the policy did not generate
        return self._encode(closing + after[len(before):])

    def _closing(self) -> str:
        """The chat template's text after an assistant reply (``agentrl.rollout.chat_turns``), once."""
        if self._turn_closing is None:
            self._turn_closing = turn_closing(self.tokenizer)
        return self._turn_closing

    def _completion_delta(self, ep: Episode, prompt: str) -> list[int] | None:
        if not ep.completions:
            ep.prompt_ids = self._encode(prompt)
            ep.text = prompt
            return None
        if prompt.startswith(ep.text):
            return self._encode(prompt[len(ep.text):])
        return self._rewritten(ep, self._encode(prompt), self._encode(prompt))

    # ------------------------------------------------------------------ generation
    async def _complete(self, eid: str, delta_fn: Any, arg: Any, max_tokens: int | None) -> tuple[str, int, int, str]:
        """Record the agent's addition, generate on the episode's context, record the completion."""
        ep = self.episodes.get(eid)
        if ep is None:
            raise KeyError(eid)
        delta = delta_fn(ep, arg)
        if delta:
            ep.window()[1].append(Segment(list(delta), False))
        context = ep.context()
        fut = asyncio.get_running_loop().create_future()
        row_seed = None if ep.seed is None else derive_seed(ep.seed, ep.completions)
        self._pending.put((context, fut, asyncio.get_running_loop(), row_seed))
        comp = await fut
        limit = min(len(comp.token_ids), max_tokens) if max_tokens else len(comp.token_ids)
        ids, logprobs = list(comp.token_ids[:limit]), list(comp.logprobs[:limit])
        ep.window()[1].append(Segment(ids, True, logprobs))
        ep.completions += 1
        ep.last_finish = "length" if limit < len(comp.token_ids) else comp.finish_reason
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return text, len(context), len(ids), ep.last_finish or "stop"

    def _generate_loop(self) -> None:
        """Take every pending request, generate them in one engine call, answer each."""
        while True:
            item = self._pending.get()
            if item is None:
                return
            batch, deadline = [item], time.monotonic() + self.batch_wait_s
            # wait (up to batch_wait_s) for every live episode's request: one engine call per turn
            while len(batch) < len(self.episodes):
                try:
                    nxt = self._pending.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if nxt is None:
                    self._pending.put(None)
                    break
                batch.append(nxt)
            try:
                seeds = tuple(b[3] for b in batch)
                params = self.params if None in seeds else replace(self.params, row_seeds=seeds)
                out = self.engine.generate([b[0] for b in batch], params)
                for (_, fut, loop, _), comp in zip(batch, out):
                    loop.call_soon_threadsafe(fut.set_result, comp)
            except Exception as e:  # noqa: BLE001 - every waiting agent gets the error
                for _, fut, loop, _ in batch:
                    loop.call_soon_threadsafe(fut.set_exception, e)

    # ------------------------------------------------------------------ HTTP
    def _app(self) -> Any:
        from fastapi import FastAPI, HTTPException, Request  # real names: FastAPI reads the annotations

        app = FastAPI(title="agentrl policy (OpenAI-compatible)")

        async def run(eid: str, delta_fn: Any, arg: Any, body: dict[str, Any]) -> tuple[str, int, int, str]:
            try:
                return await self._complete(eid, delta_fn, arg, body.get("max_tokens") or body.get(
                    "max_completion_tokens"))
            except KeyError:
                raise HTTPException(404, f"unknown episode {eid!r} (use the base URL agentrl gave the agent)") from None

        def usage(n_prompt: int, n_gen: int) -> dict[str, int]:
            return {"prompt_tokens": n_prompt, "completion_tokens": n_gen, "total_tokens": n_prompt + n_gen}

        @app.post("/ep/{eid}/v1/chat/completions")
        async def chat(eid: str, request: Request) -> Any:
            body = await request.json()
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise HTTPException(400, "'messages' must be a non-empty list")
            text, n_prompt, n_gen, finish = await run(eid, self._chat_delta, messages, body)
            ep = self.episodes.get(eid)
            if ep is not None:
                ep.messages = [dict(m) for m in messages] + [{"role": "assistant", "content": text}]
            head = {"id": f"chatcmpl-{eid}-{n_prompt}", "created": int(time.time()), "model": self.model_name}
            if body.get("stream"):
                return _sse(head, "chat.completion.chunk", usage(n_prompt, n_gen), body,
                            [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}],
                            [{"index": 0, "delta": {}, "finish_reason": finish}])
            return {**head, "object": "chat.completion", "usage": usage(n_prompt, n_gen),
                    "choices": [{"index": 0, "finish_reason": finish,
                                 "message": {"role": "assistant", "content": text}}]}

        @app.post("/ep/{eid}/v1/completions")
        async def completions(eid: str, request: Request) -> Any:
            body = await request.json()
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise HTTPException(400, "'prompt' must be a string")
            text, n_prompt, n_gen, finish = await run(eid, self._completion_delta, prompt, body)
            ep = self.episodes.get(eid)
            if ep is not None:
                ep.text = prompt + text
            head = {"id": f"cmpl-{eid}-{n_prompt}", "created": int(time.time()), "model": self.model_name}
            if body.get("stream"):
                return _sse(head, "text_completion", usage(n_prompt, n_gen), body,
                            [{"index": 0, "text": text, "finish_reason": None, "logprobs": None}],
                            [{"index": 0, "text": "", "finish_reason": finish, "logprobs": None}])
            return {**head, "object": "text_completion", "usage": usage(n_prompt, n_gen),
                    "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}]}

        @app.get("/ep/{eid}/v1/models")
        async def models(eid: str) -> dict[str, Any]:
            return {"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "agentrl"}]}

        return app

