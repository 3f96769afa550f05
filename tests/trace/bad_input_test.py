"""plexus-trace on bad input: each case a clear message on stderr, exit 0
when something could still be read and 2 when nothing could, never a
Python traceback. The good dump is made here, in the documented format
(docs/trace.md), so the test needs no job.

    bad_input_test.py PLEXUS_TRACE"""
import json
import os
import subprocess
import sys
import tempfile

FIELDS = ["seq", "collective", "count", "dtype", "op", "root", "posted_ns", "issued_ns",
          "finished_ns", "status"]


def dump(rank, size=3, job="job-a", ops=5):
    t0 = 1_700_000_000_000_000_000
    rows = [[s, "allreduce", 16, "float32", "sum", -1, t0 + s * 1000, t0 + s * 1000 + 10,
             t0 + s * 1000 + 500, 0] for s in range(1, ops + 1)]
    return {"format": "plexus-trace", "version": 1, "job": job, "rank": rank, "size": size,
            "host": "h", "pid": 100 + rank, "backend": "tcp", "reason": "exit",
            "dumped_ns": t0 + 10 ** 6,
            "communicators": [{"name": "plexus/0", "rank": rank, "size": size, "backend": "tcp",
                               "job_ranks": list(range(size)), "capacity": 4096, "posts": ops,
                               "fields": FIELDS, "ops": rows, "failures": []}]}


def write(d, name, content):
    with open(os.path.join(d, name), "w") as f:
        f.write(content if isinstance(content, str) else json.dumps(content))


CASES = [
    # name, files, exit status, what stderr or stdout must say
    ("empty directory", {}, 2, "no dump in"),
    ("truncated dump", {"rank-0.json": json.dumps(dump(0))[:200],
                        "rank-1.json": dump(1), "rank-2.json": dump(2)}, 0,
     "rank-0.json: not a whole JSON document at byte"),
    ("foreign JSON", {"rank-0.json": {"traceEvents": []}, "rank-1.json": dump(1),
                      "rank-2.json": dump(2)}, 0, "rank-0.json: not a Plexus flight-recorder dump"),
    ("newer version", {"rank-0.json": dict(dump(0), version=9), "rank-1.json": dump(1)}, 0,
     "dump format version 9; this plexus-trace reads version 1"),
    ("malformed part", {"rank-0.json": dict(dump(0), communicators=[{"name": "x"}]),
                        "rank-1.json": dump(1)}, 0, "a dump with a missing or malformed part"),
    ("missing rank", {"rank-0.json": dump(0), "rank-1.json": dump(1)}, 0, "none from rank 2"),
    ("two jobs", {"rank-0.json": dump(0), "rank-1.json": dump(1),
                  "rank-2.json": dump(2, job="job-b")}, 0,
     "the dumps are of 2 different jobs"),
    ("communicators not objects", {"rank-0.json": dict(dump(0), communicators=[1, "x"]),
                                   "rank-1.json": dump(1)}, 0, "a communicator that is not"),
    ("infinite numbers", {"rank-0.json": json.dumps(dump(0)).replace('"rank": 0', '"rank": 1e400'),
                          "rank-1.json": dump(1)}, 0, "missing or malformed part"),
    ("nested too deep", {"rank-0.json": "[" * 100000 + "]" * 100000, "rank-1.json": dump(1)}, 0,
     "left out"),
    ("failures not objects", {"rank-0.json": dict(dump(0), communicators=[
        dict(dump(0)["communicators"][0], failures=[1, None])]), "rank-1.json": dump(1)}, 0,
     "dumps from 2 of 3 ranks"),
    ("absurd size", {"rank-0.json": dict(dump(0), size=10 ** 12), "rank-1.json": dump(1)}, 0,
     "missing or malformed part"),
    ("absurd times", {"rank-0.json": dict(dump(0), communicators=[dict(
        dump(0)["communicators"][0], ops=[[0, "allreduce", 16, "float32", "sum", -1, 10 ** 30,
                                            10 ** 30, 10 ** 30, 0]])]),
                      "rank-1.json": dump(1), "rank-2.json": dump(2)}, 0, "verdict:"),
    ("binary garbage", {"rank-0.json": "\x00\xff\x00garbage"}, 2, "none of the 1 file(s)"),
    ("only a bad file", {"rank-0.json": "[1, 2"}, 2, "could be read"),
]


def main():
    tool = sys.argv[1]
    failed = 0
    for name, files, want_rc, says in CASES:
        with tempfile.TemporaryDirectory() as d:
            for f, content in files.items():
                write(d, f, content)
            p = subprocess.run([sys.executable, tool, d], capture_output=True, text=True)
            text = p.stdout + p.stderr
            ok = p.returncode == want_rc and says in text and "Traceback" not in text
            print(f"{'ok' if ok else 'FAIL'}: {name}: exit {p.returncode} (want {want_rc}); "
                  f"{'says' if says in text else 'does not say'} {says!r}")
            if not ok:
                print("  " + text.replace("\n", "\n  "))
                failed = 1
    with tempfile.TemporaryDirectory(suffix="[x]") as d:
        for r in range(3):
            write(d, f"rank-{r}.json", dump(r))
        p = subprocess.run([sys.executable, tool, d, "--chrome", "/nonexistent-dir/t.json"],
                           capture_output=True, text=True)
        text = p.stdout + p.stderr
        ok = "dumps from 3 of 3 ranks" in text and "cannot write /nonexistent-dir/t.json" in \
            text and p.returncode == 2 and "Traceback" not in text
        print(f"{'ok' if ok else 'FAIL'}: a directory named with '[', an unwritable --chrome: "
              f"exit {p.returncode}")
        if not ok:
            print("  " + text.replace("\n", "\n  "))
            failed = 1
    p = subprocess.run([sys.executable, tool, "/nonexistent-dir"], capture_output=True, text=True)
    if p.returncode != 2 or "not a directory" not in p.stderr:
        print(f"FAIL: a missing directory: exit {p.returncode}: {p.stderr}")
        failed = 1
    p = subprocess.run([sys.executable, tool, "--help"], capture_output=True, text=True)
    if p.returncode != 0 or "--chrome" not in p.stdout:
        print("FAIL: --help")
        failed = 1
    sys.exit(failed)


main()
