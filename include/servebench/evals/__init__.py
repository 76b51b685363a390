"""Golden-set evals: the sets, their scorers, the runner and the quality gate. Importing the
package registers every scorer, the LLM judge ("judge", in ``judge``) beside the built-in ones
of ``scorers``."""

from servebench.evals import judge  # noqa: F401  (registers "judge")
