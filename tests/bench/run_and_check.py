#!/usr/bin/env python3
"""Runs a plexus-bench command line and checks its exit status, output and JSON.

    run_and_check.py [--exit N] [--skip-if REGEX] [--json] [--rows N]
                     [--wrong zero|nonzero] [--stdout REGEX] [--stderr REGEX]
                     -- COMMAND [ARGS...]

--json appends "--json FILE" (a temporary file) to COMMAND, then checks that
the file is complete, has rows (--rows N: exactly N) and, with --wrong zero,
that every checked cell has wrong == 0 (nonzero: that some cell has wrong > 0).
--skip-if REGEX: when COMMAND does not exit as expected and its output
matches REGEX, exit 77 (meson's "skipped"), e.g. for a collective the backend
does not support yet. No timing is checked.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def fail(message, out, err):
    print(f"FAILED: {message}")
    print("---- stdout ----\n" + out[-6000:])
    print("---- stderr ----\n" + err[-6000:])
    return 1


def check_json(path, args):
    """An error message, or None."""
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        return f"cannot read the JSON file: {e}"
    if data.get("complete") is not True:
        return "JSON file is not marked complete"
    rows = data.get("rows", [])
    if not rows:
        return "JSON file has no rows"
    if args.rows is not None and len(rows) != args.rows:
        return f"JSON file has {len(rows)} rows, expected {args.rows}"
    cells = []
    for row in rows:
        for key in ("out_of_place", "in_place"):
            cell = row.get(key)
            if cell is not None:
                cells.append((row, key, cell))
    if not cells:
        return "no measured cell in any row"
    if args.wrong == "zero":
        for row, key, cell in cells:
            if cell.get("wrong") != 0:
                return (f"row size {row['size']} {row['type']} {row['redop']} {key}: "
                        f"#wrong {cell.get('wrong')}")
        if data.get("wrong_total") != 0:
            return f"wrong_total is {data.get('wrong_total')}"
    elif args.wrong == "nonzero":
        if not any((cell.get("wrong") or 0) > 0 for _, _, cell in cells):
            return "expected some wrong elements, found none"
    return None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--exit", type=int, default=0)
    p.add_argument("--skip-if")
    p.add_argument("--json", action="store_true")
    p.add_argument("--rows", type=int)
    p.add_argument("--wrong", choices=["zero", "nonzero"])
    p.add_argument("--stdout", action="append", default=[], help="regex; may be repeated")
    p.add_argument("--stderr")
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        p.error("no command")
    with tempfile.TemporaryDirectory(prefix="plexus-bench-test-") as tmp:
        json_path = os.path.join(tmp, "rows.json")
        if args.json:
            cmd = cmd + ["--json", json_path]
        print("$ " + " ".join(cmd), flush=True)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        out, err = proc.stdout, proc.stderr
        if proc.returncode != args.exit:
            if args.skip_if and re.search(args.skip_if, out + err, re.M):
                print(f"SKIP: exit status {proc.returncode}\n{(out + err)[-2000:]}")
                return 77
            return fail(f"exit status {proc.returncode}, expected {args.exit}", out, err)
        for pattern in args.stdout:
            if not re.search(pattern, out, re.M):
                return fail(f"stdout does not match {pattern!r}", out, err)
        if args.stderr and not re.search(args.stderr, err, re.M):
            return fail(f"stderr does not match {args.stderr!r}", out, err)
        if args.json:
            problem = check_json(json_path, args)
            if problem:
                return fail(problem, out, err)
    print(out[-3000:])
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
