"""chorus.journal: the resumable JSONL journal of generation and scoring."""

import json
import threading

from chorus.journal import Journal, complete_records, journal_path


def key(record):
    return record["id"]


def test_a_torn_last_line_is_ignored_and_the_next_record_starts_a_fresh_line(tmp_path):
    path = tmp_path / "out.jsonl.partial"
    path.write_text(json.dumps({"id": 1, "v": "a"}) + "\n" + '{"id": 2, "v"')  # killed mid-write
    journal = Journal(path, key)
    assert journal.done == {1: {"id": 1, "v": "a"}}
    with journal:
        journal.append({"id": 2, "v": "b"})
    assert complete_records(path) == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]
    assert path.read_text().endswith('{"id": 2, "v"\n{"id": 2, "v": "b"}\n')


def test_a_complete_record_without_its_newline_counts_as_torn(tmp_path):
    path = tmp_path / "j.partial"
    path.write_text(json.dumps({"id": 1}) + "\n" + json.dumps({"id": 2}))
    assert list(Journal(path, key).done) == [1]


def test_resume_skips_done_keys_and_finish_writes_the_output(tmp_path):
    out = tmp_path / "out.jsonl"
    path = journal_path(out)
    assert path == tmp_path / "out.jsonl.partial"
    with Journal(path, key) as first:
        for item in (1, 2):
            first.append({"id": item, "v": item * 10})
    # a key of None marks a record that cannot be reused
    with path.open("a") as handle:
        handle.write(json.dumps({"id": None, "v": 0}) + "\n")
    resumed = Journal(path, lambda r: r["id"])
    todo = [item for item in (1, 2, 3, 4) if item not in resumed.done]
    assert todo == [3, 4]
    with resumed:
        threads = [threading.Thread(target=resumed.append, args=({"id": i, "v": i * 10},)) for i in todo]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    resumed.finish(out, [resumed.done[i] for i in (1, 2, 3, 4)])
    assert [json.loads(line)["v"] for line in out.read_text().splitlines()] == [10, 20, 30, 40]
    assert not path.exists()


def test_no_resume_starts_afresh(tmp_path):
    path = tmp_path / "j.partial"
    path.write_text(json.dumps({"id": 1}) + "\n")
    assert Journal(path, key, resume=False).done == {} and not path.exists()
