"""The table of quantized formats (servebench.config.formats) holds together: names the
adapters look up lowercased, schemes whose checkpoint is a format of the table, engines that
are the registered GPU adapters, and vLLM's CPU refusals naming the table's schemes."""

from servebench.config.formats import (
    COMPRESSED_TENSORS,
    FORMATS,
    HF_ENGINES,
    METHODS,
    SCHEMES,
    file_schemes,
    scheme_problem,
)
from servebench.stacks import get_stack
from servebench.stacks.gpu import HfGpuStack
from servebench.stacks.vllm import CPU_RECIPE_FLAG_DTYPES, CPU_RECIPE_FLAGS, CPU_REFUSED_SCHEMES

BY_QUANT = {f.quant: f for f in FORMATS}


def test_each_name_is_one_lowercase_row_served_or_refused_per_engine():
    assert len(BY_QUANT) == len(FORMATS)
    for f in FORMATS:
        assert f.quant == f.quant.lower(), f.quant  # adapters look variant.quant.lower() up
        assert set(f.serve) | set(f.refuse) <= set(HF_ENGINES), f.quant
        assert not set(f.serve) & set(f.refuse), f.quant
        assert (f.quant_method is not None) == (f.kind in ("checkpoint", "online")), f.quant
    assert all(isinstance(get_stack(engine), HfGpuStack) for engine in HF_ENGINES)


def test_every_scheme_makes_a_compressed_tensors_format_of_the_table():
    assert len({s.name for s in SCHEMES}) == len(SCHEMES)
    for scheme in SCHEMES:
        assert set(scheme.methods) <= set(METHODS), scheme.name
        for quant in scheme.quants:
            assert BY_QUANT[quant].quant_method == COMPRESSED_TENSORS, (scheme.name, quant)
            assert scheme_problem(scheme.name, quant.upper()) is None
    assert [s.name for s in SCHEMES if "w4a16" in s.quants] == ["W4A16", "W4A16_ASYM"]
    assert all(COMPRESSED_TENSORS in s.quants for s in SCHEMES)
    assert scheme_problem("W3A5", "none") is None  # not the table's: the engine will say


def test_vllms_cpu_refusals_name_the_tables_schemes():
    named = {*CPU_RECIPE_FLAGS, *CPU_REFUSED_SCHEMES, *(s for s, _ in CPU_RECIPE_FLAG_DTYPES)}
    assert named <= {s.name for s in SCHEMES}


def test_a_recipe_files_scheme_lines_are_read_in_order():
    text = ("stage:\n  modifiers:\n    GPTQModifier:\n      scheme: 'W4A16'\n"
            "    QuantizationModifier: {targets: [Linear]}\n      scheme: FP8_DYNAMIC\n")
    assert file_schemes(text) == ["W4A16", "FP8_DYNAMIC"]
