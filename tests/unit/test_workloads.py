"""Workload prompts: exact token lengths, deterministic, ending in an open question."""

import pytest

from servebench.config import FixedWorkload, SharedPrefixWorkload
from servebench.settings import PROJECT_ROOT
from servebench.tokenize import FileTokenizer, text_of_length
from servebench.workloads import build_prompts


@pytest.fixture(scope="module")
def tok():
    return FileTokenizer(PROJECT_ROOT / "include" / "models" / "adder-3m")


def test_fixed_prompts_have_exact_lengths_and_end_in_a_question(tok):
    w = FixedWorkload(kind="fixed", name="f", input_tokens=64, output_tokens=8, num_requests=10)
    items = build_prompts(w, tok, seed=1)
    assert len(items) == 10
    for item in items:
        text = item.messages[0]["content"]
        assert len(tok.encode(text)) == 64 == item.input_tokens
        assert text.endswith("=") and item.output_tokens == 8
    assert len({i.messages[0]["content"] for i in items}) == 10


def test_same_seed_same_prompts_other_seed_other_prompts(tok):
    w = FixedWorkload(kind="fixed", name="f", input_tokens=32, output_tokens=4, num_requests=3)
    assert build_prompts(w, tok, 5) == build_prompts(w, tok, 5)
    assert build_prompts(w, tok, 5) != build_prompts(w, tok, 6)


def test_shared_prefix_prompts_share_exact_prefixes(tok):
    w = SharedPrefixWorkload(kind="shared_prefix", name="s", prefix_tokens=96, suffix_tokens=16,
                             num_prefixes=2, output_tokens=4, num_requests=8)
    items = build_prompts(w, tok, seed=3)
    texts = [i.messages[0]["content"] for i in items]
    assert all(len(tok.encode(t)) == 112 for t in texts)
    firsts = {tok.decode(tok.encode(t)[:96]) for t in texts}
    assert len(firsts) == 2  # two prefixes, alternating
    heads = [tok.encode(t)[:96] for t in texts]
    assert heads[0] == heads[2] == heads[4] != heads[1]


def test_text_of_length_rejects_short_sources(tok):
    with pytest.raises(ValueError, match="need more than"):
        text_of_length(tok, "1+1=2", 40)
