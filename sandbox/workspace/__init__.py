"""Workspaces: one isolated computer per episode — a file tree and a shell that keeps its state.

``open_workspace(spec, backend="local" | "docker")`` starts one; see :mod:`sandbox.workspace.base` for
the interface and the graded tree, :mod:`.local` and :mod:`.docker` for the walls of each backend.
"""

from __future__ import annotations

from .base import (
    BuildError,
    BuildStep,
    CommandResult,
    FileEntry,
    Tree,
    TreeTooLarge,
    Workspace,
    WorkspaceError,
    WorkspaceLimits,
    WorkspaceSpec,
)

__all__ = ["BACKENDS", "BuildError", "BuildStep", "CommandResult", "FileEntry", "Tree", "TreeTooLarge", "Workspace",
           "WorkspaceError", "WorkspaceLimits", "WorkspaceSpec", "open_workspace"]

BACKENDS = ("local", "docker")


def open_workspace(spec: WorkspaceSpec, backend: str = "local", tree: Tree | None = None,
                   bare: bool = False) -> Workspace:
    """Start a workspace: built from ``spec``'s steps, or holding ``tree`` (a grader's fresh workspace), or
    ``bare``: started with ``spec``'s limits and holding nothing until ``receive(tree)`` (a grader started
    ahead: :class:`sandbox.workspace.pool.GraderPool`)."""
    if backend == "local":
        from .local import LocalWorkspace

        return LocalWorkspace(spec, tree, bare)
    if backend == "docker":
        from .docker import DockerWorkspace

        return DockerWorkspace(spec, tree, bare)
    raise ValueError(f"unknown workspace backend {backend!r}; valid: {', '.join(BACKENDS)}")
