#!/usr/bin/env python3
"""Every PLEXUS_* variable is declared once, in settings/.../table.def, and
read only through settings/src/environment.cpp.

Fails (exit 1, naming file and line) on:
  - a getenv("PLEXUS_...") outside settings/src/;
  - a PLEXUS_* variable named in non-test code (a "PLEXUS_X" string in C++
    or Python, $PLEXUS_X / ${PLEXUS_X in shell) that table.def does not
    declare;
  - an entry of table.def that no code outside settings/ uses (by name or id).
Usage: source_check.py SOURCE_ROOT
"""
import os
import re
import subprocess
import sys

root = sys.argv[1]
table_path = os.path.join(root, "settings/include/plexus/settings/table.def")
table = open(table_path, encoding="utf-8").read()
declared = dict((name, ident) for ident, name in
                re.findall(r'PLEXUS_SETTING\((k\w+), "(PLEXUS_\w+)"', table))
if len(declared) < 40:
    sys.exit(f"{table_path}: only {len(declared)} settings parsed; the pattern is out of date")

files = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True,
                       check=True).stdout.split()
code_ext = (".cpp", ".hpp", ".h", ".c", ".py", ".sh", ".in", ".sbatch", ".build")
problems = []
used = set()
for rel in files:
    if rel.startswith(("tests/", "settings/")) or rel.endswith(".md"):
        continue
    path = os.path.join(root, rel)
    if not os.path.isfile(path):
        continue
    try:
        text = open(path, encoding="utf-8").read()
    except UnicodeDecodeError:
        continue
    if not (rel.endswith(code_ext) or text.startswith("#!")):
        continue
    for n, line in enumerate(text.splitlines(), 1):
        if 'getenv("PLEXUS_' in line:
            problems.append(f"{rel}:{n}: reads a PLEXUS_ variable with getenv; use "
                            "plexus::settings (settings/include/plexus/settings/environment.hpp)")
        names = re.findall(r'"(PLEXUS_[A-Z0-9_]+)"', line)
        names += re.findall(r'\$\{?(PLEXUS_[A-Z0-9_]+)', line)
        for name in names:
            if name in declared:
                used.add(name)
            else:
                problems.append(f"{rel}:{n}: {name} is not declared in "
                                "settings/include/plexus/settings/table.def")
        for ident in re.findall(r"Id::(k\w+)", line):
            used.update(name for name, i in declared.items() if i == ident)
        for name in re.findall(r"\b(PLEXUS_[A-Z0-9_]+)\b", line):
            if name in declared:
                used.add(name)
for name in sorted(set(declared) - used):
    problems.append(f"{table_path}: {name} is declared but no code outside settings/ uses it")
for p in problems:
    print(p)
if problems:
    sys.exit(1)
print(f"{len(declared)} settings declared, each used; no PLEXUS_ variable read outside settings/")
