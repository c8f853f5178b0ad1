#!/usr/bin/env python3
"""Export -> PyTorch parity (issue 35): gasloc-train trains a TINY model a
few steps on tests/data/tinyshakespeare.txt, exports it as fp32 and bf16
safetensors, and deploy/python/gasloc_model.py (torch + the standard
library only) must give

  * the C++ model's next-byte logits (gasloc-train logits, fp32 compute)
    after every prefix of a 64-byte prompt: max abs difference <= 1e-4 from
    the fp32 export; <= 0.02 x max(1, max |logit|) from the bf16 export
    (its weights are rounded to 8 significant bits, 0.4%);
  * the validation bpb the C++ trainer printed after its last step (same 16
    windows): within 5e-4 from the fp32 export (equal to 3 decimals);
  * a config.json with GPT-2's field names and values.

Environment: GASLOC_BIN_DIR (the folder with gasloc-train), GASLOC_SOURCE_DIR
(the checkout), PYTHONPATH with deploy/python.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import gasloc_model

BIN = os.environ.get("GASLOC_BIN_DIR", "build/release/server")
SRC = os.environ.get("GASLOC_SOURCE_DIR", ".")
CORPUS = os.path.join(SRC, "tests/data/tinyshakespeare.txt")
EVAL_WINDOWS = 16
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def run(*args):
    out = subprocess.run([os.path.join(BIN, "gasloc-train"), *args],
                         capture_output=True, text=True, env=ENV, timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"gasloc-train {args[0]} failed: {out.stderr}")
    return out.stdout


class ModelExportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="gasloc_export_")
        cls.ckpt = os.path.join(cls.tmp.name, "tiny.ckpt")
        log = run("train", f"--data={CORPUS}", "--preset=TINY", "--steps=20",
                  "--warmup=5", "--threads=1", f"--eval_windows={EVAL_WINDOWS}",
                  "--eval_every=0", f"--checkpoint={cls.ckpt}")
        cls.cpp_bpb = float(re.search(r"eval step 20 val_bpb (\S+)", log)[1])
        cls.dirs = {}
        for dtype in ("fp32", "bf16"):
            cls.dirs[dtype] = os.path.join(cls.tmp.name, dtype)
            run("export", f"--checkpoint={cls.ckpt}",
                f"--out={cls.dirs[dtype]}", f"--dtype={dtype}")
        with open(CORPUS, "rb") as f:
            cls.corpus = f.read()
        val = gasloc_model.split_corpus(cls.corpus, 0.9)
        cls.prompt = val[1000:1064]
        cls.cpp_logits = json.loads(
            run("logits", f"--checkpoint={cls.ckpt}", "--threads=1",
                "--prompt=" + cls.prompt.decode("ascii")))["logits"]

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def max_logit_difference(self, dtype):
        model, _ = gasloc_model.load_exported(self.dirs[dtype])
        torch_logits = gasloc_model.next_byte_logits(model, self.prompt).tolist()
        self.assertEqual(len(torch_logits), len(self.cpp_logits))
        return max(abs(a - b) for row_c, row_t in zip(self.cpp_logits, torch_logits)
                   for a, b in zip(row_c, row_t))

    def test_fp32_logits_match_the_cpp_model(self):
        diff = self.max_logit_difference("fp32")
        print(f"fp32 export: max |logit difference| {diff:.3g}")
        self.assertLessEqual(diff, 1e-4)

    def test_bf16_logits_are_within_the_stated_bound(self):
        diff = self.max_logit_difference("bf16")
        scale = max(1.0, max(abs(x) for row in self.cpp_logits for x in row))
        print(f"bf16 export: max |logit difference| {diff:.3g} "
              f"(bound {0.02 * scale:.3g})")
        self.assertLessEqual(diff, 0.02 * scale)

    def test_validation_bpb_matches_the_cpp_evaluation(self):
        model, _ = gasloc_model.load_exported(self.dirs["fp32"])
        bpb = gasloc_model.validation_bpb(model, self.corpus, 0.9, EVAL_WINDOWS)
        print(f"val_bpb: C++ {self.cpp_bpb:.4f}, PyTorch {bpb:.6f}")
        # The C++ figure is printed to 4 decimals.
        self.assertLessEqual(abs(bpb - self.cpp_bpb), 5e-4 + 5e-5)

    def test_config_has_gpt2_fields(self):
        with open(os.path.join(self.dirs["fp32"], "config.json")) as f:
            config = json.load(f)
        expected = dict(model_type="gpt2", vocab_size=256, n_positions=64,
                        n_ctx=64, n_embd=64, n_layer=2, n_head=2, n_inner=256,
                        activation_function="gelu", layer_norm_epsilon=1e-5,
                        tie_word_embeddings=False, torch_dtype="float32")
        for key, value in expected.items():
            self.assertEqual(config[key], value, key)
        self.assertEqual(config["gasloc"]["metrics"]["step"], 20)
        tensors, metadata = gasloc_model.read_safetensors(
            os.path.join(self.dirs["bf16"], "model.safetensors"))
        self.assertEqual(metadata["format"], "pt")
        self.assertEqual(tuple(tensors["transformer.h.1.attn.c_attn.weight"].shape),
                         (64, 192))
        self.assertEqual(len(tensors), 2 + 12 * 2 + 3)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
