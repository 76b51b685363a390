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


def test_gpus_are_described_from_nvidia_smi_rows_and_from_a_nodes_labels():
    from servebench.provenance import cuda_version, describe_gpus, gpus_from_node_labels

    rows = ["NVIDIA H100 80GB HBM3, 550.90.07, 1980 MHz, Enabled"] * 2 + \
        ["NVIDIA L4, 550.90.07, [N/A], [N/A]"]
    assert describe_gpus(rows, cuda_version("| Driver Version: 550.90.07  CUDA Version: 12.4 |")) \
        == ("2x NVIDIA H100 80GB HBM3 (driver 550.90.07, CUDA 12.4, max SM 1980 MHz, "
            "MIG Enabled) + 1x NVIDIA L4 (driver 550.90.07, CUDA 12.4)")
    assert describe_gpus([], None) is None and cuda_version("no GPU") is None
    labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8",
              "nvidia.com/cuda.driver.major": "535", "nvidia.com/cuda.driver.minor": "104",
              "nvidia.com/cuda.driver.rev": "05", "nvidia.com/cuda.runtime-version.full": "12.2",
              "nvidia.com/mig.strategy": "single"}
    assert gpus_from_node_labels(labels) == \
        "8x NVIDIA-A100-SXM4-80GB (driver 535.104.05, CUDA 12.2, MIG single)"
    assert gpus_from_node_labels({"kubernetes.io/os": "linux"}) is None


def test_the_suite_sha_baked_into_an_image_wins(monkeypatch):
    from servebench.provenance import suite_git_sha

    monkeypatch.setenv("SERVEBENCH_SUITE_GIT_SHA", "0123abc")
    suite_git_sha.cache_clear()
    try:
        assert suite_git_sha() == "0123abc"
    finally:
        suite_git_sha.cache_clear()
