"""``agentrl view RUN_DIR [RUN_DIR ...]``: serve the run browser, or ``--export FILE`` it as one page.

Serving binds ``--host`` (127.0.0.1) and ``--port`` (8765; 0 picks a free one), refuses a busy port
in one line, prints the URL once it listens and serves until Ctrl-C. ``--export`` writes the same
page as one self-contained HTML file (its scripts, style and every run's metrics, episodes, eval
reports, doctor report and warm-start curve inlined; no server, no network) and exits.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from agentrl.viewer.data import RunData, check_run_dir, run_names
from agentrl.viewer.server import create_app, page


def load_runs(paths: list[str | Path]) -> list[RunData]:
    """The runs to show, read once (ViewError names a directory that holds no run)."""
    dirs = [check_run_dir(p) for p in paths]
    runs = [RunData(d, name) for d, name in zip(dirs, run_names(dirs))]
    for r in runs:
        r.refresh()
    return runs


def export_data(runs: list[RunData]) -> dict[str, Any]:
    """Everything the page shows, for the exported file: summaries, metrics, episode summaries and
    records, eval reports with theirs, doctor reports, warm-start curves."""
    out: dict[str, Any] = {"runs": [], "metrics": [], "episodes": [], "records": [], "evals": [], "doctors": [],
                           "warm_starts": []}
    for r in runs:
        evals = r.evals()
        for k, ev in enumerate(evals):
            ev["records"] = [r.eval_record(k, i) for i in range(len(ev["episodes"]))]
        out["runs"].append(r.summary())
        out["metrics"].append(r.metrics)
        out["episodes"].append(r.episodes)
        out["records"].append([r.record(i) for i in range(len(r.episodes))])
        out["evals"].append(evals)
        out["doctors"].append(r.doctor())
        out["warm_starts"].append(r.warm_start())
    return out


def export_html(runs: list[RunData], out: str | Path) -> Path:
    """Write the self-contained page of ``runs`` to ``out``."""
    out = Path(out)
    data = json.dumps(export_data(runs), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page(static=True, data_json=data), encoding="utf-8")
    return out


def bind(host: str, port: int) -> socket.socket:
    """A listening-ready socket on (host, port); OSError when it cannot be had."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def serve(runs: list[RunData], host: str, port: int, token: str | None, log_level: str = "warning") -> int:
    """Serve ``runs`` until interrupted; 2 with one line when the port cannot be had."""
    import uvicorn

    try:
        sock = bind(host, port)
    except OSError as e:
        print(f"agentrl view: cannot listen on {host}:{port}: {e.strerror} (pass another --port, or --port 0 "
              f"for a free one)", file=sys.stderr)
        return 2
    port = sock.getsockname()[1]
    app = create_app(runs, token=token, host=host, port=port)
    where = f"[{host}]" if ":" in host else host
    url = f"http://{where}:{port}/" + (f"?token={token}" if token else "")

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            if self.started:
                names = ", ".join(r.name for r in runs)
                print(f"agentrl view: {url} (runs: {names}; Ctrl-C stops)", flush=True)

    Server(uvicorn.Config(app, log_level=log_level, access_log=False)).run(sockets=[sock])
    return 0


def main(paths: list[str], *, host: str = "127.0.0.1", port: int = 8765, token: str | None = None,
         export: str | None = None) -> int:
    """``agentrl view``: export the page, or serve it (see the module docstring)."""
    runs = load_runs(paths)
    if export:
        out = export_html(runs, export)
        episodes = sum(len(r.episodes) for r in runs)
        print(f"agentrl view: wrote {out} ({len(runs)} run{'s' * (len(runs) != 1)}, {episodes} episodes, "
              f"{out.stat().st_size / 1e6:.1f} MB; opens offline in any browser)")
        return 0
    return serve(runs, host, port, token or os.environ.get("AGENTRL_VIEW_TOKEN") or None)
