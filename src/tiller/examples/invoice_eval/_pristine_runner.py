"""The invoice eval's test runner, run by its `tests` scorer in the case's sandbox as a
script (`python -I -B _pristine_runner.py NONCE_FILE TESTS EXPECTED`), never imported by
tiller itself.

Why not `python -m unittest` in the copy: the copy is the agent's, and anything there
that Python finds before the stdlib, or that discovery imports, runs first: a
`unittest.py` of the agent's that exits 0, or a `test_zz.py` that calls `os._exit(0)`,
would pass a copy whose bug is still there. So this runner, under `-I` (no current
directory, script directory, `PYTHON*` variables or user site on `sys.path`), imports
only the stdlib, then loads exactly two files by path: the copy's `invoice.py` (the code
under test, which must be the agent's) and the *pristine* `test_invoice.py` (TESTS,
outside the copy). It checks that the run ran EXPECTED tests, and only then prints the
end marker with the nonce the scorer wrote to NONCE_FILE for this one run (read and
removed before the code under test is loaded, so a file in the copy cannot know it): a
process that ended before that (`os._exit(0)` in `invoice.py`) has no marker, and fails.

What it cannot stop: the code under test runs in this process, so an `invoice.py`
written to cheat can still patch `unittest` or dig the nonce out of this process's
memory. The score measures whether the agent fixed the bug, not whether the agent is
hostile; the case's diff is there for a person to read.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
import unittest
from types import ModuleType

#: The first word of the line this runner prints when the tests ran to the end and passed.
END_MARKER = "tiller-invoice-tests-passed"
#: The code under test, loaded from the current directory (the case's copy).
CODE_UNDER_TEST = "invoice.py"


def _load(name: str, path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be loaded as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str]) -> int:
    nonce_file, tests_path, expected_text = argv
    with open(nonce_file, encoding="ascii") as handle:
        nonce = handle.read().strip()
    os.unlink(nonce_file)
    expected = int(expected_text)
    code = os.path.join(os.getcwd(), CODE_UNDER_TEST)
    try:
        _load(os.path.splitext(CODE_UNDER_TEST)[0], code)
        tests = _load(os.path.splitext(os.path.basename(tests_path))[0], tests_path)
    except Exception:  # any error importing the code is a failed run
        traceback.print_exc()
        print(f"FAILED ({CODE_UNDER_TEST} or the tests could not be imported)", file=sys.stderr)
        return 1
    suite = unittest.defaultTestLoader.loadTestsFromModule(tests)
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(suite)
    sys.stderr.flush()
    if result.testsRun != expected:
        print(
            f"FAILED (ran {result.testsRun} tests, not the {expected} there are)", file=sys.stderr
        )
        return 1
    if not result.wasSuccessful():
        return 1
    print(f"{END_MARKER} {nonce}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
