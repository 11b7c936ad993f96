# A black-box agent: its own loop and tool, written against the openai client (no agentrl import).
import re

from openai import OpenAI


def calculator(expression: str) -> str:
    if not re.fullmatch(r"[0-9+\-* ]+", expression):
        return "error: only + - * and digits"
    return str(eval(expression))  # digits and + - * only


def solve(base_url, task):
    client = OpenAI(base_url=base_url, api_key="agentrl")
    messages = [{"role": "user", "content": task["prompt"]}]
    answer = ""
    for _ in range(2):
        reply = client.chat.completions.create(model="policy", messages=messages, max_tokens=4)
        answer = reply.choices[0].message.content or ""
        messages.append({"role": "assistant", "content": answer})
        if not answer.strip().startswith("calc"):
            break
        messages.append({"role": "user", "content": "result: " + calculator(answer.strip()[4:])})
    return answer
