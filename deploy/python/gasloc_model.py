#!/usr/bin/env python3
"""A plain PyTorch module of the gasloc model, loaded from an exported
directory (`gasloc-train export`, docs/operations.md) with nothing but torch
and the standard library (Debian's python3-torch).

The export uses GPT-2's Hugging Face names and layout, so this module is
GPT-2's architecture with our choices: learned token and position
embeddings, pre-LayerNorm blocks, fused QKV (c_attn, [q | k | v] along the
output), exact erf GELU, final LayerNorm, untied lm_head without bias,
vocabulary 256 (bytes). Conv1D weights are (in, out): y = x @ W + b.

    import gasloc_model
    model, config = gasloc_model.load_exported("DIR")      # eval mode, fp32
    logits = model(torch.tensor([list(b"ROMEO:")]))       # (1, 6, 256)
    bpb = gasloc_model.validation_bpb(model, open(corpus, "rb").read(),
                                      train_fraction=0.9, windows=64)

Command line:
    python3 gasloc_model.py DIR --prompt TEXT       # next-byte logits, JSON
    python3 gasloc_model.py DIR --bpb CORPUS [--train_fraction 0.9]
                                             [--eval_windows 64]
"""
import argparse
import json
import math
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256

_DTYPES = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2),
           "F16": (torch.float16, 2), "F64": (torch.float64, 8)}


def read_safetensors(path):
    """{name: tensor (float32)} and the metadata of a safetensors file,
    parsed by hand: u64 little-endian header length, JSON header, data."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: shorter than the 8-byte header length")
    (n,) = struct.unpack_from("<Q", raw, 0)
    if n > len(raw) - 8:
        raise ValueError(f"{path}: header length {n} runs past the end")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    data = memoryview(raw)[8 + n:]
    metadata = header.pop("__metadata__", {})
    tensors = {}
    for name, entry in header.items():
        dtype, size = _DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        shape = entry["shape"]
        count = math.prod(shape)
        if end - begin != count * size or end > len(data):
            raise ValueError(f"{path}: tensor {name} has bad data_offsets")
        if count == 0:
            t = torch.zeros(shape, dtype=dtype)
        else:
            t = torch.frombuffer(bytearray(data[begin:end]), dtype=dtype)
        tensors[name] = t.reshape(shape).float()
    return tensors, metadata


class Conv1D(nn.Module):
    """GPT-2's linear layer: weight (in, out), y = x @ W + b."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n_in, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return x @ self.weight + self.bias


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = Conv1D(d, 3 * d)
        self.c_proj = Conv1D(d, d)

    def forward(self, x):
        B, T, C = x.shape
        hd = C // self.heads
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, hd).transpose(1, 2)
                   for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        mask = torch.ones(T, T, dtype=torch.bool).tril()
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        return self.c_proj(y)


class Mlp(nn.Module):
    def __init__(self, d, inner):
        super().__init__()
        self.c_fc = Conv1D(d, inner)
        self.c_proj = Conv1D(inner, d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))  # exact erf GELU


class Block(nn.Module):
    def __init__(self, d, heads, inner, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=eps)
        self.attn = Attention(d, heads)
        self.ln_2 = nn.LayerNorm(d, eps=eps)
        self.mlp = Mlp(d, inner)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Transformer(nn.Module):
    def __init__(self, config):
        super().__init__()
        d = config["n_embd"]
        inner = config.get("n_inner") or 4 * d
        eps = config["layer_norm_epsilon"]
        self.wte = nn.Embedding(config["vocab_size"], d)
        self.wpe = nn.Embedding(config["n_positions"], d)
        self.h = nn.ModuleList(Block(d, config["n_head"], inner, eps)
                               for _ in range(config["n_layer"]))
        self.ln_f = nn.LayerNorm(d, eps=eps)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.wte(idx) + self.wpe(pos)[None]
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class ByteLM(nn.Module):
    """GPT2LMHeadModel's layout: transformer.* and an untied lm_head."""

    def __init__(self, config):
        super().__init__()
        self.config = dict(config)
        self.transformer = Transformer(config)
        self.lm_head = nn.Linear(config["n_embd"], config["vocab_size"],
                                 bias=False)

    def forward(self, idx):
        """idx: (B, T) int64 bytes -> logits (B, T, 256)."""
        return self.lm_head(self.transformer(idx))


def load_exported(directory):
    """The model of an exported directory (eval mode, float32) and its
    config.json. Every tensor of the file must be used and every parameter
    filled (load_state_dict strict)."""
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    if config.get("model_type") != "gpt2" or config.get("vocab_size") != VOCAB:
        raise ValueError(f"{directory}: not a gasloc export")
    if config.get("activation_function") != "gelu":
        raise ValueError("activation_function must be gelu (exact erf)")
    tensors, _ = read_safetensors(os.path.join(directory, "model.safetensors"))
    model = ByteLM(config)
    model.load_state_dict(tensors, strict=True)
    return model.eval(), config


def eval_window_starts(val_bytes, window, count):
    """docs/training.md, Evaluation: window k starts at
    floor(k * (val_bytes - window) / (count - 1))."""
    span = val_bytes - window
    if count == 1:
        return [0]
    return [k * span // (count - 1) for k in range(count)]


def split_corpus(corpus, train_fraction):
    """The validation part: bytes from floor(f * size). The fraction is
    the decimal written (0.9), as the C++ code reads the spec's float."""
    cut = math.floor(round(train_fraction, 7) * len(corpus))
    return corpus[cut:]


@torch.no_grad()
def validation_bpb(model, corpus, train_fraction=0.9, windows=64):
    """Mean over the evaluation windows of the mean next-byte cross-entropy,
    in bits per byte (docs/training.md, Evaluation)."""
    T = model.config["n_positions"]
    val = split_corpus(corpus, train_fraction)
    total = 0.0
    for start in eval_window_starts(len(val), T + 1, windows):
        w = torch.tensor(list(val[start:start + T + 1]), dtype=torch.int64)
        logits = model(w[None, :-1])[0]
        total += F.cross_entropy(logits.double(), w[1:]).item()
    return total / windows / math.log(2)


@torch.no_grad()
def next_byte_logits(model, prompt):
    """Logits (len(prompt), 256): row i predicts the byte after prompt[:i+1]."""
    idx = torch.tensor([list(prompt)], dtype=torch.int64)
    return model(idx)[0]


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--prompt")
    parser.add_argument("--bpb", metavar="CORPUS")
    parser.add_argument("--train_fraction", type=float, default=0.9)
    parser.add_argument("--eval_windows", type=int, default=64)
    args = parser.parse_args(argv[1:])
    model, _ = load_exported(args.directory)
    out = {}
    if args.prompt is not None:
        prompt = args.prompt.encode("utf-8")
        out["prompt"] = list(prompt)
        out["logits"] = next_byte_logits(model, prompt).tolist()
    if args.bpb is not None:
        with open(args.bpb, "rb") as f:
            corpus = f.read()
        out["val_bpb"] = validation_bpb(model, corpus, args.train_fraction,
                                        args.eval_windows)
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main(sys.argv)
