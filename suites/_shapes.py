"""Preset sweeps shared by the softmax-family and norm suites: real models' shapes and odd widths.

Row softmax in models (`SOFTMAX_PRESETS["models"]`):
- the output softmax over a vocabulary, 4096 tokens at a time: Llama 2 (32000 tokens), GPT-2 (50257),
  Llama 3 (128256), Qwen2 (151936, its padded embedding), Gemma (256000);
- attention scores of ViT-B/16 (12 heads): 197 tokens at 224x224 (a 14x14 grid and the class token),
  64 images; 577 tokens at 384x384 (24x24 + 1), 32 images. Rows = images x heads x tokens.
Norms in models (`NORM_PRESETS["models"]`): one row per token, the hidden size as the width:
ViT-S 384, BERT-base and ViT-B 768, BERT-large and ViT-L 1024, ViT-H 1280, GPT-3 XL 2048, Llama 7B
4096, Llama 13B 5120, Llama 70B 8192, GPT-3 175B 12288; 16384 tokens, and ViT-B/16's 64 x 197 tokens.
Odd widths (`"odd"`): primes and powers of two plus or minus one, where 16-byte packs do not divide a
row and row starts lose their alignment; also rows longer than one block can cache (100003, a prime,
and for the softmax family 262144, for the norms 65537).
"""

ODD_COLS = [31, 33, 127, 129, 1000, 1023, 1025, 4097, 8191, 12289, 30001, 65537]

SOFTMAX_PRESETS = {
    "models": [
        {"rows": [4096], "cols": [32000, 50257, 128256, 151936, 256000]},
        {"rows": [64 * 12 * 197], "cols": [197]},
        {"rows": [32 * 12 * 577], "cols": [577]},
    ],
    "odd": [
        {"rows": [49152], "cols": ODD_COLS},
        {"rows": [1024], "cols": [100003, 262144]},
    ],
}

NORM_PRESETS = {
    "models": [
        {"rows": [16384], "cols": [384, 768, 1024, 1280, 2048, 4096, 5120, 8192, 12288]},
        {"rows": [64 * 197], "cols": [384, 768, 1024]},
    ],
    "odd": [
        {"rows": [49152], "cols": ODD_COLS[:-1]},
        {"rows": [1024], "cols": [65537, 100003]},
    ],
}
