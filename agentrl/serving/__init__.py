"""Serving agentrl envs to others: ``agentrl serve-env`` (:mod:`.env_server`) speaks OpenEnv's protocol,
one session per WebSocket client (:mod:`.sessions`). Imported only by the CLI and by tests: FastAPI and
uvicorn load with it, never with ``import agentrl``."""
