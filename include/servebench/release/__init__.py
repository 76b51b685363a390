"""The release gate: a candidate against its baseline on one host, interleaved (``gate``), and
a person's answer where the gate cannot decide (``decision``)."""
