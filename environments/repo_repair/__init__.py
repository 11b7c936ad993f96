"""``agentrl/RepoRepair-v0``: SWE-smith-style bugs in real Python projects, graded by their own test suites."""
