"""The local workspaces' zygote: a warm runtime that forks one process per workspace.

A workspace runtime started as a new interpreter spends most of its start (100-200 ms on a loaded
2-core machine) starting Python and importing its modules. The zygote (``_workspace.py zygote FD``)
does that once per owner process, then waits on the unix socket ``FD``: each request carries the two
pipe ends of a new workspace (``SCM_RIGHTS``); the zygote forks, the child makes them its stdin and
stdout and runs the workspace exactly as a fresh runtime would (its waiter, namespaces, init), and
the zygote answers with the child's pid. The zygote reaps its children and ends when its owner
closes the socket (or dies). Standard library only.
"""

from __future__ import annotations

import os
import signal
import socket
import struct

from _ws_common import reap_children  # type: ignore[import-not-found]


def serve_forks(fd: int, run) -> None:
    sock = socket.socket(fileno=fd)
    signal.signal(signal.SIGCHLD, lambda *_: reap_children())
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 16, 2)
        except InterruptedError:
            continue
        if not msg or len(fds) != 2:
            return
        pid = os.fork()
        if pid == 0:
            try:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                sock.close()
                os.dup2(fds[0], 0)
                os.dup2(fds[1], 1)
                for f in fds:
                    os.close(f)
                run()
            finally:
                os._exit(0)
        for f in fds:
            os.close(f)
        sock.sendall(struct.pack(">i", pid))
