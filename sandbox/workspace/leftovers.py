"""What workspaces may leave on a host, listed: for tests and for ``agentrl tasks check``.

A closed (or timed-out, or orphaned) workspace must leave nothing: no process of a workspace uid,
no cgroup, no container, no mount. Local workspaces mount only inside their own mount namespaces,
so a host mount naming a workspace would be a leak too. ``owner`` narrows each list to the
workspaces one process opened (its agent uids, its cgroups ``agentrl-ws-OWNER-*``, its containers),
so that a check in one test process does not count another's live workspaces.
"""

from __future__ import annotations

import glob
import os

from .local import UID_BASE


def workspace_processes(owner: int | None = None) -> list[int]:
    """Pids of this host's processes that run as a local workspace's agent uid (of ``owner``'s)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                uid = os.stat(f"/proc/{name}").st_uid
            except OSError:
                continue
            if uid >= UID_BASE and (owner is None or (uid - UID_BASE) // 1000 == owner % 100_000):
                out.append(int(name))
    return out


def workspace_cgroups(owner: int | None = None) -> list[str]:
    """Cgroup directories of local workspaces (opened by ``owner``)."""
    pattern = "agentrl-ws-*" if owner is None else f"agentrl-ws-{owner}-*"
    return sorted(glob.glob(f"/sys/fs/cgroup/**/{pattern}", recursive=True))


def workspace_containers(owner: int | None = None) -> list[str]:
    """Ids of workspace containers (any state, of ``owner``) in the local Docker daemon; [] without one."""
    try:
        import docker

        client = docker.from_env(timeout=10)
    except Exception:  # noqa: BLE001 - no daemon (or no docker package): no containers
        return []
    from .docker import OWNER, labelled_containers, owner_id

    want = None if owner is None else owner_id(owner)  # its label (owner_id reads the boot id: once)
    return [c.id for c, labels in labelled_containers(client) if want is None or labels.get(OWNER) == want]


def workspace_mounts() -> list[str]:
    """Host mounts that belong to a workspace (there should never be any)."""
    with open("/proc/self/mounts") as f:
        return [line.split()[1] for line in f if "agentrl-ws" in line]


def leftovers(owner: int | None = None) -> dict[str, list]:
    """Everything of a workspace (of ``owner``'s) still on this host, by kind (empty lists: clean)."""
    return {"processes": workspace_processes(owner), "cgroups": workspace_cgroups(owner),
            "containers": workspace_containers(owner), "mounts": workspace_mounts()}
