"""The engine: no UI, no network. Everything that touches llama.cpp or probabilities."""

from specchat.engine.llama_backend import BackendConfig, LlamaModel, Reading
from specchat.engine.policy import DEFAULT_POLICY, AutoPolicy
from specchat.engine.sampling import SamplingParams
from specchat.engine.speculative import (
    FIXED_K_MODES,
    MODES,
    RANDOM_SEED,
    Engine,
    GenerationSettings,
    TokenEvent,
    VerifyStep,
)
from specchat.engine.stats import Stats

__all__ = [
    "DEFAULT_POLICY",
    "FIXED_K_MODES",
    "MODES",
    "RANDOM_SEED",
    "AutoPolicy",
    "BackendConfig",
    "Engine",
    "GenerationSettings",
    "LlamaModel",
    "Reading",
    "SamplingParams",
    "Stats",
    "TokenEvent",
    "VerifyStep",
]
