"""chrome_check.py TRACE.json RANKS: the file follows the Trace Event Format
(the JSON Object Format that chrome://tracing and Perfetto load: a
"traceEvents" list of events, each with a phase and the fields that phase
needs) and holds exactly one track (process) per rank 0..RANKS-1, each with
spans. Exit 0 when it does; 1 with the first broken rule otherwise."""
import json
import sys

PHASES = set("BEXIiCbnesftPOMNDRc(") | {"M"}


def fail(text):
    print(f"chrome_check: {text}")
    sys.exit(1)


def main():
    path, ranks = sys.argv[1], int(sys.argv[2])
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        fail("no traceEvents list at the top")
    if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
        fail("displayTimeUnit must be ms or ns")
    spans, names = {}, {}
    for i, e in enumerate(doc["traceEvents"]):
        if not isinstance(e, dict):
            fail(f"event {i} is not an object")
        ph = e.get("ph")
        if ph not in PHASES:
            fail(f"event {i}: phase {ph!r} is not one of the format's")
        for key in ("pid", "tid"):
            if not isinstance(e.get(key), int):
                fail(f"event {i}: {key} must be an integer")
        if not isinstance(e.get("name"), str):
            fail(f"event {i}: no name")
        if ph == "X":
            for key in ("ts", "dur"):
                if not isinstance(e.get(key), (int, float)) or e[key] < 0:
                    fail(f"event {i}: a complete event needs {key} >= 0 (microseconds)")
            spans[e["pid"]] = spans.get(e["pid"], 0) + 1
        if ph == "M":
            if e["name"] not in ("process_name", "process_labels", "process_sort_index",
                                 "thread_name", "thread_sort_index"):
                fail(f"event {i}: metadata {e['name']!r} is not one the format knows")
            if not isinstance(e.get("args"), dict):
                fail(f"event {i}: metadata without args")
            if e["name"] == "process_name":
                names[e["pid"]] = e["args"].get("name")
    if sorted(names) != list(range(ranks)):
        fail(f"named tracks {sorted(names)}, not one per rank 0..{ranks - 1}")
    if sorted(spans) != list(range(ranks)):
        fail(f"spans on tracks {sorted(spans)}, not on every rank's")
    print(f"chrome_check: {len(doc['traceEvents'])} events, tracks {sorted(names)}: "
          + ", ".join(f"{names[p]!r} {spans[p]} spans" for p in sorted(names)))


main()
