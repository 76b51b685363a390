#!/usr/bin/env python3
"""Convert the project's local HF checkpoint to GGUF (f16) and quantize it (q8_0, q4_k_m, q2_k).

Uses llama.cpp's own converter (convert_hf_to_gguf.py and its vendored gguf-py, from the source
tree that scripts/build_llama_cpp.sh caches next to the binaries) and llama-quantize.

Run with the stacks venv (it has torch, numpy, sentencepiece, transformers):

  .venv-stacks/bin/python scripts/build_local_model.py \
      --llama-bin "$(scripts/build_llama_cpp.sh | tail -1)"

Writes <out>/adder-3m-{f16,q8_0,q4_k_m,q2_k}.gguf and prints their paths, one a line; with
``--checkpoint include/models/adder-300k --quants ""`` the draft model's f16 GGUF alone.
Idempotent: an output newer than every checkpoint file is kept as it is.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
QUANTS = ("q8_0", "q4_k_m", "q2_k")


def default_llama_bin() -> Path:
    cache = Path(os.environ.get("SERVEBENCH_CACHE")
                 or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "servebench")
    version = os.environ.get("LLAMA_CPP_PYTHON_VERSION", "0.3.36")
    tag = os.environ.get("LLAMA_CPP_BUILD_TAG", "noamx")
    return cache / f"llama.cpp-{version}-{tag}" / "build" / "bin"


def find_src(llama_bin: Path) -> Path:
    """The llama.cpp source tree that holds convert_hf_to_gguf.py (build/bin -> ../../src)."""
    for cand in (llama_bin.parent.parent / "src", llama_bin.parent.parent):
        if (cand / "convert_hf_to_gguf.py").is_file():
            return cand
    raise SystemExit(f"convert_hf_to_gguf.py not found next to {llama_bin} (run scripts/build_llama_cpp.sh)")


def is_fresh(out: Path, checkpoint: Path) -> bool:
    if not out.is_file() or out.stat().st_size == 0:
        return False
    newest = max(p.stat().st_mtime for p in checkpoint.iterdir() if p.is_file())
    return out.stat().st_mtime > newest


def convert_f16(checkpoint: Path, out: Path, src: Path) -> None:
    """Run the vendored converter in a child process (so its sys.path/sys.argv/monkeypatch stay
    contained) with an unknown BPE pre-tokenizer hash mapped to "gpt-2": our tokenizer uses the
    plain GPT-2 byte-level pre-tokenizer regex, which the converter only knows by hash."""
    code = f"""
import logging, runpy, sys
sys.path.insert(0, {str(src)!r})
sys.path.insert(1, {str(src / 'gguf-py')!r})
import conversion.base as base
_orig = base.TextModel.get_vocab_base_pre
def _get_vocab_base_pre(self, tokenizer):
    try:
        return _orig(self, tokenizer)
    except NotImplementedError:
        logging.getLogger("servebench").warning("unknown BPE pre-tokenizer hash: using 'gpt-2'")
        return "gpt-2"
base.TextModel.get_vocab_base_pre = _get_vocab_base_pre
sys.argv = ["convert_hf_to_gguf.py", {str(checkpoint)!r}, "--outtype", "f16", "--outfile", {str(out)!r}]
runpy.run_path({str(src / 'convert_hf_to_gguf.py')!r}, run_name="__main__")
"""
    tmp = out.with_suffix(".gguf.tmp")
    code = code.replace(repr(str(out)), repr(str(tmp)))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=src)
    tmp.replace(out)


def quantize(llama_bin: Path, f16: Path, out: Path, qtype: str) -> None:
    tmp = out.with_suffix(".gguf.tmp")
    subprocess.run([str(llama_bin / "llama-quantize"), str(f16), str(tmp), qtype.upper()],
                   check=True, stdout=sys.stderr)
    tmp.replace(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", type=Path, default=REPO / "include/models/adder-3m")
    ap.add_argument("--out", type=Path, default=REPO / "build/models")
    ap.add_argument("--llama-bin", type=Path, default=None,
                    help="dir with llama-quantize (default: the scripts/build_llama_cpp.sh cache)")
    ap.add_argument("--name", default=None, help="output name prefix (default: the checkpoint dir name)")
    ap.add_argument("--quants", default=",".join(QUANTS),
                    help="comma-separated llama-quantize types beside f16 ('' for none)")
    args = ap.parse_args()

    checkpoint = args.checkpoint.resolve()
    llama_bin = (args.llama_bin or default_llama_bin()).resolve()
    if not (checkpoint / "config.json").is_file():
        raise SystemExit(f"no HF checkpoint at {checkpoint}")
    if not (llama_bin / "llama-quantize").is_file():
        raise SystemExit(f"no llama-quantize in {llama_bin} (run scripts/build_llama_cpp.sh)")
    name = args.name or checkpoint.name
    args.out.mkdir(parents=True, exist_ok=True)

    f16 = (args.out / f"{name}-f16.gguf").resolve()
    written = []
    if not is_fresh(f16, checkpoint):
        convert_f16(checkpoint, f16, find_src(llama_bin))
    written.append(f16)
    for q in filter(None, args.quants.split(",")):
        out = (args.out / f"{name}-{q}.gguf").resolve()
        if not (is_fresh(out, checkpoint) and out.stat().st_mtime >= f16.stat().st_mtime):
            quantize(llama_bin, f16, out, q)
        written.append(out)
    for p in written:
        print(p)


if __name__ == "__main__":
    main()
