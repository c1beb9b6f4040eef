"""chorus-eval-array: a JSONL scored as a submitit job array, here with submitit's local
executor (one process per array task, as SLURM would run them)."""

import json

from chorus.array_score import main
from conftest import FIXTURE_TASK


def test_array_scoring_with_the_local_executor(tmp_path):
    reference = (FIXTURE_TASK / "stimulus" / "reference.py").read_text()
    trivial = (FIXTURE_TASK / "stimulus" / "trivial.py").read_text()
    rows = [
        {"task_id": "fx_counter", "sample_id": 0, "completion": f"```python\n{reference}\n```"},
        {"task_id": "fx_counter", "sample_id": 1, "completion": f"```python\n{trivial}\n```"},
        {"task_id": "fx_counter", "sample_id": 2, "completion": "```python\nthis is not python\n```"},
        # the id of row 0 again, with other code: a verdict of its own, never row 0's
        {"task_id": "fx_counter", "sample_id": "0", "completion": f"```python\n{trivial}\n```"},
    ]
    generations = tmp_path / "generations.jsonl"
    generations.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n")
    out = tmp_path / "scores.jsonl"
    # the bad last line is reported and left out (exit 1); every other row is scored
    assert main(["--tasks", str(FIXTURE_TASK.parent), "--generations", str(generations), "--out", str(out),
                 "--shards", "2", "--cluster", "local", "--cpus", "1", "--time-min", "10"]) == 1
    results = [json.loads(line) for line in out.read_text().splitlines()]
    # input order, whatever array task scored the row
    assert [r["sample_id"] for r in results] == [0, 1, 2, "0"]
    assert [r["passed"] for r in results] == [True, False, False, False]
    assert results[1]["status"] == "below_target" and results[2]["status"] != "ok"
    assert results[3]["status"] == "below_target"
    # two array tasks ran, each left its shard and its submitit logs
    shards = sorted(p.name for p in (tmp_path / "scores.jsonl.shards").glob("shard*.jsonl"))
    assert shards == ["shard0.jsonl", "shard1.jsonl"]
    assert len(list((tmp_path / "scores.jsonl.shards" / "submitit").glob("*_result.pkl"))) == 2
