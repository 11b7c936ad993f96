"""How a chat template closes an assistant turn, for stitching token-exact multi-turn contexts.

Both multi-turn paths (the executor's env feedback, the OpenAI-compatible endpoint's new messages)
append, after the policy's generated tokens, whatever the chat template renders between the end of
the assistant's reply and the next message. That text starts with the template's *turn closing*
(``<|im_end|>\\n`` for ChatML): the rule here decides how much of it the policy already generated.

- The closing is found once per template by rendering a marker reply, never by searching for the
  reply's own text in the rendering (a reply that is empty, or that also occurs in the template's
  text, such as ``"\\n"``, would be found in the wrong place).
- Only a turn that ended on a stop token (``finish_reason == "stop"``) may have generated the start
  of the closing (Qwen and SmolLM2 stop on ``<|im_end|>``): then its last token's text is dropped
  from the closing. A turn cut at its token budget keeps the whole closing even when its last
  characters happen to spell the closing's start (``if a<``), so the special token that closes the
  turn always enters the context.
"""

from __future__ import annotations

from typing import Any

REPLY_MARK = "<<agentrl-reply>>"


def turn_closing(tokenizer: Any) -> str:
    """The text ``tokenizer``'s chat template renders right after an assistant reply's content."""
    convo = [{"role": "user", "content": "U"}, {"role": "assistant", "content": REPLY_MARK}]
    rendered = tokenizer.apply_chat_template(convo, tokenize=False)
    if REPLY_MARK not in rendered:
        raise ValueError("the chat template does not render the assistant's reply")
    return rendered[rendered.rindex(REPLY_MARK) + len(REPLY_MARK):]


def closing_left(closing: str, last_token_text: str, finish_reason: str | None) -> str:
    """The part of ``closing`` the context still needs after an action whose last token decodes to
    ``last_token_text`` and which ended with ``finish_reason`` (see the module docstring)."""
    if finish_reason == "stop" and last_token_text and closing.startswith(last_token_text):
        return closing[len(last_token_text):]
    return closing
