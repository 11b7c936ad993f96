"""Adapters that run other frameworks' files as agentrl environments, each in its own module.

Env ids with a framework prefix (registered at plugin load by :func:`register_families`):

- ``openrlhf:path/agent_func.py`` — an OpenRLHF agent file (:mod:`.openrlhf`);
- ``verl:path/train.parquet`` — a verl-style dataset (:mod:`.verl`);
- ``reasoning_gym:NAME`` — a reasoning-gym procedural dataset (:mod:`.reasoning_gym`);
- ``skyrl:module:Class`` or ``skyrl:path/env.py:Class`` — a SkyRL-gym ``BaseTextEnv`` (:mod:`.skyrl`);
- ``agent:path/agent.py:FUNCTION`` — a black-box agent written against the ``openai`` client
  (:mod:`.blackbox`);
- ``harbor:PATH`` — Harbor task directories, an agent in a computer with tools (:mod:`environments.harbor`).
- ``openenv:URL``, ``openenv:module:app``, ``openenv:docker:IMAGE`` — an OpenEnv server's env
  (:mod:`.openenv`);
- ``verifiers:NAME_OR_PATH`` — a verifiers taskset run by its own loop on the policy's endpoint
  (:mod:`.verifiers`);
- ``minisweagent:ENV_ID`` — mini-swe-agent, unchanged, on a workspace env's tasks (RepoRepair-v0,
  Terminal-v0, ``harbor:PATH``), its commands run in our workspace (:mod:`.minisweagent`).

Reward functions of OpenRLHF, verl and TRL are adapted in :mod:`rewards.foreign` (``reward.fn``).
"""

FAMILIES: dict[str, tuple[str, str | None]] = {
    "openrlhf": ("environments.adapters.openrlhf:make_env", None),
    "verl": ("environments.adapters.verl:make_env", None),
    "reasoning_gym": ("environments.adapters.reasoning_gym:make_env", "environments.adapters.reasoning_gym:list_ids"),
    "skyrl": ("environments.adapters.skyrl:make_env", None),
    "agent": ("environments.adapters.blackbox:make_env", None),
    "harbor": ("environments.harbor:make_env", None),
    "openenv": ("environments.adapters.openenv:make_env", None),
    "verifiers": ("environments.adapters.verifiers:make_env", None),
    "minisweagent": ("environments.adapters.minisweagent:make_env", None),
}


def register_families() -> None:
    """Route the prefixed ids above to their adapters (nothing is imported until one is made)."""
    from agentrl.env import register_family

    for prefix, (factory, lister) in FAMILIES.items():
        register_family(prefix, factory, lister)
