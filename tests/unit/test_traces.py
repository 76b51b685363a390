"""Trace files (servebench's own rows, Azure's and Mooncake's public formats) and the prompts a
``trace`` workload builds from them: lengths, arrival times, shared blocks."""

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from servebench import traces
from servebench.config import TraceWorkload, parse_sweep
from servebench.errors import TraceError
from servebench.settings import PROJECT_ROOT
from servebench.tokenizer import FileTokenizer
from servebench.traces import read_trace, select
from servebench.workloads import build_prompts, max_sequence_tokens, trace_requests

SHIPPED = "include/datasets/trace-mooncake-small.jsonl"


@pytest.fixture(scope="module")
def tok():
    return FileTokenizer(PROJECT_ROOT / "include" / "models" / "adder-3m")


def test_mooncake_rows_are_milliseconds_and_chains_of_blocks(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 27482, "input_length": 655, "output_length": 52, '
                    '"hash_ids": [46, 48]}\n'
                    '{"timestamp": 0, "input_length": 655, "output_length": 52, '
                    '"hash_ids": [46, 47]}\n'
                    '{"timestamp": 10535, "input_length": 672, "output_length": 26, '
                    '"hash_ids": [46, 47]}\n')
    rows = read_trace(path)
    assert [r.arrival_s for r in rows] == [0.0, 10.535, 27.482]  # sorted by arrival
    # a block is the same only after the same blocks: 47 after 46, and 48 after 46 differ
    assert rows[0].blocks == (("46", 512), ("46:47", 512)) == rows[1].blocks
    assert rows[2].blocks == (("46", 512), ("46:48", 512))


def test_azure_rows_have_date_times_and_no_shared_prefix(tmp_path):
    path = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                    "2023-11-16 18:15:46.6805900,4808,10\n"
                    "2023-11-16 18:15:50.9951690,3180,8\n")
    rows = read_trace(path)
    assert [(r.arrival_s, r.input_tokens, r.output_tokens, r.blocks) for r in rows] == [
        (0.0, 4808, 10, ()), (4.314579, 3180, 8, ())]


def test_own_rows_from_csv_and_parquet_with_groups_or_hash_ids(tmp_path):
    csv = tmp_path / "t.csv"
    csv.write_text("arrival_s,input_tokens,output_tokens,prefix_group,prefix_tokens\n"
                   "0,100,10,sys,50\n0.5,120,10,,\n")
    assert [r.blocks for r in read_trace(csv)] == [(("group:sys", 50),), ()]
    parquet = tmp_path / "t.parquet"
    pq.write_table(pa.table({"arrival_s": [0.0, 1.0], "input_tokens": [40, 40],
                             "output_tokens": [4, 4], "hash_ids": [[1, 2], [1, 3]]}), parquet)
    assert read_trace(parquet, block_tokens=16)[1].blocks == (("1", 16), ("1:3", 16))


def test_a_bad_trace_names_the_file_and_the_row(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"arrival_s": 0, "input_tokens": 5, "output_tokens": 1}\n'
                    '{"arrival_s": 1, "input_tokens": 0, "output_tokens": 1}\n')
    with pytest.raises(TraceError, match=r"t.jsonl: row 2 \(servebench\): input and output"):
        read_trace(path)
    other = tmp_path / "o.jsonl"
    other.write_text('{"when": 0, "tokens": 5}\n')
    with pytest.raises(TraceError, match=r"o.jsonl: row 1: columns \['tokens', 'when'\] match"):
        read_trace(other)


AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _azure_csv(path, seconds):
    path.write_text(AZURE_HEAD + "".join(
        f"2024-05-10 00:00:{s:02d}.009930+00:00,{100 + s},{10 + s}\n" for s in seconds))


@pytest.mark.parametrize("limit", [{"max_requests": 3}, {"max_duration_s": 5.0}])
@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_a_replay_reads_no_row_past_its_limits(tmp_path, suffix, limit):
    # rows at 0, 1, 2 and 10 s, then one no reader can take: a replay of the first three
    # requests (or of 5 s) stops at the 10-s row and never meets the bad one
    good = [(f"2024-05-10 00:00:{s:02d}.009930+00:00", 100 + s, 10 + s) for s in (0, 1, 2, 10)]
    path = tmp_path / f"azure{suffix}"
    if suffix == ".csv":
        path.write_text(AZURE_HEAD + "".join(f"{t},{i},{o}\n" for t, i, o in good)
                        + "yesterday,many,\n")
    elif suffix == ".jsonl":
        path.write_text("".join(f'{{"TIMESTAMP": "{t}", "ContextTokens": {i}, '
                                f'"GeneratedTokens": {o}}}\n' for t, i, o in good)
                        + '{"TIMESTAMP": "2024-05-10 00:00:11", "ContextTok\n')
    else:  # a Parquet cell has its column's type: the bad row asks for no output
        stamps, ins, outs = (list(c) for c in zip(*good, strict=True))
        pq.write_table(pa.table({"TIMESTAMP": stamps + ["2024-05-10 00:00:11+00:00"],
                                 "ContextTokens": ins + [5], "GeneratedTokens": outs + [0]}),
                       path)
    with pytest.raises(TraceError, match="row 5"):
        read_trace(path)  # the whole file
    workload = TraceWorkload(kind="trace", name="t", path=path.name, **limit)
    rows = trace_requests(workload, tmp_path)
    assert [(r.arrival_s, r.input_tokens, r.output_tokens) for r in rows] == [
        (0.0, 100, 10), (1.0, 101, 11), (2.0, 102, 12)]


def test_rows_out_of_order_before_the_limit_are_read_whole_and_sorted(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text("".join(f'{{"timestamp": {ms}, "input_length": {n}, "output_length": 4}}\n'
                            for ms, n in ((5000, 50), (1000, 10), (3000, 30), (0, 1))))
    rows = traces.load_trace(path, max_requests=2)
    assert [(r.arrival_s, r.input_tokens) for r in rows] == [(0.0, 1), (1.0, 10)]
    assert list(rows) == select(read_trace(path), max_requests=2)


def test_a_trace_is_read_once_for_the_plan_the_warm_up_and_every_variants_cell(
        tmp_path, monkeypatch, tok):
    reads = []
    real = traces._rows

    def counted(*args, **kwargs):
        reads.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(traces, "_rows", counted)
    path = tmp_path / "azure.csv"
    _azure_csv(path, range(6))
    workload = TraceWorkload(kind="trace", name="t", path=path.name, max_requests=4)
    longest = max_sequence_tokens(workload, tmp_path)  # the plan
    assert longest == 103 + 13
    for variant in ("v1", "v2"):  # a unit: each variant's warm-up, then its cell
        warm = build_prompts(workload, tok, 1, tmp_path, key=f"{variant}:warmup", count=2)
        cell = build_prompts(workload, tok, 1, tmp_path, key=variant)
        assert [i.input_tokens for i in warm] == [100, 101]
        assert [i.input_tokens for i in cell] == [100, 101, 102, 103]
    assert reads == [path]
    # another version of the file (size and modification time) is read again
    _azure_csv(path, range(20, 26))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert [i.input_tokens for i in build_prompts(workload, tok, 1, tmp_path)] == [
        120, 121, 122, 123]
    assert reads == [path, path]


def test_select_scales_caps_and_clips_keeping_whole_blocks():
    rows = read_trace(PROJECT_ROOT / SHIPPED, block_tokens=32)
    half = select(rows, time_scale=0.5)
    assert [r.arrival_s for r in half] == pytest.approx([r.arrival_s / 2 for r in rows])
    assert len(select(rows, max_requests=5)) == 5
    early = select(rows, max_duration_s=2.0)
    assert early and all(r.arrival_s < 2.0 for r in early) and len(early) < len(rows)
    clipped = select(rows, max_input_tokens=70, max_output_tokens=8)
    assert all(r.input_tokens <= 70 and r.output_tokens <= 8 for r in clipped)
    assert all(sum(t for _, t in r.blocks) <= r.input_tokens for r in clipped)


def test_trace_prompts_share_the_blocks_their_rows_share(tok):
    workload = TraceWorkload(kind="trace", name="t", path=SHIPPED, block_tokens=32,
                             time_scale=0.5)
    items = build_prompts(workload, tok, seed=1, root=PROJECT_ROOT, key="k")
    rows = select(read_trace(PROJECT_ROOT / SHIPPED, block_tokens=32), time_scale=0.5)
    assert len(items) == len(rows) == 40
    for item, row in zip(items, rows, strict=True):
        text = item.messages[0]["content"]
        assert len(tok.encode(text)) == item.input_tokens == max(row.input_tokens, 8)
        assert item.output_tokens == row.output_tokens and item.arrival_s == row.arrival_s
    # two rows beginning with the same chain begin with the same tokens, as far as it goes
    first = {}
    for item, row in zip(items, rows, strict=True):
        if row.blocks:
            head = tok.encode(item.messages[0]["content"])[:row.blocks[0][1] - 2]
            first.setdefault(row.blocks[0][0], head)
            assert first[row.blocks[0][0]] == head
    assert len(first) == 3  # the trace's three system prompts
    # shared tokens: the leading blocks an earlier row sent; a first occurrence shares none
    assert items[0].shared_tokens == 0
    assert sum(i.shared_tokens for i in items) > 0
    # another cell's key: the same lengths and arrivals, other text
    other = build_prompts(workload, tok, seed=1, root=PROJECT_ROOT, key="other")
    assert [i.input_tokens for i in other] == [i.input_tokens for i in items]
    assert other[0].messages != items[0].messages
    assert max_sequence_tokens(workload, PROJECT_ROOT) == max(
        max(r.input_tokens, 8) + r.output_tokens for r in rows)


def test_a_trace_workload_has_its_own_load_point_and_needs_no_sweep_points():
    base = {"name": "s", "price_per_hour": 1.0,
            "targets": [{"name": "t", "stack": "llama_cpp",
                         "variants": [{"name": "v", "model": "m.gguf"}]}]}
    trace = {"kind": "trace", "name": "tr", "path": SHIPPED}
    spec = parse_sweep({**base, "workloads": [trace], "load": {"max_concurrency": 8}}, "s.yaml")
    [point] = spec.load.points_for(spec.workloads[0])
    assert (point.label, point.mode, point.concurrency) == ("trace", "trace", 8)
    fixed = {"kind": "fixed", "name": "f", "input_tokens": 8, "output_tokens": 4,
             "num_requests": 2}
    with pytest.raises(ValueError, match="only trace workloads bring their own"):
        parse_sweep({**base, "workloads": [trace, fixed], "load": {}}, "s.yaml")
