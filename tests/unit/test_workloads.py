"""Workload prompts: exact token lengths, deterministic, ending in an open question."""

import pytest
from servebench.config import FixedWorkload, SharedPrefixWorkload
from servebench.settings import PROJECT_ROOT
from servebench.tokenizer import FileTokenizer, text_of_length
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


def test_chat_lengths_draw_from_the_table_and_clip(tok, tmp_path):
    from servebench.config import ChatLengthsWorkload

    (tmp_path / "lengths.jsonl").write_text(
        '{"input_tokens": 20, "output_tokens": 5}\n{"input_tokens": 900, "output_tokens": 70}\n')
    w = ChatLengthsWorkload(kind="chat_lengths", name="c", dataset="lengths.jsonl",
                            num_requests=12, max_input_tokens=100, max_output_tokens=30)
    items = build_prompts(w, tok, seed=2, root=tmp_path)
    pairs = {(i.input_tokens, i.output_tokens) for i in items}
    assert pairs == {(20, 5), (100, 30)}  # both rows drawn; the long one clipped
    assert all(len(tok.encode(i.messages[0]["content"])) == i.input_tokens for i in items)


def test_shipped_chat_length_table_loads():
    from servebench.workloads import load_length_table

    rows = load_length_table(PROJECT_ROOT / "include/datasets/chat_lengths.jsonl")
    assert len(rows) == 1000
    inputs = sorted(i for i, _ in rows)
    assert 120 < inputs[500] < 260 and inputs[-1] > 4 * inputs[500]  # a long right tail


def test_bad_length_table_names_the_line(tmp_path):
    from servebench.workloads import load_length_table

    path = tmp_path / "t.jsonl"
    path.write_text('{"input_tokens": 3, "output_tokens": 4}\n{"input_tokens": 3}\n')
    with pytest.raises(ValueError, match=r"t\.jsonl:2: expected input_tokens and output_tokens"):
        load_length_table(path)


def test_multi_turn_history_grows_turn_by_turn(tok):
    from servebench.config import MultiTurnWorkload

    w = MultiTurnWorkload(kind="multi_turn", name="m", num_conversations=2, turns=3,
                          turn_input_tokens=20, output_tokens=6)
    items = build_prompts(w, tok, seed=4)
    assert len(items) == 6
    # turn-major: both conversations' first turns, then the second turns, ...
    assert [len(i.messages) for i in items] == [1, 1, 3, 3, 5, 5]
    assert [i.input_tokens for i in items] == [20, 20, 46, 46, 72, 72]
    first, second = items[0].messages, items[2].messages
    assert second[:1] == first and second[1]["role"] == "assistant"
    assert items[4].template_slack >= 8 * 5


def test_a_retry_draws_prompts_of_its_own_and_a_first_try_keeps_its_key(tok):
    from servebench.workloads import prompt_key

    # a first try's keys are those stored before the try was counted: history stays comparable
    assert prompt_key(5, "f", "c1", try_number=1) == prompt_key(5, "f", "c1") == "5:f:c1:r0"
    assert prompt_key(5, "f", "c1", repetition=1, try_number=1, rerun=2, warmup=True) == \
        "5:f:c1:r1:rerun2:warmup"
    # every later try its own key, for every cell, repetition, re-run and warm-up
    cells = [{}, {"repetition": 1}, {"rerun": 1}, {"warmup": True}]
    keys = {(t, i): prompt_key(5, "f", "c1", try_number=t, **kw)
            for t in (1, 2, 3) for i, kw in enumerate(cells)}
    assert len(set(keys.values())) == len(keys)
    assert keys[(2, 0)] == "5:f:c1:r0:try2"
    w = FixedWorkload(kind="fixed", name="f", input_tokens=32, output_tokens=4, num_requests=6)
    first, retry = ({i.messages[0]["content"] for i in build_prompts(w, tok, 5, key=keys[(t, 0)])}
                    for t in (1, 2))
    assert not first & retry  # a server the first try warmed holds none of the retry's
    with pytest.raises(ValueError, match="counts from 1"):
        prompt_key(5, "f", "c1", try_number=0)


def test_each_cell_key_draws_prompts_of_its_own_with_the_same_lengths(tok, tmp_path):
    from servebench.config import ChatLengthsWorkload
    from servebench.workloads import prompt_key

    w = FixedWorkload(kind="fixed", name="f", input_tokens=32, output_tokens=4, num_requests=6)
    keys = [prompt_key(5, "f", "c1"), prompt_key(5, "f", "c4"),
            prompt_key(5, "f", "c1", repetition=1), prompt_key(5, "f", "c1", rerun=1),
            prompt_key(5, "f", "c1", warmup=True)]
    assert len(set(keys)) == len(keys)
    texts = [{i.messages[0]["content"] for i in build_prompts(w, tok, 5, key=k)} for k in keys]
    for a in range(len(texts)):  # no cell re-sends a prompt of another
        for b in range(a + 1, len(texts)):
            assert not texts[a] & texts[b]
    # deterministic in the key: a night can be reproduced
    assert build_prompts(w, tok, 5, key=keys[1]) == build_prompts(w, tok, 5, key=keys[1])
    assert len(build_prompts(w, tok, 5, key=keys[4], count=2)) == 2
    # a length table's draws are the workload's, the same in every cell
    (tmp_path / "lengths.jsonl").write_text(
        "".join(f'{{"input_tokens": {n}, "output_tokens": {n // 4}}}\n' for n in (20, 40, 60)))
    c = ChatLengthsWorkload(kind="chat_lengths", name="c", dataset="lengths.jsonl",
                            num_requests=8)
    one, other = (build_prompts(c, tok, 5, tmp_path, key=k) for k in keys[:2])
    assert [(i.input_tokens, i.output_tokens) for i in one] == \
        [(i.input_tokens, i.output_tokens) for i in other]
    assert [i.messages for i in one] != [i.messages for i in other]


def test_shared_tokens_are_what_the_workload_declares(tok):
    from servebench.config import MultiTurnWorkload

    fixed = FixedWorkload(kind="fixed", name="f", input_tokens=32, output_tokens=4,
                          num_requests=4)
    assert [i.shared_tokens for i in build_prompts(fixed, tok, 1)] == [0, 0, 0, 0]
    shared = SharedPrefixWorkload(kind="shared_prefix", name="s", prefix_tokens=96,
                                  suffix_tokens=16, num_prefixes=2, output_tokens=4,
                                  num_requests=6)
    # the first of each group puts its prefix in the cache; the rest may be served from it
    assert [i.shared_tokens for i in build_prompts(shared, tok, 1)] == [0, 0, 96, 96, 96, 96]
    multi = MultiTurnWorkload(kind="multi_turn", name="m", num_conversations=2, turns=3,
                              turn_input_tokens=20, output_tokens=6)
    # turn k shares its conversation's history: every earlier user and assistant message
    assert [i.shared_tokens for i in build_prompts(multi, tok, 1)] == [0, 0, 26, 26, 52, 52]


def test_prompts_are_prose_by_default_and_equations_when_asked(tok):
    natural = FixedWorkload(kind="fixed", name="f", input_tokens=96, output_tokens=4,
                            num_requests=24)
    items = build_prompts(natural, tok, seed=1, key="cell")
    texts = [i.messages[0]["content"] for i in items]
    assert all(len(tok.encode(t)) == 96 for t in texts)
    body = texts[0].rsplit(" ", 1)[0]  # before the closing question
    assert sum(c.isalpha() or c == " " for c in body) / len(body) > 0.85  # words, not sums
    # from random words: no two prompts of the cell begin alike
    heads = [tuple(tok.encode(t)[:8]) for t in texts]
    assert len(set(heads)) == len(heads)
    arithmetic = natural.model_copy(update={"text": "arithmetic"})
    sums = build_prompts(arithmetic, tok, seed=1, key="cell")[0].messages[0]["content"]
    assert "+" in sums and sum(c.isdigit() for c in sums) > len(sums) / 3


def test_the_shipped_prose_is_the_corpus_prompts_are_cut_from():
    from servebench.workloads import PROSE, _prose_words

    assert PROSE.read_text().startswith("# The prose of the Python Language Reference")
    assert len(_prose_words()) > 20000  # a random word start: prompts rarely begin alike


def test_long_context_prompts_fill_each_variants_own_context(tok):
    from servebench.config import LongContextWorkload
    from servebench.workloads import TEMPLATE_OVERHEAD_MAX, long_context_tokens

    w = LongContextWorkload(kind="long_context", name="long", context_share=0.9,
                            output_tokens=16, num_requests=3)
    items = build_prompts(w, tok, seed=1, key="k", max_model_len=512)
    assert {i.input_tokens for i in items} == {int(512 * 0.9) - 16 - TEMPLATE_OVERHEAD_MAX}
    assert all(len(tok.encode(i.messages[0]["content"])) == i.input_tokens for i in items)
    # another variant's context, another length; none at all is an error that says so
    assert build_prompts(w, tok, seed=1, key="k", max_model_len=256)[0].input_tokens == 198
    with pytest.raises(ValueError, match="needs the variant's max_model_len"):
        build_prompts(w, tok, seed=1)
    with pytest.raises(ValueError, match="leaves 4 prompt tokens"):
        long_context_tokens(w.model_copy(update={"context_share": 0.5}), 72)


def test_random_text_is_words_in_no_order(tok):
    w = FixedWorkload(kind="fixed", name="f", input_tokens=200, output_tokens=4,
                      num_requests=2, text="random")
    words = build_prompts(w, tok, seed=1, key="k")[0].messages[0]["content"].split()[:-1]
    assert all(c.isascii() for c in " ".join(words))
    pairs = list(zip(words, words[1:], strict=False))
    assert len(set(pairs)) == len(pairs)  # no phrase repeats


def test_a_long_context_that_cannot_fit_a_variant_is_refused_at_plan(tmp_path):
    from servebench.config import parse_sweep
    from servebench.errors import PlanError
    from servebench.plan import plan_spec

    spec = parse_sweep({
        "name": "s", "price_per_hour": 1.0, "load": {"concurrency": [1]},
        "workloads": [{"kind": "long_context", "name": "long", "output_tokens": 400,
                       "num_requests": 2}],
        "targets": [{"name": "t", "stack": "llama_cpp", "variants": [
            {"name": "v", "model": "build/models/adder-3m-f16.gguf", "max_model_len": 256}]}],
    }, "s.yaml")
    with pytest.raises(PlanError, match=r"variants\[0\]\(name=v\)\.max_model_len: workload "
                                        r"long: 0.9 of max_model_len 256"):
        plan_spec(spec, "s.yaml")
