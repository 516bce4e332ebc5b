"""A Llama-family model's config read back without transformers (quantized_cache.kept_config).

transformers' config classes live in its model packages, and importing transformers at all
is a large share of a start-up (figures: docs/speculative.md). The config kept beside a
quantized model is therefore read back as this plain object: the same attribute names and
values as transformers' class of the model (what llama_family builds from, what FusedTrunk and
the KV cache read). `transformers_config()` makes transformers' own class of it, for the code
that runs transformers' forward (llama_family's twin).
"""

from __future__ import annotations

import copy
from typing import Any


class LlamaFamilyConfig:
    """A config's values as attributes (transformers' `to_dict()` of it, read back)."""

    model_type: str = ""
    num_hidden_layers: int  # every kept config has it (declared for the type checker)
    # What transformers' generic config reports before a model picks its attention (HFTrunk).
    _attn_implementation: str | None = None

    def __init__(self, values: dict[str, Any]) -> None:
        self.__dict__.update(copy.deepcopy(values))

    def __repr__(self) -> str:
        return f"LlamaFamilyConfig({self.model_type!r})"

    def to_dict(self) -> dict[str, Any]:
        return copy.deepcopy(self.__dict__)

    def transformers_config(self) -> Any:
        """transformers' class of this model type with these values."""
        from transformers import AutoConfig

        values = self.to_dict()
        model_type = values.pop("model_type")
        return AutoConfig.for_model(model_type, **values)
