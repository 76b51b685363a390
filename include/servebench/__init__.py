"""servebench: nightly benchmarks of LLM serving stacks."""
