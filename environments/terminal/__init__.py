"""``agentrl/Terminal-v0``: procedural shell tasks over a generated file tree, graded by the final tree."""
