"""The speculative-decoding lines of the digest, the report and the summary."""

import pandas as pd
from servebench.notify.speculation import speculation_lines


def test_one_line_per_speculative_variant_with_its_acceptance_and_answers():
    cells = pd.DataFrame([
        {"target": "t", "variant": "spec", "spec_draft_tokens": 100.0,
         "spec_accepted_tokens": 60.0, "spec_acceptance_rate": 0.6,
         "spec_acceptance_length": 3.4,
         "gate_reason": "identical answers to f16 on all 200 items; 100.0% of baseline"},
        {"target": "t", "variant": "spec", "spec_draft_tokens": 100.0,
         "spec_accepted_tokens": 70.0, "spec_acceptance_rate": 0.7,
         "spec_acceptance_length": 3.8, "gate_reason": "identical answers to f16 on all 200 "
         "items; 100.0% of baseline"},
        {"target": "t", "variant": "f16", "spec_draft_tokens": None,
         "spec_accepted_tokens": None, "spec_acceptance_rate": None,
         "spec_acceptance_length": None, "gate_reason": "the reference variant"},
    ])
    assert speculation_lines(cells) == [
        "t/spec: acceptance 60%-70%, 3.40-3.80 tokens per target step, 130 of 200 drafted "
        "tokens accepted over 2 cells; answers: identical answers to f16 on all 200 items"]
    assert speculation_lines(cells[cells["variant"] == "f16"]) == []
