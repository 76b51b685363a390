"""`servebench smoke` against real processes: every local variant serves (on any CPU), and a
server that crashes under a batch of requests, or never starts on a bad GGUF, is a loud
failure naming the model file and how the process died.

Needs `make setup` (llama.cpp, the GGUFs and the stacks venv).
"""

import os
import signal
import stat
import sys
import textwrap

import pytest
from servebench.cli import main as cli_main
from servebench.config import load_sweep, parse_sweep
from servebench.settings import PROJECT_ROOT, Settings
from servebench.smoke import smoke_sweep
from servebench.stacks.vllm import cpu_flags

pytestmark = pytest.mark.integration

LOCAL = PROJECT_ROOT / "include/sweeps/local.yaml"


# two of vLLM's variants of the local sweep, both made by a recipe here (the smoke makes their
# checkpoints as the quantize step does), one of them refused below AVX-512F; the nightly DAG
# test serves every one, at 30 s a start, and checks each refusal
VLLM_SMOKED = ("w8a8-int8", "w4a16-gptq")


def test_every_local_variant_serves(tmp_path):
    """The guarantee `make models` relies on: each llama.cpp and transformers variant of the
    local sweep, and a recipe-made vLLM one, launched as the benchmark launches it, answers a
    full batch of concurrent requests; what this CPU cannot run is refused, saying why."""
    raw = load_sweep(LOCAL).model_dump(mode="json", exclude_none=True)
    for target in raw["targets"]:
        if target["stack"] == "vllm":
            target["variants"] = [v for v in target["variants"] if v["name"] in VLLM_SMOKED]
            target["baseline"] = "w8a8-int8"
    raw.pop("cross_stack", None)
    spec = parse_sweep(raw, "test")
    results = smoke_sweep(spec, Settings(), tmp_path)
    expected = {(t.name, v.name) for t in spec.targets for v in t.variants}
    assert {(r.target, r.variant) for r in results} == expected
    # vLLM's CPU build runs 4-bit weights on AVX-512F CPUs only, an fp8 KV cache with AVX-512F
    # or AMX, and with AMX its W8A8 in bfloat16 or half only (this kind of worker's CPUs
    # vary): those are refused, saying so
    flags = cpu_flags()
    why = {**({} if "avx512f" in flags else
              dict.fromkeys(["w4a16-gptq", "w4a16-awq"], "built only for CPUs with avx512f")),
           **({} if {"avx512f", "amx_tile"} & flags else
              {"bf16-kv-fp8": "keeps an fp8 KV cache only on CPUs with avx512f or amx_tile"}),
           **({"w8a8-int8": "computes in bfloat16 or float16"}
              if "amx_tile" in flags else {})}
    refused = set(why)
    assert all(why[r.variant] in r.line() for r in results
               if r.variant in refused and not r.ok)
    assert [r.line() for r in results if not r.ok and r.variant not in refused] == []
    assert not list(tmp_path.glob("*.server.json")), "a smoke server was left running"


def _one_variant_sweep(model: str) -> dict:
    spec = load_sweep(LOCAL).model_dump(mode="json", exclude_none=True)
    target = next(t for t in spec["targets"] if t["stack"] == "llama_cpp")
    variant = {**target["variants"][0], "name": "v", "model": model}
    spec["targets"] = [{**target, "baseline": "v", "variants": [variant]}]
    spec.pop("cross_stack", None)
    return spec


# a stand-in llama-server that is healthy, then dies by SIGSEGV on the first batch of
# requests -- what llama.cpp's AMX kernels did on c7i hosts
CRASHING_SERVER = textwrap.dedent("""\
    #!{python}
    import http.server, os, signal, sys
    port = int(sys.argv[sys.argv.index("--port") + 1])
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200); self.end_headers(); self.wfile.write(b"{{}}")
        def do_POST(self):
            os.kill(os.getpid(), signal.SIGSEGV)
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """)


def _stand_in_sweep(tmp_path, monkeypatch, script: str, model_name: str):
    """A one-variant sweep whose llama-server is ``script`` (a stand-in, in a bin folder the
    settings name) serving a placeholder GGUF ``model_name``; the sweep and the model."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    server = bin_dir / "llama-server"
    server.write_text(script.format(python=sys.executable))
    server.chmod(server.stat().st_mode | stat.S_IXUSR)
    model = tmp_path / model_name
    model.write_bytes(b"GGUF")
    monkeypatch.setenv("SERVEBENCH_LLAMA_BIN", str(bin_dir))
    return parse_sweep(_one_variant_sweep(str(model)), "test"), model


def test_a_server_killed_by_a_signal_fails_loudly(tmp_path, monkeypatch, capsys):
    spec, model = _stand_in_sweep(tmp_path, monkeypatch, CRASHING_SERVER, "adder-crash.gguf")
    [result] = smoke_sweep(spec, Settings(), tmp_path / "state")
    assert not result.ok
    assert "killed by SIGSEGV (-11)" in result.problem
    assert str(model) in result.line()

    sweep_file = tmp_path / "sweep.json"
    sweep_file.write_text(spec.model_dump_json())
    assert cli_main(["smoke", str(sweep_file)]) == 1
    err = capsys.readouterr().err
    assert "SIGSEGV" in err and str(model) in err and "1 of 1 variants do not serve" in err
    assert not list((tmp_path / "state").glob("*.server.json"))


# a stand-in llama-server that closes its first chat request's connection without a byte of
# answer -- what llama-server 0.3.36 does now and then to one of a batch of concurrent
# requests -- and answers every other with a finished stream
DROPS_ONE_SERVER = textwrap.dedent("""\
    #!{python}
    import http.server, sys, threading
    port = int(sys.argv[sys.argv.index("--port") + 1])
    lock, posts = threading.Lock(), []
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_GET(self):
            self.send_response(200); self.send_header("Content-Length", "2"); self.end_headers()
            self.wfile.write(b"{{}}")
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                posts.append(1); first = len(posts) == 1
            if first:
                self.close_connection = True
                return
            body = b'data: {{"choices":[{{"finish_reason":"length"}}]}}\\n\\ndata: [DONE]\\n\\n'
            self.send_response(200); self.send_header("Content-Length", str(len(body)))
            self.end_headers(); self.wfile.write(body)
        def log_message(self, *a):
            pass
    http.server.ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
    """)


def test_a_request_closed_unanswered_is_sent_again_and_said(tmp_path, monkeypatch):
    """A server that drops one request of the batch unanswered and answers it when sent again
    serves; the smoke's line says so."""
    spec, _ = _stand_in_sweep(tmp_path, monkeypatch, DROPS_ONE_SERVER, "adder.gguf")
    [result] = smoke_sweep(spec, Settings(), tmp_path / "state")
    assert result.ok, result.line()
    assert result.resent == 1
    assert "1 request(s) closed without an answer, answered when sent again" in result.line()


def test_a_gguf_the_server_cannot_load_fails_loudly(tmp_path):
    good = Settings().resolve("build/models/adder-3m-q8_0.gguf")
    broken = tmp_path / "adder-truncated.gguf"
    broken.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    spec = parse_sweep(_one_variant_sweep(str(broken)), "test")
    [result] = smoke_sweep(spec, Settings(), tmp_path / "state")
    assert not result.ok
    assert "launch failed" in result.problem and "exited with code" in result.problem
    assert str(broken) in result.line()


def test_describe_exit_names_signals():
    from servebench.provision.local import describe_exit

    assert describe_exit(-signal.SIGSEGV) == "killed by SIGSEGV (-11)"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL (-9)"
    assert describe_exit(3) == "exited with code 3"
    assert os.EX_OK == 0 and describe_exit(0) == "exited with code 0"


def test_engine_version_in_provenance_names_the_build_flags():
    from servebench.stacks import get_stack

    version = get_stack("llama_cpp").version(Settings())
    assert "llama-cpp-python==" in version and "-mno-amx-int8" in version


@pytest.mark.parametrize("method", ["draft", "eagle3", "mtp", "ngram"])
def test_llama_servers_own_parser_takes_every_speculative_flag_rendered(tmp_path, method):
    """Each speculative method the adapter maps, locally and in a container, parsed by the
    built llama-server itself (``--help`` after the flags: an unknown one exits 1 first)."""
    import subprocess

    from servebench.config import VariantSpec
    from servebench.config.variants import SpeculativeSpec
    from servebench.stacks import get_stack

    settings = Settings()
    draft = "build/models/adder-300k-f16.gguf" if method in ("draft", "eagle3") else None
    variant = VariantSpec(name="s", model="build/models/adder-3m-f16.gguf", quant="f16",
                          threads=1, speculative=SpeculativeSpec(
                              method=method, draft_model=draft, num_speculative_tokens=4,
                              ngram_max=3 if method == "ngram" else None))
    stack = get_stack("llama_cpp")
    assert stack.check(variant, settings) == []
    local = stack.local_launch(variant, host="127.0.0.1", port=1, settings=settings).argv
    container = stack.container_launch(variant, port=1, settings=settings).command
    server = str(settings.llama_bin / "llama-server")
    for argv in (local[1:], container):
        out = subprocess.run([server, *argv, "--help"], capture_output=True, text=True,
                             timeout=30, check=False)
        assert out.returncode == 0, out.stderr[-500:]
    bogus = subprocess.run([server, *local[1:], "--spec-bogus", "1", "--help"],
                           capture_output=True, text=True, timeout=30, check=False)
    assert bogus.returncode == 1 and "--spec-bogus" in bogus.stderr
