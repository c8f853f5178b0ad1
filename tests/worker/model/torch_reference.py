#!/usr/bin/env python3
"""An independent PyTorch implementation of the gasloc model (docs/model.md).

Used two ways:
  * by tests/worker/model/model_test.cc (parity): run as
        /usr/bin/python3 torch_reference.py IN OUT
    IN  = int32[6] (layers, d_model, heads, context, batch, length),
          float32[arena_floats] parameters in arena order (padded layout),
          uint8[batch * (length + 1)] tokens;
    OUT = float64 loss, float32[arena_floats] gradients in arena order.
  * by benchmarks (import this file): build_model(config, arena) returns a
    torch.nn.Module holding the given arena weights; tensor_table(config)
    gives the arena order; arena_floats(config) its padded size.

The arena pads every tensor to a multiple of 16 floats (common/arena.h).
"""
import math
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256
ALIGN = 16


def tensor_table(config):
    """[(name, shape, weight_decay)] in arena order."""
    d, T, L = config["d_model"], config["context"], config["layers"]
    t = [("tok_emb.weight", (VOCAB, d), True), ("pos_emb.weight", (T, d), True)]
    for l in range(L):
        p = f"blocks.{l}."
        t += [
            (p + "ln1.weight", (d,), False), (p + "ln1.bias", (d,), False),
            (p + "attn.qkv.weight", (3 * d, d), True),
            (p + "attn.qkv.bias", (3 * d,), False),
            (p + "attn.proj.weight", (d, d), True),
            (p + "attn.proj.bias", (d,), False),
            (p + "ln2.weight", (d,), False), (p + "ln2.bias", (d,), False),
            (p + "mlp.fc.weight", (4 * d, d), True),
            (p + "mlp.fc.bias", (4 * d,), False),
            (p + "mlp.fc2.weight", (d, 4 * d), True),
            (p + "mlp.fc2.bias", (d,), False),
        ]
    t += [("ln_f.weight", (d,), False), ("ln_f.bias", (d,), False),
          ("head.weight", (VOCAB, d), True)]
    return t


def arena_offsets(config):
    """[(name, shape, offset)] and the padded total, in floats."""
    out, offset = [], 0
    for name, shape, _ in tensor_table(config):
        size = int(np.prod(shape))
        out.append((name, shape, offset))
        offset += (size + ALIGN - 1) // ALIGN * ALIGN
    return out, offset


def arena_floats(config):
    return arena_offsets(config)[1]


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.heads
        q, k, v = self.qkv(x).split(C, dim=2)
        q = q.view(B, T, self.heads, hd).transpose(1, 2)
        k = k.view(B, T, self.heads, hd).transpose(1, 2)
        v = v.view(B, T, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~causal, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class Mlp(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc(x)))  # exact erf GELU


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = Mlp(d)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class ByteTransformer(nn.Module):
    def __init__(self, config):
        super().__init__()
        d = config["d_model"]
        self.config = dict(config)
        self.tok_emb = nn.Embedding(VOCAB, d)
        self.pos_emb = nn.Embedding(config["context"], d)
        self.blocks = nn.ModuleList(
            Block(d, config["heads"]) for _ in range(config["layers"]))
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        self.head = nn.Linear(d, VOCAB, bias=False)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.tok_emb(idx) + self.pos_emb(pos)[None]
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.reshape(-1))

    def load_arena(self, arena):
        params = dict(self.named_parameters())
        with torch.no_grad():
            for name, shape, offset in arena_offsets(self.config)[0]:
                size = int(np.prod(shape))
                params[name].copy_(torch.from_numpy(
                    np.array(arena[offset:offset + size], dtype=np.float32)
                    .reshape(shape)))

    def arena_grads(self):
        table, total = arena_offsets(self.config)
        out = np.zeros(total, dtype=np.float32)
        params = dict(self.named_parameters())
        for name, shape, offset in table:
            g = params[name].grad
            size = int(np.prod(shape))
            if g is not None:
                out[offset:offset + size] = g.detach().float().reshape(-1).numpy()
        return out


def build_model(config, arena=None):
    """config: dict with layers, d_model, heads, context. arena: optional
    float32 array of arena_floats(config) values (the C++ parameter arena)."""
    model = ByteTransformer(config)
    if arena is not None:
        model.load_arena(arena)
    return model


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: torch_reference.py IN OUT")
    raw = open(argv[1], "rb").read()
    layers, d_model, heads, context, batch, length = struct.unpack_from("<6i", raw, 0)
    config = dict(layers=layers, d_model=d_model, heads=heads, context=context)
    total = arena_floats(config)
    arena = np.frombuffer(raw, dtype="<f4", count=total, offset=24)
    token_bytes = batch * (length + 1)
    tokens_at = 24 + 4 * total
    if len(raw) != tokens_at + token_bytes:
        sys.exit(f"torch_reference.py: input is {len(raw)} bytes, expected "
                 f"{tokens_at + token_bytes}")
    tokens = np.frombuffer(raw, dtype=np.uint8, count=token_bytes,
                           offset=tokens_at).reshape(batch, length + 1)
    torch.manual_seed(0)
    model = build_model(config, arena)
    t = torch.from_numpy(tokens.astype(np.int64))
    loss = model(t[:, :-1], t[:, 1:])
    loss.backward()
    with open(argv[2], "wb") as f:
        f.write(struct.pack("<d", loss.item()))
        f.write(model.arena_grads().astype("<f4").tobytes())


if __name__ == "__main__":
    main(sys.argv)
