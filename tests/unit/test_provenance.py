"""Hardware provenance carries the CPU features that select llama.cpp's kernels."""

from servebench.provenance import cpu_isa, hardware

SAPPHIRE_RAPIDS = """processor\t: 0
model name\t: Intel(R) Xeon(R) Platinum 8488C
flags\t\t: fpu sse avx avx2 fma f16c avx512f avx512bw avx512vl avx512_vnni avx512_bf16 \
avx512_fp16 avx_vnni amx_bf16 amx_tile amx_int8
"""
EPYC_ZEN3 = """model name\t: AMD EPYC 7B13
flags\t\t: fpu sse avx avx2 fma f16c bmi2
"""
GRAVITON = """processor\t: 0
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid sve i8mm
"""


def test_isa_of_an_amx_xeon():
    assert cpu_isa(SAPPHIRE_RAPIDS) == [
        "avx2", "fma", "f16c", "avx_vnni", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
        "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16",
    ]


def test_isa_without_avx512_or_amx():
    assert cpu_isa(EPYC_ZEN3) == ["avx2", "fma", "f16c"]


def test_isa_of_an_arm_host():
    assert cpu_isa(GRAVITON) == ["asimd", "sve", "i8mm"]


def test_hosts_that_differ_in_amx_record_different_hardware():
    assert cpu_isa(SAPPHIRE_RAPIDS) != cpu_isa(SAPPHIRE_RAPIDS.replace(" amx_int8", ""))


def test_this_hosts_hardware_string_names_its_isa():
    text = hardware()
    assert "; isa " in text
    assert text.split("; isa ")[1] != ""
