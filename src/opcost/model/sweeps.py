"""The sweep points' models: each point a chain of ``depth`` identical layers of one operator (:func:`chain`, the
``model: opcost.model.sweeps:chain`` of a point's entry). Which points a config asks for, their names, defaults and
input shapes: :mod:`opcost.model.sweep_points`, which needs no torch (the workflow reads it for every dry run).
"""
from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from opcost.model.sweep_points import DEFAULTS


def _differentiable(module: nn.Module, x):
    """``x``, made to require grad in training: inside a model, the activations these layers read require grad (the
    layers before them have parameters), and a chain of parameter-free layers (ReLU, pooling, concat) would
    otherwise have nothing to back-propagate. The input is a leaf the workload made; the flag is set in place."""
    if module.training and torch.is_grad_enabled() and x.is_floating_point() and not x.requires_grad:
        x.requires_grad_(True)
    return x


class _Chain(nn.Sequential):
    """Identical layers in sequence (:func:`_differentiable` input)."""

    def forward(self, x):
        return super().forward(_differentiable(self, x))


class _Bags(nn.Module):
    """``depth`` sum-pooled EmbeddingBag tables, each called with the flat ids and bag offsets of ``x`` (ids, one
    bag per row), their vectors stacked per sample."""

    def __init__(self, num: int, dim: int, depth: int):
        super().__init__()
        self.bags = nn.ModuleList(nn.EmbeddingBag(num, dim, mode="sum") for _ in range(depth))

    def forward(self, x):
        ids, offsets = x.reshape(-1), torch.arange(0, x.numel(), x.shape[-1], device=x.device)
        return torch.stack([bag(ids, offsets) for bag in self.bags], dim=1)


class SweepRMSNorm(nn.Module):
    """Root-mean-square normalisation over the last dimension, computed as transformers' ``LlamaRMSNorm`` (and
    Qwen2's, Mistral's, T5's ``T5LayerNorm``) compute it, in Python: float32, ``pow(2).mean(-1)``, ``rsqrt``, two
    products. Its class name ends in ``RMSNorm``, so that :mod:`opcost.analysis.optypes` puts it in one twin group
    with theirs; ``torch.nn.RMSNorm`` (one fused operator) is another computation."""

    def __init__(self, hidden_size: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(dtype)


class SweepRotaryEmbedding(nn.Module):
    """The cosines and sines of rotary position embeddings for ``head_dim``, computed as transformers'
    ``LlamaRotaryEmbedding`` (the default rope type) computes them from the position ids, once per forward call;
    its class name ends in ``RotaryEmbedding``, a twin of theirs (:mod:`opcost.analysis.optypes`)."""

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.attention_scaling = 1.0

    def forward(self, x, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1).to(x.device)
        freqs = (inv.float() @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.attention_scaling).to(x.dtype), (emb.sin() * self.attention_scaling).to(x.dtype)


class TanhGELU(nn.Module):
    """GELU's tanh approximation computed in Python, as transformers' ``NewGELUActivation`` (GPT-2's
    ``gelu_new``) computes it: eight elementwise operators where ``nn.GELU`` runs one kernel."""

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class _GatedMLP(nn.Module):
    """A gated feed-forward block as Llama, Qwen2 and Mistral run it (``LlamaMLP``): gate and up projections,
    SiLU of the gate times the up projection (a ``mul`` outside leaf modules), down projection; no biases."""

    def __init__(self, features: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(features, inter, bias=False)
        self.up_proj = nn.Linear(features, inter, bias=False)
        self.down_proj = nn.Linear(inter, features, bias=False)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def _rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class _Rotary(nn.Module):
    """Rotary embeddings applied ``depth`` times, as transformers' ``apply_rotary_pos_emb`` applies them to a
    layer's queries (or keys): ``x * cos + rotate_half(x) * sin`` (mul, two slices, neg, cat, mul, add) at
    [batch, heads, seq, head_dim], the input a head-split view of a projection's output ([batch, seq, heads x
    head_dim] viewed and transposed: strided, as in the model), the cosines and sines from one
    :class:`SweepRotaryEmbedding` call per forward, as a model computes them once for all its layers."""

    def __init__(self, heads: int, head_dim: int, depth: int):
        super().__init__()
        self.heads, self.head_dim, self.depth = heads, head_dim, depth
        self.rotary_emb = SweepRotaryEmbedding(head_dim)

    def forward(self, x):
        x = _differentiable(self, x)
        b, n, _ = x.shape
        positions = torch.arange(n, device=x.device).unsqueeze(0).expand(b, -1)
        cos, sin = self.rotary_emb(x, positions)
        x = x.view(b, n, self.heads, self.head_dim).transpose(1, 2)
        for _ in range(self.depth):
            c, s = cos.unsqueeze(1), sin.unsqueeze(1)
            x = (x * c) + (_rotate_half(x) * s)
        return x


class _DecodeAttention(nn.Module):
    """``depth`` layers of a generation step's attention over a key/value cache (``decode_attention``), as a Hugging
    Face decoder runs them with transformers' ``DynamicCache``: each layer's keys and values of the step's token are
    concatenated to its cached ones (``DynamicLayer.update``: ``torch.cat`` along the tokens) and SDPA attends the
    step's queries over them as ``sdpa_attention_forward`` calls it for one query without a mask (not causal,
    ``enable_gqa`` where there are fewer key/value heads). ``caches``: each layer's cached keys and values, inputs of
    the point, as the prefill's are inputs of a decode step, and carried between its iterations as a decode step's cache
    is (:meth:`carried_tensors`)."""

    def __init__(self, heads: int, heads_kv: int, depth: int):
        super().__init__()
        self.heads, self.heads_kv, self.depth = heads, heads_kv or heads, depth
        self.keep = nn.Identity()  # a child, never called, makes the chain a non-leaf: its operators are recorded

    def forward(self, x, *caches):
        b, n, width = x.shape
        d = width // (self.heads + 2 * self.heads_kv)
        gqa = {"enable_gqa": True} if self.heads_kv < self.heads else {}
        for layer in range(self.depth):
            q, k, v = x.split([self.heads * d, self.heads_kv * d, self.heads_kv * d], dim=-1)
            q, k, v = (t.view(b, n, -1, d).transpose(1, 2) for t in (q, k, v))
            k = torch.cat((caches[2 * layer], k), dim=-2)
            v = torch.cat((caches[2 * layer + 1], v), dim=-2)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, scale=d ** -0.5,
                                                 is_causal=False, **gqa)
            out = out.transpose(1, 2).reshape(b, n, self.heads * d)
            kv = out[..., : self.heads_kv * d]  # the next layer's q, k and v in fresh memory
            x = torch.cat((out, kv, kv), dim=-1)
        return x

    def carried_tensors(self, inputs) -> list[torch.Tensor]:
        """The cached keys and values (every input after the first): a decode step's carried tensors
        (:meth:`opcost.model.workload.Workload.carried`)."""
        return list(inputs[1:])


class _Functional(nn.Module):
    """A chain of an operator called outside leaf modules (attention, cat, add, a batch norm computing its statistics
    as NF-Nets' and BiT's weight-standardised convolutions run it on their weights); its child makes it a non-leaf."""

    def __init__(self, op: str, depth: int, heads: int = 1, parts: int = 2, heads_kv: int = 0, causal: int = 0):
        super().__init__()
        self.op, self.depth, self.heads, self.parts = op, depth, heads, parts
        self.heads_kv, self.causal = heads_kv or heads, bool(causal)
        self.keep = nn.Identity()

    def _attention(self, x):
        """One attention layer; x: packed q, k, v per token, as a fused qkv projection writes them. With fewer key
        and value heads (grouped-query attention), q, k and v are slices of the packed input, each viewed and
        transposed to [batch, heads, seq, head_dim] as Llama's separate projections leave them, and SDPA is called
        as transformers' ``sdpa_attention_forward`` calls it (``enable_gqa``, the scale, ``is_causal``)."""
        b, n, width = x.shape
        if self.heads_kv == self.heads and not self.causal:  # ViT's and BERT's call
            q, k, v = x.view(b, n, 3, self.heads, width // (3 * self.heads)).permute(2, 0, 3, 1, 4).unbind(0)
            out = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, width // 3)
            return out.repeat(1, 1, 3)  # the next layer's q, k and v: three tensors' worth of memory, as in a model
        d = width // (self.heads + 2 * self.heads_kv)
        q, k, v = x.split([self.heads * d, self.heads_kv * d, self.heads_kv * d], dim=-1)
        q, k, v = (t.view(b, n, -1, d).transpose(1, 2) for t in (q, k, v))
        gqa = {"enable_gqa": True} if self.heads_kv < self.heads else {}
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, scale=d ** -0.5,
                                             is_causal=self.causal and n > 1, **gqa)
        out = out.transpose(1, 2).reshape(b, n, self.heads * d)
        # the next layer's q, k and v in fresh memory, as the next layer's projections write them
        kv = out[..., : self.heads_kv * d]
        return torch.cat((out, kv, kv), dim=-1)

    def forward(self, x):
        x = _differentiable(self, x)  # self.keep: never called, a child alone makes the chain a non-leaf
        for _ in range(self.depth):
            if self.op == "attention":
                x = self._attention(x)
            elif self.op == "batch_norm_stats":  # statistics computed over the batch and features, per channel
                x = F.batch_norm(x, None, None, training=True, momentum=0.0, eps=1e-5)
            elif self.op == "cat":
                x = torch.cat(x.chunk(self.parts, dim=1), dim=1)
            else:
                x = x + x
        return x


class SweepEvict(nn.Module):
    """The last layer of a sweep point's chain with ``evict`` (:mod:`opcost.model.sweep_points`): writes ``nbytes``
    of its own and returns its input, so that the chain's layers find their weights evicted from the caches at
    their next call, as inside a model whose weights exceed them. ``point`` (the point's operator and parameters)
    is one of its recorded parameters, so that each point's is a configuration of its own: a configuration rotates
    with the first workload that has it, and two points of one output shape would otherwise share one, leaving
    the second's rotation without it."""

    def __init__(self, nbytes: int, point: str = ""):
        super().__init__()
        self.nbytes, self.point = int(nbytes), point
        self.register_buffer("traffic", torch.zeros(max(1, nbytes // 4)), persistent=False)

    def forward(self, x):
        self.traffic.fill_(1.0)
        return x


def evict_bytes() -> int:
    """What :class:`SweepEvict` writes: twice this host's last-level cache (64 MiB where the host does not say)."""
    from opcost.measure.hostinfo import llc_bytes

    return 2 * (llc_bytes() or 32 * 1024 * 1024)


BLOCK_OPS = ("Conv2d", "BatchNorm2d", "ReLU", "GELU", "SiLU", "Hardswish", "Sigmoid", "Hardsigmoid",
             "AdaptiveAvgPool2d", "MaxPool2d")  # the ops a `block` point builds a CNN block around (_block)


def chain(op: str, depth: int = 4, evict: int = 0, block: int = 0, **p) -> nn.Module:
    """The sweep point's model: ``depth`` identical ``op`` layers with parameters ``p`` (see :data:`DEFAULTS`), each
    a CNN block around ``op`` with ``block`` (:data:`BLOCK_OPS`); with ``evict``, followed by a :class:`SweepEvict`."""
    layers = _block(op, depth, **p) if block and op in BLOCK_OPS else _layers(op, depth, **p)
    if not evict:
        return layers
    return _Evicting(layers, evict_bytes(), f"{op} depth {depth} " + " ".join(f"{k} {v}" for k, v in sorted(p.items())))


class _Evicting(nn.Module):
    """A chain followed by a :class:`SweepEvict` of its output."""

    def __init__(self, layers: nn.Module, nbytes: int, point: str):
        super().__init__()
        self.layers, self.evict = layers, SweepEvict(nbytes, point)

    def forward(self, *inputs):
        return self.evict(self.layers(*inputs))


def _block(op: str, depth: int, **p) -> nn.Module:
    """A chain of CNN blocks around ``op`` (see :mod:`opcost.model.sweep_points`): a convolution (stride 1, no
    ratio) before a BatchNorm2d and a ReLU; a BatchNorm2d or an activation after a 1x1 convolution (and a
    BatchNorm2d); a pooling layer after a 1x1 convolution, a BatchNorm2d and a ReLU, once. Any other Conv2d or
    MaxPool2d point: its plain chain."""
    q = {**DEFAULTS[op], **p}
    c = q["channels"]
    if op in ("Conv2d", "MaxPool2d") and (q["stride"] != 1 or q.get("ratio", 1) != 1):
        return _layers(op, depth, **p)
    if op == "Conv2d":
        k, g = q["kernel"], q["groups"]
        return _Chain(*(nn.Sequential(nn.Conv2d(c, c, k, padding=k // 2, groups=g), nn.BatchNorm2d(c), nn.ReLU())
                        for _ in range(depth)))
    head = lambda: [nn.Conv2d(c, c, 1), nn.BatchNorm2d(c)]  # noqa: E731 - a fresh pair per layer
    if op == "BatchNorm2d":
        return _Chain(*(nn.Sequential(*head(), nn.ReLU()) for _ in range(depth)))
    if op == "AdaptiveAvgPool2d":  # to one value per channel: a block of one
        return _Chain(nn.Sequential(*head(), nn.ReLU(), nn.AdaptiveAvgPool2d(1)))
    if op == "MaxPool2d":
        return _Chain(*(nn.Sequential(*head(), nn.ReLU(), nn.MaxPool2d(q["kernel"], 1, q["kernel"] // 2))
                        for _ in range(depth)))
    act = {"ReLU": nn.ReLU, "GELU": nn.GELU, "SiLU": nn.SiLU, "Hardswish": nn.Hardswish, "Sigmoid": nn.Sigmoid,
           "Hardsigmoid": nn.Hardsigmoid}[op]
    return _Chain(*(nn.Sequential(*head(), act()) for _ in range(depth)))


def _layers(op: str, depth: int, **p) -> nn.Module:
    p = {**DEFAULTS[op], **p}
    if op in ("Conv2d", "MaxPool2d") and p["stride"] != 1:
        depth = 1  # the layer changes the shape: a chain of one
    if op == "Conv2d":
        c, k, s, g, r = p["channels"], p["kernel"], p["stride"], p["groups"], p["ratio"]

        def conv(cin, cout, stride=1):
            return nn.Conv2d(cin, cout, k, stride=stride, padding=k // 2, groups=g)

        # with a ratio, a layer widens to ratio x channels and narrows back, as a MobileNet block's 1x1 convolutions
        layer = (lambda: conv(c, c, s)) if r == 1 else (lambda: nn.Sequential(conv(c, c * r, s), conv(c * r, c)))
        return _Chain(*(layer() for _ in range(depth)))
    if op == "Linear":
        return _Chain(*(nn.Linear(p["features"], p["features"]) for _ in range(depth)))
    if op == "Embedding":  # token ids in, vectors out: a chain of one
        return _Chain(nn.Embedding(p["num"], p["dim"]))
    if op == "EmbeddingBag":
        return _Bags(p["num"], p["dim"], depth)
    if op == "LayerNorm":
        return _Chain(*(nn.LayerNorm(p["features"]) for _ in range(depth)))
    if op == "RMSNorm":
        return _Chain(*(SweepRMSNorm(p["features"]) for _ in range(depth)))
    if op == "mlp":  # a transformer's feed-forward block: the one Linear pair a shape-keeping chain can hold
        f, wide = p["features"], p["features"] * p["ratio"]
        act = TanhGELU if p["act"] else nn.GELU
        return _Chain(*(nn.Sequential(nn.Linear(f, wide), act(), nn.Linear(wide, f)) for _ in range(depth)))
    if op == "gated_mlp":
        return _Chain(*(_GatedMLP(p["features"], p["inter"]) for _ in range(depth)))
    if op == "lm_head":  # hidden states to vocabulary logits: a chain of one
        return _Chain(nn.Linear(p["features"], p["vocab"], bias=False))
    if op == "rotary":
        return _Rotary(p["heads"], p["head_dim"], depth)
    if op == "decode_attention":
        return _DecodeAttention(p["heads"], p["heads_kv"], depth)
    if op == "AdaptiveAvgPool2d":  # to one value per channel: a chain of one
        return _Chain(nn.AdaptiveAvgPool2d(1))
    if op == "se":
        from torchvision.ops import SqueezeExcitation

        act, gate = (nn.SiLU, nn.Sigmoid) if p["act"] else (nn.ReLU, nn.Hardsigmoid)
        return _Chain(*(SqueezeExcitation(p["channels"], max(1, p["channels"] // p["squeeze"]), act, gate)
                        for _ in range(depth)))
    layer = {"BatchNorm2d": lambda: nn.BatchNorm2d(p["channels"]), "ReLU": nn.ReLU, "GELU": nn.GELU,
             "SiLU": nn.SiLU, "Hardswish": nn.Hardswish, "Sigmoid": nn.Sigmoid, "Hardsigmoid": nn.Hardsigmoid,
             "MaxPool2d": lambda: nn.MaxPool2d(p["kernel"], stride=p["stride"], padding=p["kernel"] // 2),
             "Dropout": lambda: nn.Dropout(p["p"])}.get(op)
    if layer is not None:
        return _Chain(*(layer() for _ in range(depth)))
    return _Functional(op, depth, p.get("heads", 1), p.get("parts", 2), p.get("heads_kv", 0), p.get("causal", 0))


