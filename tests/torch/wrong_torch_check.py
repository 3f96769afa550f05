"""plexus_torch refuses a torch other than the one it was built against, at
import, with one line naming both versions and how to rebuild (never an
undefined symbol from loading _C). Runs `import plexus_torch` in child
Pythons: one with this torch as it is (must import), one where torch says it
is another version (must raise ImportError saying so). Exits 1 on a failure.
"""
import subprocess
import sys

import torch

FAKE = "0.0.1+other"
ok = True


def child(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


real = child("import plexus_torch")
if real.returncode != 0:
    ok = False
    print(f"FAIL: import plexus_torch with torch {torch.__version__}:\n{real.stderr[-2000:]}")
else:
    print(f"ok: import plexus_torch with torch {torch.__version__}")

fake = child(f"import torch; torch.__version__ = {FAKE!r}; import plexus_torch")
last = fake.stderr.strip().splitlines()[-1] if fake.stderr.strip() else ""
checks = [
    (fake.returncode != 0, "the import fails"),
    (last.startswith("ImportError: "), "with an ImportError (last line: " + last[:200] + ")"),
    (FAKE in last and torch.__version__ in last, "naming both versions"),
    ("-Dtorch_path=" in last, "saying how to rebuild"),
    ("undefined symbol" not in fake.stderr, "before loading _C (no undefined symbol)"),
]
for good, what in checks:
    ok = ok and good
    print(("ok: " if good else "FAIL: ") + f"torch {FAKE}: {what}")
sys.exit(0 if ok else 1)
