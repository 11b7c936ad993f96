"""Run the visible and the hidden tests. The standard library comes first on the import path, then the
tests, then /app (appended, so a module the agent leaves in /app cannot shadow unittest or the tests)."""
import io
import re
import sys

sys.path.append("/tests")
sys.path.append("/app")
import unittest  # noqa: E402

report = io.StringIO()
suite = unittest.defaultTestLoader.loadTestsFromNames(["test_stock", "test_hidden"])
result = unittest.TextTestRunner(stream=report, verbosity=2).run(suite)
print(re.sub(r"(Ran \d+ tests?) in [\d.]+s", r"\1", report.getvalue()))  # the same output for the same code
sys.exit(0 if result.wasSuccessful() and result.testsRun == 7 else 1)
