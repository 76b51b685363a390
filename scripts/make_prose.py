"""Writes include/servebench/data/prose.txt: the English prose that workloads cut their prompts
from (``text: natural``, the default).

The text is the prose of the Python Language Reference as the interpreter ships it for
``help()`` (``pydoc_data.topics``, PSF License): real English sentences with the word, phrase
and repetition statistics of technical writing -- no download (none can be made here), no
extra dependency. Code samples, tables and non-ASCII lines are left out; one paragraph a line,
whitespace collapsed. Committed, so every machine and Python version cuts the same prompts.
Deterministic: re-running on the same interpreter writes the same file.
"""

import re
import sys
from pathlib import Path
from pydoc_data.topics import topics

OUT = Path(__file__).resolve().parents[1] / "include" / "servebench" / "data" / "prose.txt"
HEADER = (f"# The prose of the Python Language Reference (pydoc_data.topics of Python "
          f"{sys.version_info.major}.{sys.version_info.minor}), PSF License; "
          "written by scripts/make_prose.py\n")


def paragraphs(text: str):
    for block in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in block.splitlines()]
        if not lines or any(">>>" in line or "::=" in line or "|" in line or "..." in line
                            or line.startswith(("=", "+", "-", "#", "$", "%"))
                            or set(line) <= set("*=-^~+") for line in lines):
            continue  # code, grammar, a table, an underline
        para = " ".join(lines).removeprefix("* ").replace("  ", " ")
        # prose: sentences of words, not a signature or an expression
        if (len(para) >= 80 and para.isascii() and para.endswith(".") and " " in para
                and sum(c.isalpha() or c == " " for c in para) / len(para) > 0.85):
            yield para


def main() -> None:
    seen, out = set(), []
    for name in sorted(topics):
        for para in paragraphs(topics[name]):
            if para not in seen:
                seen.add(para)
                out.append(para)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(HEADER + "".join(p + "\n" for p in out))
    print(OUT, len(out), "paragraphs", sum(map(len, out)), "characters")


if __name__ == "__main__":
    main()
