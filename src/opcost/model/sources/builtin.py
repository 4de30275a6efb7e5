"""Built-in models that torchvision lacks: a small BERT-like encoder and a small DLRM-style recommender.

Both are deliberately small (they must profile on a laptop CPU in minutes) but structurally faithful: the encoder is
built on ``nn.TransformerEncoder`` (multi-head attention runs functionally inside ``nn.MultiheadAttention``), the
recommender has embedding bags, bottom and top MLPs and DLRM's pairwise dot-product feature interaction.

A model may define ``example_inputs(batch, generator)``; opcost then uses it instead of ``input_shapes`` from config.
"""
from __future__ import annotations

import torch
from torch import nn


class TinyBert(nn.Module):
    """Token + position embeddings, ``layers`` post-norm encoder layers, a tanh pooler on the first token, a classifier.

    Per inference call (``layers=2``): leaf modules Embedding 1, Dropout 1 + 3 per layer, LayerNorm 1 + 2 per layer,
    Linear 2 per layer + pooler + classifier; functional: the position add, the sequence/batch transposes, the
    attention (in-projection, scaled-dot-product attention, out-projection), 2 residual adds and a relu per layer,
    the first-token select and the pooler tanh.
    """

    def __init__(self, vocab: int = 1000, seq_len: int = 64, d_model: int = 128, heads: int = 4, ff: int = 256,
                 layers: int = 2, classes: int = 2, dropout: float = 0.1):
        super().__init__()
        self.seq_len, self.vocab = seq_len, vocab
        self.tok = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(seq_len, 1, d_model))
        self.emb_norm = nn.LayerNorm(d_model)
        self.emb_drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout, batch_first=False)
        # batch_first=False keeps the layer off the fused inference fast path, so its operators stay visible
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.pooler = nn.Linear(d_model, d_model)
        self.classifier = nn.Linear(d_model, classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.tok(ids.t())  # (S, B, E)
        x = self.emb_drop(self.emb_norm(x + self.pos))
        x = self.encoder(x)
        return self.classifier(torch.tanh(self.pooler(x[0])))

    def example_inputs(self, batch: int, generator: torch.Generator) -> tuple:
        return (torch.randint(0, self.vocab, (batch, self.seq_len), generator=generator),)


class TinyDLRM(nn.Module):
    """DLRM-style recommender: bottom MLP on dense features, sum-pooled embedding bags on sparse features,
    pairwise dot-product interaction (bmm of the feature matrix with its transpose, strictly lower triangle),
    top MLP and a sigmoid."""

    def __init__(self, dense: int = 13, tables: int = 8, rows: int = 10000, dim: int = 32, pooling: int = 4,
                 bottom: tuple = (64,), top: tuple = (64,)):
        super().__init__()
        self.dense, self.tables, self.rows, self.pooling = dense, tables, rows, pooling
        self.bottom = _mlp([dense, *bottom, dim], last_relu=True)
        self.embeddings = nn.ModuleList(nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(tables))
        n = tables + 1
        li, lj = torch.tril_indices(n, n, offset=-1)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)
        self.top = _mlp([dim + n * (n - 1) // 2, *top, 1], last_relu=False)

    def forward(self, dense: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)
        feats = [x] + [emb(indices[k], offsets[k]) for k, emb in enumerate(self.embeddings)]
        t = torch.stack(feats, dim=1)  # (B, F, D)
        z = torch.bmm(t, t.transpose(1, 2))  # (B, F, F)
        inter = z[:, self.li, self.lj]
        return torch.sigmoid(self.top(torch.cat([x, inter], dim=1)))

    def example_inputs(self, batch: int, generator: torch.Generator) -> tuple:
        dense = torch.rand(batch, self.dense, generator=generator)
        indices = torch.randint(0, self.rows, (self.tables, batch * self.pooling), generator=generator)
        offsets = (torch.arange(batch) * self.pooling).repeat(self.tables, 1)
        return dense, indices, offsets


def _mlp(sizes: list, last_relu: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if last_relu or i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


BUILTIN = {"tiny_bert": TinyBert, "tiny_dlrm": TinyDLRM}
