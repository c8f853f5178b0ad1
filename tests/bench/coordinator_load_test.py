#!/usr/bin/env python3
"""ctest coordinator_load_script: bench/coordinator_load.py end to end at
the smallest scale. A real coordinator and gasloc-load's 6 simulated
workers, one of them churned every 5 s, for 8 s: the job advances, every
call succeeds, a worker left and its replacement joined, and the table and
JSON lines name every method with its latencies.

    coordinator_load_test.py SOURCE_DIR BUILD_DIR
"""
import json
import os
import subprocess
import sys
import tempfile


def main():
    source, build = sys.argv[1], sys.argv[2]
    with tempfile.TemporaryDirectory(prefix="coordinator-load-test-") as out:
        run = subprocess.run(
            [sys.executable, os.path.join(source, "bench", "coordinator_load.py"),
             "--workers", "6", "--seconds", "8", "--churn", "12",
             "--build", build, "--out", out],
            capture_output=True, text=True, timeout=240)
        print(run.stdout)
        print(run.stderr, file=sys.stderr)
        assert run.returncode == 0, f"exit {run.returncode}"
        with open(os.path.join(out, "results.jsonl"), encoding="utf-8") as f:
            results = [json.loads(line) for line in f]
        assert len(results) == 1, results
        r = results[0]
        assert not r.get("failed"), r
        assert r["rounds_completed"] >= 2, r
        methods = {x["name"]: x for x in r["rpcs"]}
        for name in ("RegisterWorker", "Heartbeat", "GetAssignment",
                     "ReportRound", "LeaveWorker", "StartJob"):
            assert name in methods, (name, methods.keys())
            assert methods[name]["errors"] == 0, methods[name]
            assert methods[name]["p50_ms"] > 0, methods[name]
        assert r["leaves"] >= 1 and r["joins"] >= 6 + r["leaves"], r
        assert r["assignment_delivery"]["calls"] >= r["rounds_completed"], r
        assert r["coordinator_cores"] > 0 and r["sqlite_bytes"] > 0, r
        with open(os.path.join(out, "table.md"), encoding="utf-8") as f:
            table = f.read()
        assert "| 6 | this build | ReportRound |" in table, table
        assert "holds the bar" in table, table
    print("coordinator_load_script passed")


if __name__ == "__main__":
    main()
