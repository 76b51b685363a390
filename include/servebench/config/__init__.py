"""The sweep spec: what the user writes in ``include/sweeps/*.yaml``, as pydantic models.

One sampling spec per sweep (applied to every stack and to the golden-set eval), workloads,
load points, SLOs and price, and the targets with their variants. ``load_sweep`` validates a
file and raises :class:`SpecError` naming the file and the field, before anything launches.

Each section in its own module, every name importable from here: ``sampling`` (the sampling
spec), ``workloads`` (the prompts), ``load`` (load points, the SLO search), ``judging`` (SLOs,
golden sets, the quality gate, cross-stack groups, trends), ``variants`` (each stack's
options), ``provision`` (where servers come from) and ``sweep`` (targets, the whole sweep,
reading a file); ``base`` what they share.
"""

from servebench.config.judging import CrossStackGroup, GateSpec, GoldenSetRef, SLOSpec, TrendsSpec
from servebench.config.load import LoadPoint, LoadPoints, SloSearch
from servebench.config.provision import (HOSTED_STACKS, Ec2Fallback, Ec2Placement, Ec2Provision,
                                         KubernetesProvision, LocalProvision, Provision,
                                         StaticProvision)
from servebench.config.sampling import SamplingSpec
from servebench.config.sweep import SweepSpec, TargetSpec, load_sweep, parse_sweep
from servebench.config.variants import (STACK_OPTIONS, ContainerOption, DtypeOption, EndpointSpec,
                                        GpuOptions, HfGpuVariant, LlamaCppVariant, SpeculativeSpec,
                                        ThreadsOption, TransformersVariant, VariantOptions,
                                        VariantSpec, VllmVariant, stack_options)
from servebench.config.workloads import (ChatLengthsWorkload, FixedWorkload, LongContextWorkload,
                                         MultiTurnWorkload, SharedPrefixWorkload, TraceWorkload,
                                         Workload)
from servebench.errors import SpecError

__all__ = [
    "HOSTED_STACKS", "STACK_OPTIONS", "ChatLengthsWorkload", "ContainerOption", "CrossStackGroup",
    "DtypeOption", "Ec2Fallback", "Ec2Placement", "Ec2Provision", "EndpointSpec",
    "FixedWorkload", "GateSpec", "GoldenSetRef", "GpuOptions", "HfGpuVariant",
    "KubernetesProvision", "LlamaCppVariant", "LoadPoint", "LoadPoints", "LocalProvision",
    "LongContextWorkload", "MultiTurnWorkload", "Provision", "SLOSpec", "SamplingSpec",
    "SharedPrefixWorkload", "SloSearch", "SpecError", "SpeculativeSpec", "StaticProvision",
    "SweepSpec", "TargetSpec", "ThreadsOption", "TraceWorkload", "TransformersVariant",
    "TrendsSpec", "VariantOptions", "VariantSpec", "VllmVariant", "Workload", "load_sweep",
    "parse_sweep", "stack_options",
]
