"""The Llama family's module tree (Llama, Mistral, Qwen2, Qwen3) without transformers' modeling
code, for a model rebuilt from the quantized cache (quantized_cache.py): the start-up path.

Importing a transformers modeling module pulls in most of torch's compiler, distributed tensors
and sympy, the largest single cost of a server's first suggestion after start (docs/latency.md).
The decoders do not need it: they run the model through FusedTrunk (fused_trunk.py), which reads
only the weights and a few numbers from these modules. So a cached model is built as this tree,
with the same module names, parameter names and arithmetic as transformers' classes:

- the decoder layers, norms, embedding, head and rotary tables that FusedTrunk and the
  quantized cache use (`model.base_model.layers[i].self_attn.q_proj`, ...);
- `forward` (and the trunk's) for the code that calls the model as transformers does (KV cache
  compression, chunk scoring, training): on the first such call, transformers' own class is
  built around the very same modules (weights shared, nothing copied) and runs it. Only that
  call pays the import.

`unsupported_reason(config)` says when a model is outside what this tree reproduces exactly (a
dynamic rotary scaling, sliding-window attention, another activation); those are built with
transformers' class as before.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from .family_config import LlamaFamilyConfig
from .kv_cache import for_transformers, plain_attention

FAMILY = frozenset({"llama", "mistral", "qwen2", "qwen3"})
# Rotary scalings whose tables are fixed at build time (the dynamic ones change with the length).
STATIC_ROPE_TYPES = frozenset({"default", "linear", "llama3", "yarn"})
TRANSFORMERS_MODEL = "_transformers_model"  # where the model keeps transformers' twin, once built


def unsupported_reason(config: Any) -> str | None:
    """Why this tree cannot stand in for transformers' class of `config`; None when it can."""
    if getattr(config, "model_type", None) not in FAMILY:
        return f"model type {getattr(config, 'model_type', None)!r} is not of the Llama family"
    if getattr(config, "hidden_act", "silu") != "silu":
        return f"activation {config.hidden_act!r}"
    if getattr(config, "partial_rotary_factor", 1.0) != 1.0:
        return "partial rotary embeddings"
    if _rope(config).get("rope_type", "default") not in STATIC_ROPE_TYPES:
        return f"rotary scaling {_rope(config).get('rope_type')!r}"
    if not plain_attention(config):
        return "sliding-window or other non-plain attention layers"
    return None


def build(config: Any, dtype: torch.dtype) -> LlamaFamilyForCausalLM:
    """The model's modules with uninitialized weights of `dtype` (build it under
    `torch.device("meta")` and load a state dict with assign=True)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        return LlamaFamilyForCausalLM(config)
    finally:
        torch.set_default_dtype(before)


def _rope(config: Any) -> dict:
    parameters = getattr(config, "rope_parameters", None)
    if isinstance(parameters, dict) and "rope_type" not in parameters:
        return next(iter(parameters.values()), {})  # per layer type: one type here
    return parameters or {"rope_type": "default", "rope_theta": config.rope_theta}


def _head_dim(config: Any) -> int:
    heads = config.num_attention_heads
    return int(getattr(config, "head_dim", None) or config.hidden_size // heads)


class RMSNorm(nn.Module):
    """The Llama family's RMSNorm: the same operations in the same order as transformers'."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        dtype = hidden.dtype
        hidden = hidden.to(torch.float32)
        variance = hidden.pow(2).mean(-1, keepdim=True)
        hidden = hidden * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden.to(dtype)


class RotaryEmbedding(nn.Module):
    """cos / sin tables of the positions asked for, as transformers' static rotary embeddings
    compute them (float32, then the activations' dtype)."""

    inv_freq: torch.Tensor  # [D/2], a buffer that is not saved (made again on load)

    def __init__(self, config: Any) -> None:
        # The tables are made on the CPU even under the meta device (they are tiny, and meta
        # arithmetic would import torch's compiler): `to()` moves them with the model.
        super().__init__()
        inv_freq, self.attention_scaling = rope_tables(config)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(
        self, x: torch.Tensor, position_ids: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device)  # [B, S, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)  # [B, S, D]
        cos = emb.cos() * self.attention_scaling
        sin = emb.sin() * self.attention_scaling
        return cos.to(dtype=x.dtype), sin.to(dtype=x.dtype)


def rope_tables(config: Any) -> tuple[torch.Tensor, float]:
    """The inverse frequencies [D/2] (float32, on the CPU) and the attention scaling of the
    model's rotary embeddings: the default, linear and llama3 scalings computed here with
    transformers' arithmetic (modeling_rope_utils), the others by transformers."""
    rope = _rope(config)
    rope_type = rope.get("rope_type", "default")
    if rope_type not in ("default", "linear", "llama3"):
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        return ROPE_INIT_FUNCTIONS[rope_type](transformers_config(config), "cpu")
    dim = int(_head_dim(config) * rope.get("partial_rotary_factor", 1.0))
    steps = torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").to(dtype=torch.float)
    inv_freq = 1.0 / (rope["rope_theta"] ** (steps / dim))
    if rope_type == "default":
        return inv_freq, 1.0
    factor = rope["factor"]
    if rope_type == "linear":
        return inv_freq / factor, 1.0
    # llama3: long wavelengths divided by the factor, short ones kept, a smooth blend between.
    low_freq_factor, high_freq_factor = rope["low_freq_factor"], rope["high_freq_factor"]
    old_context = rope["original_max_position_embeddings"]
    low_freq_wavelen = old_context / low_freq_factor
    high_freq_wavelen = old_context / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, scaled), 1.0


class Attention(nn.Module):
    def __init__(self, config: Any, index: int) -> None:
        super().__init__()
        self.layer_idx = index
        self.head_dim = _head_dim(config)
        self.scaling = self.head_dim**-0.5
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        # Qwen2 has biases on q/k/v only; the others as their config says.
        qwen2 = config.model_type == "qwen2"
        qkv_bias = qwen2 or bool(getattr(config, "attention_bias", False))
        o_bias = not qwen2 and qkv_bias
        self.q_proj = nn.Linear(config.hidden_size, heads * self.head_dim, bias=qkv_bias)
        self.k_proj = nn.Linear(config.hidden_size, kv_heads * self.head_dim, bias=qkv_bias)
        self.v_proj = nn.Linear(config.hidden_size, kv_heads * self.head_dim, bias=qkv_bias)
        self.o_proj = nn.Linear(heads * self.head_dim, config.hidden_size, bias=o_bias)
        if config.model_type == "qwen3":
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)


class MLP(nn.Module):
    def __init__(self, config: Any) -> None:
        super().__init__()
        bias = bool(getattr(config, "mlp_bias", False))
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=bias)
        self.act_fn = nn.SiLU()


class DecoderLayer(nn.Module):
    def __init__(self, config: Any, index: int) -> None:
        super().__init__()
        self.self_attn = Attention(config, index)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class Trunk(nn.Module):
    """embeddings -> layers -> norm, named as transformers' `model.model`."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config
        self.padding_idx = config.pad_token_id
        # Given its table, Embedding skips its random init: on the meta device that init imports
        # torch's compiler, the very import this tree is here to avoid.
        table = torch.empty(config.vocab_size, config.hidden_size)
        self.embed_tokens: nn.Module = nn.Embedding(
            config.vocab_size, config.hidden_size, padding_idx=self.padding_idx, _weight=table
        )
        self.layers = nn.ModuleList(
            DecoderLayer(config, index) for index in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config)
        self._owner: Any = None  # the LlamaFamilyForCausalLM around it (not a submodule)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._owner.transformers_model().model(*args, **_for_transformers(kwargs))


class LlamaFamilyForCausalLM(nn.Module):
    """The model: `model` (the trunk) and `lm_head`, as transformers names them."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config
        self.model = Trunk(config)
        self.lm_head: nn.Module = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        object.__setattr__(self.model, "_owner", self)  # a back reference, not a child module

    @property
    def base_model(self) -> Trunk:
        return self.model

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens

    def set_input_embeddings(self, module: nn.Module) -> None:
        self.model.embed_tokens = module

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def set_output_embeddings(self, module: nn.Module) -> None:
        self.lm_head = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.transformers_model()(*args, **_for_transformers(kwargs))

    def transformers_model(self) -> Any:
        """transformers' class of this model around this model's own modules, built at the first
        call: every linear, embedding and norm weight is shared, so the two never disagree (nor
        does a forward hook on a shared module miss a call). Not registered as a submodule, so
        parameters(), state_dict() and to() see each weight once."""
        twin = self.__dict__.get(TRANSFORMERS_MODEL)
        if twin is None:
            twin = _twin_of(self)
            self.__dict__[TRANSFORMERS_MODEL] = twin
        return twin


def transformers_config(config: Any) -> Any:
    """transformers' own config class of `config`: itself, or for the project's own class a kept
    config is read back as (quantized_cache.kept_config), the model type's class with the same
    values."""
    if isinstance(config, LlamaFamilyConfig):
        return config.transformers_config()
    return config


def _for_transformers(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A forward's keyword arguments with the project's KV cache as transformers takes it."""
    for name in ("cache", "past_key_values"):
        if kwargs.get(name) is not None:
            kwargs[name] = for_transformers(kwargs[name])
    return kwargs


def _twin_of(model: LlamaFamilyForCausalLM) -> Any:
    from transformers import AutoModelForCausalLM

    dtype = model.dtype
    config = transformers_config(model.config)
    with torch.device("meta"):
        twin = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    ours = dict(model.named_modules())
    for name, theirs in list(twin.named_modules()):
        mine = ours.get(name)
        if mine is None or not name:
            continue
        if isinstance(mine, RMSNorm):
            theirs.weight = mine.weight  # the same Parameter: one weight, two modules
        elif isinstance(mine, RotaryEmbedding):
            _replace(twin, name, type(theirs)(config=config))  # its own tables, for real
        elif not list(theirs.children()):
            _replace(twin, name, mine)  # linears and embeddings (plain or quantized), activations
    meta = [name for name, t in [*twin.named_parameters(), *twin.named_buffers()] if t.is_meta]
    if meta:
        raise RuntimeError(f"transformers' model has weights this one lacks: {meta[:3]}")
    return twin.eval()


def _replace(root: nn.Module, dotted: str, module: nn.Module) -> None:
    parent_name, _, attribute = dotted.rpartition(".")
    parent = root.get_submodule(parent_name) if parent_name else root
    setattr(parent, attribute, module)
