"""``agentrl view``: the run browser. Reads run directories only (metrics.jsonl, samples.jsonl,
config.yaml, eval.json) and serves them as a web page, or exports them as one HTML file
(docs/viewer.md)."""
