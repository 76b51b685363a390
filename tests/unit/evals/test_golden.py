"""Golden sets load with errors that name the file and the line."""

import json

import pytest
from servebench.evals.golden import GoldenSetError, load_golden_set
from servebench.settings import PROJECT_ROOT


def _write(tmp_path, lines):
    path = tmp_path / "set.jsonl"
    path.write_text("\n".join(json.dumps(x) if isinstance(x, dict) else x for x in lines) + "\n")
    return path


def test_shipped_golden_set_loads():
    items = load_golden_set(PROJECT_ROOT / "include/golden/addition.jsonl")
    assert len(items) == 200 and len({i.id for i in items}) == 200
    assert items[0].chat_messages()[0]["role"] == "user"


@pytest.mark.parametrize("bad,message", [
    ('{"id": "a", "prompt": "x"', r"set\.jsonl:2: not valid JSON"),
    ({"id": "b", "reference": "1"}, r"set\.jsonl:2: field .*exactly one of 'messages' or 'prompt'"),
    ({"id": "c", "prompt": "x", "reference": "(", "scorer": "regex"}, r"set\.jsonl:2: .*regex"),
    ({"id": "d", "prompt": "x", "reference": "1", "scorer": "bleu"}, r"set\.jsonl:2: .*unknown scorer"),
    ({"id": "ok", "prompt": "x", "reference": "2"}, r"set\.jsonl:2: duplicate id 'ok'"),
])
def test_bad_lines_name_file_and_line(tmp_path, bad, message):
    path = _write(tmp_path, [{"id": "ok", "prompt": "1+1=", "reference": "2"}, bad])
    with pytest.raises(GoldenSetError, match=message):
        load_golden_set(path)


def test_empty_set_is_an_error(tmp_path):
    with pytest.raises(GoldenSetError, match="empty"):
        load_golden_set(_write(tmp_path, [""]))
